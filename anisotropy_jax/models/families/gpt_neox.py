"""The GPT-NeoX family (Pythia): config translation and name table onto `models/transformer.py`.

GPT-NeoX is the pre-LN decoder with rotary positions on the first int(Dh · rotary_pct) dims of
each head (Pythia: 25 %), parallel attention and MLP (`use_parallel_residual`: x + attn(ln1(x)) +
mlp(ln2(x))), LayerNorm, exact GELU, untied input (embed_in) and output (embed_out) embeddings and
a final LayerNorm. Its fused query_key_value weight (3D, D) is laid out per head as
[q_h, k_h, v_h] (Hugging Face views it as (H, 3·Dh) and chunks the last axis).

  embed_in.weight                           token_embedding
  layers.i.input_layernorm                  block_i.attention_norm
  layers.i.post_attention_layernorm         block_i.mlp_norm
  layers.i.attention.query_key_value        block_i.attention.{query,key,value} (per-head split)
  layers.i.attention.dense                  block_i.attention.out
  layers.i.mlp.dense_h_to_4h, dense_4h_to_h block_i.mlp.fc_in, fc_out
  final_layer_norm                          final_norm
  embed_out.weight (GPTNeoXForCausalLM)     output (the untied LM head, kept for the
                                            embedding analysis)

A "gpt_neox." prefix is accepted. Rotary settings are read by `rotary.config_settings` (config.json's
"rope_parameters" of transformers 5, or the older "rotary_pct"/"rotary_emb_base"); only the default
(unscaled) rotary is supported. The untrained baseline is Hugging Face's init: N(0, initializer_range²).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from anisotropy_jax.config import BlockConfig, TransformerConfig
from anisotropy_jax.models import rotary
from anisotropy_jax.models.formats.checkpoint import (PretrainedError, TensorReader, config_errors,
                                              detect_prefix, require_keys)
from anisotropy_jax.models.transformer import (DECODER_KEYS, causal_lm_family,
                                               rotary_decoder_config, untied_head)


def config_from_hf(hf_config: dict[str, Any], precision: str = "highest",
                   source: str = "config.json") -> TransformerConfig:
    require_keys(hf_config, ("hidden_size", "num_attention_heads", "num_hidden_layers",
                                     "intermediate_size", "vocab_size"), source)
    if hf_config.get("add_cross_attention", False):
        raise PretrainedError(f"{source}: unsupported settings: add_cross_attention")
    with config_errors(source):
        fraction, base = rotary.config_settings(hf_config, default_fraction=0.25)
        d, heads = int(hf_config["hidden_size"]), int(hf_config["num_attention_heads"])
        if d % heads:
            raise ValueError(f"hidden_size {d} is not divisible by num_attention_heads {heads}")
        bias = bool(hf_config.get("attention_bias", True))
        std = float(hf_config.get("initializer_range", 0.02))
        block = BlockConfig(
            d_model=d, num_heads=heads, d_ff=int(hf_config["intermediate_size"]),
            norm_position="pre", layer_norm_eps=float(hf_config.get("layer_norm_eps", 1e-5)),
            activation=hf_config.get("hidden_act", "gelu"),
            parallel_residual=bool(hf_config.get("use_parallel_residual", True)),
            rotary_dims=rotary.rotary_dims_for(d // heads, fraction), rotary_base=base, qkv_bias=bias,
            out_bias=bias, mlp_bias=True, causal=True, init_std=std, residual_init_std=std,
            precision=precision)
        return rotary_decoder_config(block, hf_config)


def _split_fused_qkv(fused: dict[str, Any], heads: int, dh: int) -> dict[str, Any]:
    """(D, 3D) kernel / (3D,) bias laid out per head as [q_h k_h v_h] → query, key, value."""
    kernel, bias = fused["kernel"], fused.get("bias")
    out: dict[str, Any] = {}
    for i, name in enumerate(("query", "key", "value")):
        part: dict[str, Any] = {"kernel": None}
        if kernel is not None:
            k = kernel.reshape(kernel.shape[0], heads, 3, dh)[:, :, i, :]
            part["kernel"] = np.ascontiguousarray(k.reshape(kernel.shape[0], heads * dh))
        if "bias" in fused:
            part["bias"] = None if bias is None else bias.reshape(heads, 3, dh)[:, i, :].reshape(-1)
        out[name] = part
    return out


def convert(tensors: dict[str, np.ndarray], cfg: TransformerConfig,
            source: str = "model.safetensors") -> tuple[dict[str, Any], list[str]]:
    """Hugging Face GPT-NeoX tensors → ({"params": tree} of Transformer, unused names)."""
    read = TensorReader(tensors, detect_prefix(tensors, "embed_in.weight", ("gpt_neox.",)))
    block = cfg.block
    d, f, heads, dh = block.d_model, block.d_ff, block.num_heads, block.d_head
    params: dict[str, Any] = {
        "token_embedding": {"embedding": read.get("embed_in.weight", (cfg.vocab_size, d))},
        "final_norm": read.norm("final_layer_norm", d, bias=True),
    }
    params.update(untied_head(read, cfg, "embed_out.weight"))
    for i in range(cfg.num_layers):
        hf = f"layers.{i}."
        fused = read.linear(hf + "attention.query_key_value", d, 3 * d, block.bias("qkv"))
        attention = _split_fused_qkv(fused, heads, dh)
        attention["out"] = read.linear(hf + "attention.dense", d, d, block.bias("out"))
        params[f"block_{i}"] = {
            "attention_norm": read.norm(hf + "input_layernorm", d, bias=True),
            "attention": attention,
            "mlp_norm": read.norm(hf + "post_attention_layernorm", d, bias=True),
            "mlp": {"fc_in": read.linear(hf + "mlp.dense_h_to_4h", d, f, True),
                    "fc_out": read.linear(hf + "mlp.dense_4h_to_h", f, d, True)},
        }
    return read.finish(params, source, r"layers\.(\d+)\.", cfg.num_layers)


CONFIG_KEYS = DECODER_KEYS | set(rotary.CONFIG_KEYS) | {
    "hidden_size", "num_attention_heads", "intermediate_size", "add_cross_attention",
    "attention_bias", "initializer_range", "layer_norm_eps", "hidden_act",
    "use_parallel_residual", "is_decoder"}  # is_decoder: GPT-NeoX is causal whatever it says

FAMILY = causal_lm_family("gpt_neox", ("gpt_neox",), config_from_hf, convert,
                          config_keys=CONFIG_KEYS)
