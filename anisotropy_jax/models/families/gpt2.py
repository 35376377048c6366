"""The GPT-2 family: config translation and name table onto `models/transformer.Transformer`.

GPT-2 is the pre-LN decoder with learned positions, LayerNorm, the tanh GELU ("gelu_new"), biases
everywhere, tied input/output embeddings and a final LayerNorm `ln_f`. Hugging Face's Conv1D
weights are already (in, out), so they are not transposed (c_attn (D, 3D) is split into q, k, v).
The training study's clm is this architecture: `studies/series/export.py` writes a run under
these names (`to_hf`, the inverse of `convert`). A "transformer." prefix (GPT2LMHeadModel) is
accepted; lm_head.weight (tied) is unused. The untrained baseline is Hugging Face's init: N(0, 0.02²) with
the c_proj kernels N(0, 0.02²/(2N)).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from anisotropy_jax.config import BlockConfig, TransformerConfig
from anisotropy_jax.models.formats.checkpoint import (tree_get, PretrainedError, TensorReader, config_errors,
                                              detect_prefix, require_keys)
from anisotropy_jax.models.transformer import causal_lm_family

ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh", "gelu", "relu")
# Hugging Face name → parameter path ("{i}" = the layer); Conv1D weights are (in, out) kernels.
NAMES = {
    "wte.weight": ("token_embedding", "embedding"),
    "wpe.weight": ("position_embedding", "embedding"),
    "ln_f.weight": ("final_norm", "scale"), "ln_f.bias": ("final_norm", "bias"),
    "h.{i}.ln_1.weight": ("block_{i}", "attention_norm", "scale"),
    "h.{i}.ln_1.bias": ("block_{i}", "attention_norm", "bias"),
    "h.{i}.ln_2.weight": ("block_{i}", "mlp_norm", "scale"),
    "h.{i}.ln_2.bias": ("block_{i}", "mlp_norm", "bias"),
    "h.{i}.attn.c_proj.weight": ("block_{i}", "attention", "out", "kernel"),
    "h.{i}.attn.c_proj.bias": ("block_{i}", "attention", "out", "bias"),
    "h.{i}.mlp.c_fc.weight": ("block_{i}", "mlp", "fc_in", "kernel"),
    "h.{i}.mlp.c_fc.bias": ("block_{i}", "mlp", "fc_in", "bias"),
    "h.{i}.mlp.c_proj.weight": ("block_{i}", "mlp", "fc_out", "kernel"),
    "h.{i}.mlp.c_proj.bias": ("block_{i}", "mlp", "fc_out", "bias"),
}
# c_attn holds [q k v] along its output axis.
QKV_NAMES = {"h.{i}.attn.c_attn.weight": "kernel", "h.{i}.attn.c_attn.bias": "bias"}


def config_from_hf(hf_config: dict[str, Any], precision: str = "highest",
                   source: str = "config.json") -> TransformerConfig:
    require_keys(hf_config, ("n_embd", "n_head", "n_layer", "vocab_size"), source)
    act = hf_config.get("activation_function", "gelu_new")
    unsupported = []
    if act not in ACTIVATIONS:
        unsupported.append(f"activation_function={act!r} (supported: {list(ACTIVATIONS)})")
    if not hf_config.get("scale_attn_weights", True):
        unsupported.append("scale_attn_weights=false")
    if hf_config.get("scale_attn_by_inverse_layer_idx", False):
        unsupported.append("scale_attn_by_inverse_layer_idx=true")
    if hf_config.get("add_cross_attention", False):
        unsupported.append("add_cross_attention=true")
    if unsupported:
        raise PretrainedError(f"{source}: unsupported settings: {'; '.join(unsupported)}")
    d, layers = int(hf_config["n_embd"]), int(hf_config["n_layer"])
    std = float(hf_config.get("initializer_range", 0.02))
    with config_errors(source):
        heads = int(hf_config["n_head"])
        if d % heads:
            raise ValueError(f"n_embd {d} is not divisible by n_head {heads}")
        block = BlockConfig(
            d_model=d, num_heads=heads, d_ff=int(hf_config.get("n_inner") or 4 * d),
            norm_position="pre", layer_norm_eps=float(hf_config.get("layer_norm_epsilon", 1e-5)),
            activation=act, causal=True, init_std=std,
            residual_init_std=std / math.sqrt(2 * layers), precision=precision)
        return TransformerConfig(
            block=block, num_layers=layers, vocab_size=int(hf_config["vocab_size"]),
            max_len=int(hf_config.get("n_positions", 1024)), embedding_norm=False,
            final_norm=True, tie_embeddings=True, output_bias=False)


def parameter_shapes(cfg: TransformerConfig) -> dict[str, tuple[int, ...]]:
    """The Hugging Face shape of every name of NAMES and QKV_NAMES (with "{i}" kept)."""
    d, f, v = cfg.block.d_model, cfg.block.d_ff, cfg.vocab_size
    shapes = {"wte.weight": (v, d), "wpe.weight": (cfg.max_len, d),
              "h.{i}.attn.c_attn.weight": (d, 3 * d), "h.{i}.attn.c_attn.bias": (3 * d,),
              "h.{i}.attn.c_proj.weight": (d, d), "h.{i}.mlp.c_fc.weight": (d, f),
              "h.{i}.mlp.c_fc.bias": (f,), "h.{i}.mlp.c_proj.weight": (f, d)}
    return {name: shapes.get(name, (d,)) for name in (*NAMES, *QKV_NAMES)}


def layer_names(cfg: TransformerConfig):
    """(Hugging Face name, parameter path) of every tensor but c_attn's, layers expanded."""
    for name, path in NAMES.items():
        layers = range(cfg.num_layers) if "{i}" in name else (None,)
        for i in layers:
            yield name.format(i=i), tuple(p.format(i=i) for p in path), name


def convert(tensors: dict[str, np.ndarray], cfg: TransformerConfig,
            source: str = "model.safetensors") -> tuple[dict[str, Any], list[str]]:
    """Hugging Face GPT-2 tensors → ({"params": tree} of Transformer, unused names)."""
    read = TensorReader(tensors, detect_prefix(tensors, "wte.weight", ("transformer.",)))
    shapes, params = parameter_shapes(cfg), {}
    for hf_name, path, pattern in layer_names(cfg):
        _set(params, path, read.get(hf_name, shapes[pattern]))
    for i in range(cfg.num_layers):
        for name, leaf in QKV_NAMES.items():
            fused = read.get(name.format(i=i), shapes[name])
            parts = [None] * 3 if fused is None else np.split(fused, 3, axis=-1)
            for part, qkv in zip(parts, ("query", "key", "value")):
                _set(params, (f"block_{i}", "attention", qkv, leaf),
                     None if part is None else np.ascontiguousarray(part))
    return read.finish(params, source, r"h\.(\d+)\.", cfg.num_layers)


def to_hf(params: dict[str, Any], cfg: TransformerConfig) -> dict[str, np.ndarray]:
    """The inverse of `convert`: a "params" tree (numpy) under GPT2Model's tensor names (Conv1D
    weights are our (in, out) kernels; q, k and v concatenated into c_attn)."""
    out = {hf: tree_get(params, path) for hf, path, _ in layer_names(cfg)}
    for i in range(cfg.num_layers):
        attention = params[f"block_{i}"]["attention"]
        for name, leaf in QKV_NAMES.items():
            out[name.format(i=i)] = np.concatenate(
                [attention[qkv][leaf] for qkv in ("query", "key", "value")], axis=-1)
    return out


def _set(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


# reorder_and_upcast_attn only changes the precision of half-precision attention (computed in
# float32 here); n_ctx is the old name of n_positions' context, unused by the model;
# tie_word_embeddings concerns the LM head only (the family stops at the final norm).
CONFIG_KEYS = frozenset({
    "n_embd", "n_head", "n_layer", "vocab_size", "activation_function", "scale_attn_weights",
    "scale_attn_by_inverse_layer_idx", "add_cross_attention", "initializer_range", "n_inner",
    "layer_norm_epsilon", "n_positions", "reorder_and_upcast_attn", "n_ctx",
    "tie_word_embeddings"})

FAMILY = causal_lm_family("gpt2", ("gpt2",), config_from_hf, convert, config_keys=CONFIG_KEYS)
