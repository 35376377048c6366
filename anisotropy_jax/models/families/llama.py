"""The Llama family (SmolLM2, ...): config translation and name table onto `models/transformer.py`.

Llama is the pre-norm decoder with RMSNorm, rotary positions on the whole head (rotate_half
convention), grouped-query attention (num_key_value_heads ≤ num_attention_heads), the SwiGLU MLP
down(silu(gate(x)) · up(x)), no biases by default (attention_bias, mlp_bias) and a final RMSNorm.
`models/families/qwen2.py` reuses this name table.

  embed_tokens.weight                       token_embedding
  layers.i.input_layernorm.weight           block_i.attention_norm.scale
  layers.i.self_attn.{q,k,v,o}_proj         block_i.attention.{query,key,value,out}
  layers.i.post_attention_layernorm.weight  block_i.mlp_norm.scale
  layers.i.mlp.{up,gate,down}_proj          block_i.mlp.{fc_in,fc_gate,fc_out}
  norm.weight                               final_norm.scale
  lm_head.weight (untied LlamaForCausalLM)  output (kept for the embedding analysis)

A "model." prefix (LlamaForCausalLM) is accepted. Only the default (unscaled) rotary is supported.
The untrained baseline is Hugging Face's init: N(0, initializer_range²), RMSNorm gains 1.
GGUF files (llama.cpp) are read through `models/formats/gguf.py`, which gives the same tensor names.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from anisotropy_jax.config import BlockConfig, TransformerConfig
from anisotropy_jax.models.formats.checkpoint import (block_names, PretrainedError, TensorReader, config_errors,
                                              detect_prefix, require_keys)
from anisotropy_jax.models.families.gpt_neox import rope_settings
from anisotropy_jax.models.transformer import causal_lm_family, rotary_decoder_config, untied_head

# Block parameter → module of `layers.i.` (Linear weights are (out, in): transposed).
LAYER_NAMES = block_names(
    qkv=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), out="self_attn.o_proj",
    attention_norm="input_layernorm", fc_in="mlp.up_proj", fc_out="mlp.down_proj",
    mlp_norm="post_attention_layernorm", fc_gate="mlp.gate_proj")


def llama_like_config(hf_config: dict[str, Any], precision: str, source: str, *,
                      qkv_bias: bool, out_bias: bool, mlp_bias: bool) -> TransformerConfig:
    """A Llama-shaped config.json → TransformerConfig, the biases given by the caller."""
    require_keys(hf_config, ("hidden_size", "num_attention_heads", "num_hidden_layers",
                             "intermediate_size", "vocab_size"), source)
    fraction, base = rope_settings(hf_config, source)
    if int(hf_config.get("pretraining_tp", 1) or 1) != 1:
        raise PretrainedError(f"{source}: unsupported settings: pretraining_tp != 1")
    with config_errors(source):
        d, heads = int(hf_config["hidden_size"]), int(hf_config["num_attention_heads"])
        head_dim = int(hf_config.get("head_dim") or d // heads)
        std = float(hf_config.get("initializer_range", 0.02))
        block = BlockConfig(
            d_model=d, num_heads=heads, d_ff=int(hf_config["intermediate_size"]),
            norm_position="pre", norm="rms", layer_norm_eps=float(hf_config.get("rms_norm_eps",
                                                                              1e-6)),
            activation=hf_config.get("hidden_act", "silu"), gated_mlp=True, causal=True,
            num_kv_heads=int(hf_config.get("num_key_value_heads") or heads), head_dim=head_dim,
            rotary_dims=int(head_dim * fraction), rotary_base=base, qkv_bias=qkv_bias,
            out_bias=out_bias, mlp_bias=mlp_bias, init_std=std, residual_init_std=std,
            precision=precision)
        return rotary_decoder_config(block, hf_config)


def config_from_hf(hf_config: dict[str, Any], precision: str = "highest",
                   source: str = "config.json") -> TransformerConfig:
    bias = bool(hf_config.get("attention_bias", False))
    return llama_like_config(hf_config, precision, source, qkv_bias=bias, out_bias=bias,
                             mlp_bias=bool(hf_config.get("mlp_bias", False)))


def convert(tensors: dict[str, np.ndarray], cfg: TransformerConfig,
            source: str = "model.safetensors") -> tuple[dict[str, Any], list[str]]:
    """Hugging Face Llama-layout tensors → ({"params": tree} of Transformer, unused names)."""
    read = TensorReader(tensors, detect_prefix(tensors, "embed_tokens.weight", ("model.",)))
    d = cfg.block.d_model
    params: dict[str, Any] = {
        "token_embedding": {"embedding": read.get("embed_tokens.weight", (cfg.vocab_size, d))},
        "final_norm": read.norm("norm", d, bias=False),
    }
    params.update(untied_head(read, cfg, "lm_head.weight"))
    for i in range(cfg.num_layers):
        params[f"block_{i}"] = read.block(
            {path: f"layers.{i}.{name}" for path, name in LAYER_NAMES.items()}, cfg.block)
    return read.finish(params, source, r"layers\.(\d+)\.", cfg.num_layers)


FAMILY = causal_lm_family("llama", ("llama",), config_from_hf, convert)
