"""The Llama family (SmolLM2, ...): config mapping and weight conversion onto `models/decoder.py`.

Llama is the pre-norm decoder with RMSNorm, rotary positions on the whole head (rotate_half
convention), grouped-query attention (num_key_value_heads ≤ num_attention_heads), the SwiGLU MLP
down(silu(gate(x)) · up(x)), no biases by default (attention_bias, mlp_bias) and a final RMSNorm.

  embed_tokens.weight                       token_embedding
  layers.i.input_layernorm.weight           block_i.attention_norm.scale
  layers.i.self_attn.{q,k,v,o}_proj         block_i.attention.{query,key,value,out}
  layers.i.post_attention_layernorm.weight  block_i.mlp_norm.scale
  layers.i.mlp.{up,gate,down}_proj          block_i.mlp.{fc_in,fc_gate,fc_out}
  norm.weight                               final_norm.scale
  lm_head.weight (untied LlamaForCausalLM)  output_embedding

A "model." prefix (LlamaForCausalLM) is accepted. Only the default (unscaled) rotary is supported.
The untrained baseline is Hugging Face's init: N(0, initializer_range²), RMSNorm gains 1.
GGUF files (llama.cpp) are read through `models/gguf.py`, which gives the same tensor names.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from anisotropy_jax.models import decoder
from anisotropy_jax.models.decoder import (DecoderConfig, apply_fn, embedding_matrices,  # noqa: F401
                                           hidden_states_fn, init_params, pad_token_id,
                                           state_labels, summary)
from anisotropy_jax.models.gpt_neox import rope_settings

MODEL_TYPES = ("llama",)
CAUSAL = True


def config_from_hf(hf_config: dict[str, Any], precision: str = "highest",
                   source: str = "config.json") -> DecoderConfig:
    decoder.require_keys(hf_config, ("hidden_size", "num_attention_heads", "num_hidden_layers",
                                     "intermediate_size", "vocab_size"), source)
    fraction, base = rope_settings(hf_config, source)
    if int(hf_config.get("pretraining_tp", 1) or 1) != 1:
        raise decoder.PretrainedError(f"{source}: unsupported settings: pretraining_tp != 1")
    try:
        d, heads = int(hf_config["hidden_size"]), int(hf_config["num_attention_heads"])
        head_dim = int(hf_config.get("head_dim") or d // heads)
        std = float(hf_config.get("initializer_range", 0.02))
        return DecoderConfig(
            model_type="llama", num_layers=int(hf_config["num_hidden_layers"]), d_model=d,
            num_heads=heads, num_kv_heads=int(hf_config.get("num_key_value_heads") or heads),
            head_dim=head_dim, d_ff=int(hf_config["intermediate_size"]),
            vocab_size=int(hf_config["vocab_size"]),
            max_len=int(hf_config.get("max_position_embeddings", 2048)), norm="rms",
            norm_eps=float(hf_config.get("rms_norm_eps", 1e-6)),
            activation=hf_config.get("hidden_act", "silu"), gated_mlp=True,
            rotary_dims=int(head_dim * fraction), rotary_base=base,
            qkv_bias=bool(hf_config.get("attention_bias", False)),
            out_bias=bool(hf_config.get("attention_bias", False)),
            mlp_bias=bool(hf_config.get("mlp_bias", False)),
            tie_embeddings=bool(hf_config.get("tie_word_embeddings", False)),
            output_embedding=not hf_config.get("tie_word_embeddings", False) and any(
                "CausalLM" in a for a in hf_config.get("architectures") or []),
            init_std=std, residual_init_std=std, precision=precision)
    except (ValueError, TypeError) as e:
        raise decoder.config_error(source, e) from None


def convert(tensors: dict[str, np.ndarray], cfg: DecoderConfig, source: str = "model.safetensors"
            ) -> tuple[dict[str, Any], list[str]]:
    """Hugging Face Llama tensors → ({"params": tree} of decoder.Decoder, unused names)."""
    read = decoder.TensorReader(tensors, decoder.detect_prefix(tensors, "embed_tokens.weight",
                                                               ("model.",)))
    d, f = cfg.d_model, cfg.d_ff
    q_width, kv_width = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    params: dict[str, Any] = {
        "token_embedding": {"embedding": read.get("embed_tokens.weight", (cfg.vocab_size, d))},
        "final_norm": read.norm("norm", d, bias=False),
    }
    if cfg.output_embedding and not cfg.tie_embeddings:
        # lm_head is stored outside the model. prefix
        params["output_embedding"] = read.get("lm_head.weight", (cfg.vocab_size, d),
                                              prefixed=False)
    for i in range(cfg.num_layers):
        hf = f"layers.{i}."
        params[f"block_{i}"] = {
            "attention_norm": read.norm(hf + "input_layernorm", d, bias=False),
            "attention": {
                "query": read.linear(hf + "self_attn.q_proj", d, q_width, cfg.qkv_bias),
                "key": read.linear(hf + "self_attn.k_proj", d, kv_width, cfg.qkv_bias),
                "value": read.linear(hf + "self_attn.v_proj", d, kv_width, cfg.qkv_bias),
                "out": read.linear(hf + "self_attn.o_proj", q_width, d, cfg.out_bias)},
            "mlp_norm": read.norm(hf + "post_attention_layernorm", d, bias=False),
            "mlp": {"fc_in": read.linear(hf + "mlp.up_proj", d, f, cfg.mlp_bias),
                    "fc_gate": read.linear(hf + "mlp.gate_proj", d, f, cfg.mlp_bias),
                    "fc_out": read.linear(hf + "mlp.down_proj", f, d, cfg.mlp_bias)},
        }
    return read.finish(params, source, r"layers\.(\d+)\.", cfg.num_layers)
