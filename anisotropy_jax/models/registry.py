"""Model families by Hugging Face `model_type`, and loading a local checkpoint of any of them.

A family is a module of `anisotropy_jax.models` that defines `MODEL_TYPES`; the registry finds
it by importing every module of the package (pkgutil), so a new family needs no edit here.

The family interface (every family module exposes all of it; `cfg` is the family's own frozen,
hashable config dataclass):

  MODEL_TYPES: tuple[str, ...]   the config.json "model_type" values it loads, e.g. ("llama",)
  CAUSAL: bool                   causal LM (True) or bidirectional encoder (False)
  config_from_hf(hf_config: dict, precision: str = "highest", source: str = "config.json") -> cfg
                                 PretrainedError (one line naming `source`) on an unsupported
                                 or missing setting; `precision` 'highest' | 'default' | 'bfloat16'
  convert(tensors: dict[str, np.ndarray], cfg, source: str) -> (params, unused: list[str])
                                 Hugging Face tensor names → {"params": tree}; PretrainedError
                                 naming `source` for missing or misshapen tensors
  init_params(cfg, key) -> params  the same architecture re-initialised as Hugging Face's
                                 `_init_weights` does (the untrained baseline)
  hidden_states_fn(cfg) -> f     f(params, tokens_BxL int32, token_types_BxL int32, mask_BxL bool)
                                 -> (S, B, L, D) float32 jitted; S = len(state_labels(cfg))
  state_labels(cfg) -> tuple[str, ...]
                                 "embeddings", "layer_1" … "layer_N" (each block's raw output,
                                 resid_post), then "final_norm" when the family has a final norm
                                 (so the last two entries are the anisotropy before / after it).
                                 Hugging Face's output_hidden_states is this list without
                                 "layer_N" for families with a final norm (it normalises the last
                                 layer), and exactly this list otherwise.
  apply_fn(cfg) -> f             f(params, tokens_BxL, mask_BxL) -> (final_hidden, probes): the
                                 Flax module's apply; probes {"embeddings", "blocks": [per-block
                                 probes of the contract in models/block.py], "final_hidden",
                                 "final_norm_in" (with a final norm)}
  embedding_matrices(params, cfg) -> {"input": (V, D), "output": (V, D) | None,
                                 "final_norm_scale": (D,) | None}   (numpy; "output" is the LM
                                 head / output embedding, the input one when tied, None when the
                                 checkpoint has none; encoders may give None for both extras)
  summary(cfg) -> dict           at least num_layers, d_model, num_heads, d_ff, vocab_size, max_len
                                 and "untrained_init" (one line describing init_params)
  pad_token_id(hf_config) -> int the id used to pad (padding is always masked)

`load(model_dir)` reads a directory (config.json + model.safetensors or sharded safetensors with
model.safetensors.index.json), or a GGUF file / a directory holding exactly one .gguf and no
config.json (`models/gguf.py`), and returns a `LoadedModel`. Files only: nothing is compiled.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import pathlib
import pkgutil
from types import ModuleType
from typing import Any

import jax
import numpy as np

from anisotropy_jax.models import bert, gguf
from anisotropy_jax.models.bert import CONFIG_FILE, PretrainedError

INTERFACE = ("MODEL_TYPES", "CAUSAL", "config_from_hf", "convert", "init_params",
             "hidden_states_fn", "state_labels", "apply_fn", "embedding_matrices", "summary",
             "pad_token_id")


@functools.lru_cache(maxsize=1)
def _discover() -> tuple[dict[str, ModuleType], dict[str, str]]:
    """(model_type → complete family module, model_type → what an incomplete family lacks), over
    every module of anisotropy_jax.models with MODEL_TYPES. RuntimeError when two modules claim
    one model_type."""
    package = importlib.import_module("anisotropy_jax.models")
    found: dict[str, ModuleType] = {}
    incomplete: dict[str, str] = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        types = getattr(module, "MODEL_TYPES", None)
        if not types:
            continue
        lacking = [name for name in INTERFACE if not hasattr(module, name)]
        for model_type in types:
            if model_type in found or model_type in incomplete:
                raise RuntimeError(f"model_type {model_type!r} claimed twice ({module.__name__})")
            if lacking:
                incomplete[model_type] = f"{module.__name__} lacks {', '.join(lacking)}"
            else:
                found[model_type] = module
    return found, incomplete


def families() -> dict[str, ModuleType]:
    """model_type → family module, for every module of anisotropy_jax.models that defines
    MODEL_TYPES and the whole interface (module docstring)."""
    return dict(_discover()[0])


def family(hf_config: dict[str, Any], source: str = CONFIG_FILE) -> ModuleType:
    """The family module of a parsed config.json (PretrainedError naming an unknown type)."""
    model_type = hf_config.get("model_type")
    known, incomplete = _discover()
    if model_type in incomplete:
        raise PretrainedError(f"{source}: model_type={model_type!r} is not usable yet: "
                              f"{incomplete[model_type]}")
    if model_type not in known:
        raise PretrainedError(
            f"{source}: unsupported architecture model_type={model_type!r} (architectures="
            f"{list(hf_config.get('architectures') or [])}); supported: {', '.join(sorted(known))}")
    return known[model_type]


@dataclasses.dataclass(frozen=True)
class LoadedModel:
    """A checkpoint read from disk: its family module, config, parameters, the parsed
    config.json (for GGUF: the equivalent mapping), the tensors not used, and the tokenizer:
    `tokenizer_file` (tokenizer.json) or `tokenizer_json` (a JSON string, from GGUF)."""

    model_dir: pathlib.Path
    family: ModuleType
    config: Any
    params: Any
    hf_config: dict[str, Any]
    unused_tensors: list[str]
    tokenizer_file: pathlib.Path | None
    tokenizer_json: str | None = None
    weights_file: str = ""

    @property
    def num_parameters(self) -> int:
        return int(sum(np.size(x) for x in jax.tree.leaves(self.params)))

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(self.family.state_labels(self.config))


def read_config(model_dir: str | pathlib.Path, precision: str = "highest"
                ) -> tuple[ModuleType, Any, dict[str, Any]]:
    """(family, cfg, parsed config) of a checkpoint (GGUF: from its metadata), reading config
    files only, not weights. PretrainedError naming the file on any problem."""
    path = pathlib.Path(model_dir)
    gguf_file = gguf.find_gguf(path)
    if gguf_file is not None:
        hf_config = gguf.read_metadata(gguf_file)
        source = str(gguf_file)
    else:
        hf_config = bert.read_hf_config(path)
        source = str(path / CONFIG_FILE)
    fam = family(hf_config, source)
    return fam, fam.config_from_hf(hf_config, precision=precision, source=source), hf_config


def load(model_dir: str | pathlib.Path, precision: str = "highest") -> LoadedModel:
    """A local checkpoint (module docstring) → LoadedModel. Raises PretrainedError (one line,
    naming the file) when a file is missing, unreadable or truncated, the model_type is not
    supported, or a tensor is missing or misshapen. Nothing is compiled."""
    path = pathlib.Path(model_dir)
    fam, cfg, hf_config = read_config(path, precision)
    gguf_file = gguf.find_gguf(path)
    if gguf_file is not None:
        tensors = gguf.read_tensors(gguf_file, hf_config)
        params, unused = fam.convert(tensors, cfg, source=str(gguf_file))
        return LoadedModel(path, fam, cfg, params, hf_config, unused, None,
                           gguf.tokenizer_json(gguf_file), str(gguf_file))
    tensors = bert.load_state_dict(path)
    params, unused = fam.convert(tensors, cfg, source=str(path / bert.WEIGHTS_FILE))
    tokenizer = path / bert.TOKENIZER_FILE
    return LoadedModel(path, fam, cfg, params, hf_config, unused,
                       tokenizer if tokenizer.is_file() else None, None,
                       str(path / bert.WEIGHTS_FILE))
