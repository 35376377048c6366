"""A model family as a value: what differs between families is data and a few functions; what
they share (jitted apply, hidden-state stacking, initialisation, labels, caching) is written once,
here. Each family module ends with one `Family` value, `FAMILY`; `models/registry.py` finds them.

A family states (docs/EXTENDING.md walks through adding one):
  name, model_types    its name and the config.json "model_type" values it loads
  module(cfg)          the Flax module; module.apply(params, x[, mask][, token_types_BxL=types])
                       → (final_hidden, probes {"embeddings", "blocks": [block probes],
                       "final_hidden", "final_norm_in" with a final norm})
  config_from_hf(hf_config, precision="highest", source="config.json") → cfg
                       PretrainedError (one line naming `source`) on an unsupported setting
  config_keys          every config.json key the family reads, and those it knows to be
                       irrelevant (listed explicitly); `read_config` refuses any other key
  convert(tensors, cfg, source) → ({"params": tree}, unused tensor names)   its name table
  example_input(cfg)   an input that fixes the parameter shapes for `init`
  num_layers(cfg), summary(cfg) (at least num_layers, d_model, num_heads, d_ff, vocab_size,
                       max_len and "untrained_init"), embedding_matrices(params, cfg)
  causal, modality ("text" | "image" | "audio"), final_norm (the states end with the final
                       norm's output; a function of cfg where the config decides),
                       takes_mask, takes_token_types
and optionally pad_token_id(hf_config), text_encoder(hf_config) (checkpoints without
tokenizer.json), hidden_states(probes, cfg) and state_labels(cfg) (CANINE, ResNet),
after_init(params, cfg) (DINOv2's layer scale), and native_formats: the `NativeFormat`s of the
files the family reads besides a Hugging Face directory (Llama and Gemma-3: GGUF; DINOv2: ONNX;
Whisper: CTranslate2), so that the registry and the formats name no family.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.models.formats.checkpoint import CONFIG_FILE, NativeFormat, check_keys, int_or

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class TextEncoder:
    """A family's own tokenizer (no tokenizer.json): `encode(text)` → ids with the family's
    special tokens, the first `num_leading` and last `num_trailing` of which are special (kept when
    a sequence is truncated, as `tokenizers` keeps [CLS]/[SEP]). `ids_are_rows`: ids index an
    embedding table of `summary()["vocab_size"]` rows (ByT5); False for hashed ids (CANINE's code
    points)."""

    name: str
    encode: Callable[[str], list[int]]
    num_leading: int
    num_trailing: int
    ids_are_rows: bool = True


def pad_token_id(hf_config: dict[str, Any]) -> int:
    """config.json's pad_token_id, else 0 (padding is masked anyway)."""
    return int_or(hf_config, ("pad_token_id",), 0)


def block_summary(block: Any, num_layers: int, vocab_size: int | None, max_len: int,
                  untrained_init: str, **extra: Any) -> dict[str, Any]:
    """A family's `summary`: the widths every study reports, then the family's own entries, then
    the one line describing `init_params`."""
    return {"num_layers": num_layers, "d_model": block.d_model, "num_heads": block.num_heads,
            "d_ff": block.d_ff, "vocab_size": vocab_size, "max_len": max_len, **extra,
            "untrained_init": untrained_init}


def token_embedding_only(params: Any, cfg: Any) -> dict[str, Any]:
    """`embedding_matrices` of an encoder checkpoint with a token embedding and no output
    embedding or final norm (BERT, MPNet)."""
    del cfg
    return {"input": np.asarray(params["params"]["token_embedding"]["embedding"]),
            "output": None, "final_norm_scale": None}


def token_ids(cfg: Any) -> Array:
    """The example input of a text family: one sequence of two token ids."""
    del cfg
    return jnp.zeros((1, 2), jnp.int32)


@dataclasses.dataclass(frozen=True, eq=False)
class Family:
    """One model family (module docstring). Hashable by identity, so that its jitted functions
    are cached per (family, config)."""

    name: str
    model_types: tuple[str, ...]
    module: Callable[[Any], Any]
    config_from_hf: Callable[..., Any]
    convert: Callable[..., tuple[Any, list[str]]]
    num_layers: Callable[[Any], int]
    summary: Callable[[Any], dict[str, Any]]
    embedding_matrices: Callable[[Any, Any], dict[str, Any]]
    example_input: Callable[[Any], Array] = token_ids
    causal: bool = False
    modality: str = "text"
    final_norm: bool | Callable[[Any], bool] = False
    takes_mask: bool = True
    takes_token_types: bool = False
    pad_token_id: Callable[[dict[str, Any]], int] = pad_token_id
    text_encoder: Callable[[dict[str, Any]], TextEncoder | None] | None = None
    hidden_states: Callable[[dict[str, Any], Any], Any] | None = None
    state_labels: Callable[[Any], tuple[str, ...]] | None = None
    after_init: Callable[[Any, Any], Any] | None = None
    config_keys: frozenset[str] = frozenset()
    native_formats: tuple[NativeFormat, ...] = ()

    def __post_init__(self):
        if self.state_labels is None:
            object.__setattr__(self, "state_labels", functools.partial(default_labels, self))

    def read_config(self, hf_config: dict[str, Any], precision: str = "highest",
                    source: str = CONFIG_FILE) -> Any:
        """`config_from_hf`, after refusing the keys the family does not know (`config_keys`;
        PretrainedError naming `source` and the key)."""
        check_keys(hf_config, self.config_keys, source, self.name)
        return self.config_from_hf(hf_config, precision=precision, source=source)

    def apply(self, cfg: Any, params: Any, x: Any, token_types_BxL: Any = None,
              mask_BxL: Any = None) -> tuple[Array, dict[str, Any]]:
        """The module's forward, un-jitted: (final_hidden, probes)."""
        args = (x, mask_BxL) if self.takes_mask else (x,)
        kwargs = {"token_types_BxL": token_types_BxL} if self.takes_token_types else {}
        return self.module(cfg).apply(params, *args, **kwargs)

    def apply_fn(self, cfg: Any) -> Callable[..., Any]:
        """jit f(params, x, mask=None) → (final_hidden, probes), cached per config."""
        return _jitted(self, cfg, "apply")

    def hidden_states_fn(self, cfg: Any) -> Callable[..., Any]:
        """jit f(params, x, token_types, mask) → (S, B, L, D) float32, S = len(state_labels):
        the embeddings, every block's output (resid_post) and, with a final norm, its output;
        cached per config (a second analysis reuses the compiled shapes)."""
        return _jitted(self, cfg, "hidden_states")

    def init_params(self, cfg: Any, key: Array) -> Any:
        """The architecture re-initialised as the family's Hugging Face `_init_weights` does
        (the untrained baseline; `summary(cfg)["untrained_init"]` says how)."""
        params = _jitted(self, cfg, "init")(key, self.example_input(cfg))
        return params if self.after_init is None else self.after_init(params, cfg)

    def states(self, probes: dict[str, Any], cfg: Any) -> Any:
        """The hidden states of a forward's probes, stacked (S, B, L, D) (`hidden_states_fn`)."""
        if self.hidden_states is not None:
            return self.hidden_states(probes, cfg)
        states = [probes["embeddings"]] + [block["resid_post"] for block in probes["blocks"]]
        if self.has_final_norm(cfg):
            states.append(probes["final_hidden"])
        return jnp.stack(states)

    def has_final_norm(self, cfg: Any) -> bool:
        """`final_norm`, or its value for `cfg` where it is a function of the config (wav2vec
        2.0: only the pre-LN variant ends with a norm)."""
        return bool(self.final_norm(cfg)) if callable(self.final_norm) else self.final_norm


def default_labels(family: Family, cfg: Any) -> tuple[str, ...]:
    """"embeddings", "layer_1" … "layer_N" (each block's output) and, with a final norm,
    "final_norm" (so the last two are the anisotropy before / after it). Hugging Face's
    output_hidden_states is this list without "layer_N" for families with a final norm (it
    normalises the last layer), and exactly this list otherwise."""
    labels = ("embeddings",) + tuple(f"layer_{i + 1}" for i in range(family.num_layers(cfg)))
    return labels + (("final_norm",) if family.has_final_norm(cfg) else ())


@functools.lru_cache(maxsize=32)
def _jitted(family: Family, cfg: Any, kind: str) -> Callable[..., Any]:
    if kind == "init":
        return jax.jit(family.module(cfg).init)
    if kind == "apply":
        return jax.jit(lambda params, x, mask=None: family.apply(cfg, params, x, None, mask))

    @jax.jit
    def forward(params, x, token_types=None, mask=None):
        _, probes = family.apply(cfg, params, x, token_types, mask)
        return family.states(probes, cfg)

    return forward
