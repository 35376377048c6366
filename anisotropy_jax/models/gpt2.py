"""The GPT-2 family: Hugging Face config mapping and weight conversion onto `models/decoder.py`.

GPT-2 is the pre-LN decoder with learned positions, LayerNorm, the tanh GELU ("gelu_new"), biases
everywhere, tied input/output embeddings and a final LayerNorm `ln_f`. Hugging Face's Conv1D
weights are already (in, out), so they are not transposed (c_attn (D, 3D) is split into q, k, v).

  wte.weight, wpe.weight                  token_embedding, position_embedding
  h.i.ln_1, h.i.ln_2                      block_i.attention_norm, block_i.mlp_norm
  h.i.attn.c_attn.{weight,bias}           block_i.attention.{query,key,value}
  h.i.attn.c_proj                         block_i.attention.out
  h.i.mlp.c_fc, h.i.mlp.c_proj            block_i.mlp.fc_in, block_i.mlp.fc_out
  ln_f                                    final_norm

A "transformer." prefix (GPT2LMHeadModel) is accepted; lm_head.weight (tied) is unused. The
untrained baseline is Hugging Face's init: N(0, 0.02²) with the c_proj kernels N(0, 0.02²/(2N)).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from anisotropy_jax.models import decoder
from anisotropy_jax.models.decoder import (DecoderConfig, apply_fn, embedding_matrices,  # noqa: F401
                                           hidden_states_fn, init_params, pad_token_id,
                                           state_labels, summary)

MODEL_TYPES = ("gpt2",)
CAUSAL = True
ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh", "gelu", "relu")


def config_from_hf(hf_config: dict[str, Any], precision: str = "highest",
                   source: str = "config.json") -> DecoderConfig:
    decoder.require_keys(hf_config, ("n_embd", "n_head", "n_layer", "vocab_size"), source)
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
        raise decoder.PretrainedError(f"{source}: unsupported settings: {'; '.join(unsupported)}")
    d, layers = int(hf_config["n_embd"]), int(hf_config["n_layer"])
    std = float(hf_config.get("initializer_range", 0.02))
    try:
        heads = int(hf_config["n_head"])
        if d % heads:
            raise ValueError(f"n_embd {d} is not divisible by n_head {heads}")
        return DecoderConfig(
            model_type="gpt2", num_layers=layers, d_model=d, num_heads=heads, num_kv_heads=heads,
            head_dim=d // heads, d_ff=int(hf_config.get("n_inner") or 4 * d),
            vocab_size=int(hf_config["vocab_size"]),
            max_len=int(hf_config.get("n_positions", 1024)), norm="layer",
            norm_eps=float(hf_config.get("layer_norm_epsilon", 1e-5)),
            activation=act, learned_positions=True, tie_embeddings=True, init_std=std,
            residual_init_std=std / math.sqrt(2 * layers), precision=precision)
    except (ValueError, TypeError) as e:
        raise decoder.config_error(source, e) from None


def _conv1d(read: decoder.TensorReader, name: str, d_in: int, d_out: int) -> dict[str, Any]:
    """Conv1D: weight (in, out) is already the Dense kernel."""
    return {"kernel": read.get(name + ".weight", (d_in, d_out)),
            "bias": read.get(name + ".bias", (d_out,))}


def _split_qkv(c_attn: dict[str, Any], d: int) -> dict[str, Any]:
    kernel, bias = c_attn["kernel"], c_attn["bias"]
    out = {}
    for i, name in enumerate(("query", "key", "value")):
        out[name] = {"kernel": None if kernel is None else np.ascontiguousarray(
            kernel[:, i * d:(i + 1) * d]), "bias": None if bias is None else bias[i * d:(i + 1) * d]}
    return out


def convert(tensors: dict[str, np.ndarray], cfg: DecoderConfig, source: str = "model.safetensors"
            ) -> tuple[dict[str, Any], list[str]]:
    """Hugging Face GPT-2 tensors → ({"params": tree} of decoder.Decoder, unused names)."""
    read = decoder.TensorReader(tensors, decoder.detect_prefix(tensors, "wte.weight",
                                                               ("transformer.",)))
    d, f = cfg.d_model, cfg.d_ff
    params: dict[str, Any] = {
        "token_embedding": {"embedding": read.get("wte.weight", (cfg.vocab_size, d))},
        "position_embedding": {"embedding": read.get("wpe.weight", (cfg.max_len, d))},
        "final_norm": read.norm("ln_f", d, bias=True),
    }
    for i in range(cfg.num_layers):
        hf = f"h.{i}."
        attention = _split_qkv(_conv1d(read, hf + "attn.c_attn", d, 3 * d), d)
        attention["out"] = _conv1d(read, hf + "attn.c_proj", d, d)
        params[f"block_{i}"] = {
            "attention_norm": read.norm(hf + "ln_1", d, bias=True),
            "attention": attention,
            "mlp_norm": read.norm(hf + "ln_2", d, bias=True),
            "mlp": {"fc_in": _conv1d(read, hf + "mlp.c_fc", d, f),
                    "fc_out": _conv1d(read, hf + "mlp.c_proj", f, d)},
        }
    return read.finish(params, source, r"h\.(\d+)\.", cfg.num_layers)
