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
GGUF files (llama.cpp, architecture "llama": `GGUF`) are read through `models/formats/gguf.py`,
which gives the same tensor names.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from anisotropy_jax.config import BlockConfig, TransformerConfig
from anisotropy_jax.models import rotary
from anisotropy_jax.models.formats import gguf
from anisotropy_jax.models.formats.checkpoint import (block_names, PretrainedError, TensorReader, config_errors,
                                              detect_prefix, require_keys)
from anisotropy_jax.models.transformer import (DECODER_KEYS, causal_lm_family,
                                               rotary_decoder_config, untied_head)

# Block parameter → module of `layers.i.` (Linear weights are (out, in): transposed).
LAYER_NAMES = block_names(
    qkv=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), out="self_attn.o_proj",
    attention_norm="input_layernorm", fc_in="mlp.up_proj", fc_out="mlp.down_proj",
    mlp_norm="post_attention_layernorm", fc_gate="mlp.gate_proj")
# The config.json keys of `llama_like_config` (Qwen2 adds its own).
LLAMA_LIKE_KEYS = DECODER_KEYS | set(rotary.CONFIG_KEYS) | {
    "hidden_size", "num_attention_heads", "intermediate_size", "head_dim", "rms_norm_eps",
    "hidden_act", "num_key_value_heads", "initializer_range", "pretraining_tp"}
CONFIG_KEYS = LLAMA_LIKE_KEYS | {"attention_bias", "mlp_bias"}

# GGUF files of llama.cpp's "llama" architecture: its per-layer tensor names → Hugging Face
# module names; what its converter leaves out of the metadata; q/k rows permuted (undone here).
GGUF_LAYER_NAMES = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
                    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
                    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
                    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                    "ffn_down": "mlp.down_proj"}


def _gguf_tensor(name: str, value: np.ndarray, hf_config: dict[str, Any]) -> np.ndarray:
    """llama.cpp permuted the query and key rows (rotate_half layout → interleaved pairs)."""
    heads = int(hf_config["num_attention_heads"])
    if name.endswith("q_proj.weight"):
        return gguf.unpermute_rows(value, heads)
    if name.endswith("k_proj.weight"):
        return gguf.unpermute_rows(value, int(hf_config.get("num_key_value_heads") or heads))
    return value


GGUF = gguf.Architecture("llama", GGUF_LAYER_NAMES, tokenizers=("gpt2",), tensor=_gguf_tensor,
                         fixed={"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                                "hidden_act": "silu"})


def llama_like_config(hf_config: dict[str, Any], precision: str, source: str, *,
                      qkv_bias: bool, out_bias: bool, mlp_bias: bool) -> TransformerConfig:
    """A Llama-shaped config.json → TransformerConfig, the biases given by the caller."""
    require_keys(hf_config, ("hidden_size", "num_attention_heads", "num_hidden_layers",
                             "intermediate_size", "vocab_size"), source)
    if int(hf_config.get("pretraining_tp", 1) or 1) != 1:
        raise PretrainedError(f"{source}: unsupported settings: pretraining_tp != 1")
    with config_errors(source):
        fraction, base = rotary.config_settings(hf_config)
        d, heads = int(hf_config["hidden_size"]), int(hf_config["num_attention_heads"])
        head_dim = int(hf_config.get("head_dim") or d // heads)
        std = float(hf_config.get("initializer_range", 0.02))
        block = BlockConfig(
            d_model=d, num_heads=heads, d_ff=int(hf_config["intermediate_size"]),
            norm_position="pre", norm="rms", layer_norm_eps=float(hf_config.get("rms_norm_eps",
                                                                              1e-6)),
            activation=hf_config.get("hidden_act", "silu"), gated_mlp=True, causal=True,
            num_kv_heads=int(hf_config.get("num_key_value_heads") or heads), head_dim=head_dim,
            rotary_dims=rotary.rotary_dims_for(head_dim, fraction), rotary_base=base, qkv_bias=qkv_bias,
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


FAMILY = causal_lm_family("llama", ("llama",), config_from_hf, convert, config_keys=CONFIG_KEYS,
                          native_formats=(GGUF.native(),))
