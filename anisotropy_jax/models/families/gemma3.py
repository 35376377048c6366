"""The Gemma-3 text family (Gemma-3-270M, ...): config translation and name table onto
`models/transformer.py`, every difference from Llama a switch of the one Block or Transformer.

  embeddings        token embedding × √D (TransformerConfig.embedding_scale; the tied head reads
                    the unscaled table)
  block             pre-norm with sandwich norms (BlockConfig.sandwich_norms: each branch's output
                    is RMS-normalised again before it is added), QK norm (attention
                    'qk_layernorm' with norm 'rms', over Dh), grouped key/value heads, head_dim
                    not D/H, logits q·k · query_pre_attn_scalar^-1/2 (logit_scale), gated GELU-tanh
                    MLP down(gelu_tanh(gate(x)) · up(x)), no biases
  local / global    per-layer BlockConfigs (TransformerConfig.layer_blocks, run by
                    `block.stack_blocks`): the 'sliding_attention' layers see the last
                    `sliding_window` keys only (BlockConfig.sliding_window) and rotate with their
                    own base (rope_local_base_freq, 10k); the 'full_attention' layers are causal
                    over everything with rope_theta (1M). Chosen over a layer index inside the
                    Block: the Block stays unaware of depth and the stack stays one loop.
  norms             Gemma's RMSNorm multiplies by (1 + w); the converter stores the gain 1 + w
                    (as llama.cpp's GGUF converter does), so the Block's RMSNorm needs no variant
                    and the untrained gain (w = 0) is 1

  embed_tokens.weight                          token_embedding
  layers.i.input_layernorm.weight              block_i.attention_norm.scale (+1)
  layers.i.self_attn.{q,k,v,o}_proj            block_i.attention.{query,key,value,out}
  layers.i.self_attn.{q,k}_norm.weight         block_i.attention.{query,key}_norm.scale (+1)
  layers.i.post_attention_layernorm.weight     block_i.post_attention_norm.scale (+1)
  layers.i.pre_feedforward_layernorm.weight    block_i.mlp_norm.scale (+1)
  layers.i.post_feedforward_layernorm.weight   block_i.post_mlp_norm.scale (+1)
  layers.i.mlp.{up,gate,down}_proj             block_i.mlp.{fc_in,fc_gate,fc_out}
  norm.weight                                  final_norm.scale (+1)

A "model." prefix (Gemma3ForCausalLM) is accepted. Unsupported (one line naming the setting):
attention logit soft-capping, bidirectional attention, scaled rotary (the larger Gemma-3 models'
'linear' global rotary). final_logit_softcapping only changes the LM head's logits, which the
family does not compute. GGUF files (llama.cpp, architecture "gemma3": `GGUF`) are read by
`models/formats/gguf.py`, which gives these names. Parity with transformers: tests/test_gemma3.py.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from anisotropy_jax.config import BlockConfig, TransformerConfig
from anisotropy_jax.models import rotary, transformer
from anisotropy_jax.models.families import llama
from anisotropy_jax.models.formats import gguf
from anisotropy_jax.models.formats.checkpoint import (PretrainedError, TensorReader, block_names,
                                              config_errors, detect_prefix, require_keys)

LAYER_NAMES = {
    **block_names(qkv=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                  out="self_attn.o_proj", attention_norm="input_layernorm", fc_in="mlp.up_proj",
                  fc_out="mlp.down_proj", mlp_norm="pre_feedforward_layernorm",
                  fc_gate="mlp.gate_proj"),
    ("post_attention_norm",): "post_attention_layernorm",
    ("post_mlp_norm",): "post_feedforward_layernorm",
}
QK_NORMS = {"query_norm": "self_attn.q_norm", "key_norm": "self_attn.k_norm"}
# transformers' defaults (Gemma3TextConfig) for keys a config.json may leave out (also head_dim
# 256, query_pre_attn_scalar 256, sliding_window 4096, tied embeddings).
DEFAULT_THETA = {"full_attention": 1_000_000.0, "sliding_attention": 10_000.0}
DEFAULT_PATTERN = 6
CONFIG_KEYS = transformer.DECODER_KEYS | set(rotary.CONFIG_KEYS) | {
    "hidden_size", "num_attention_heads", "intermediate_size", "head_dim", "rms_norm_eps",
    "hidden_activation", "hidden_act", "num_key_value_heads", "initializer_range",
    "attention_bias", "attn_logit_softcapping", "use_bidirectional_attention",
    "query_pre_attn_scalar", "sliding_window", "sliding_window_pattern", "layer_types",
    "_sliding_window_pattern",
    "final_logit_softcapping"}  # the last: the LM head's logits only, not computed here

# GGUF files of llama.cpp's "gemma3" architecture: Llama's tensor names and the sandwich / QK
# norms; what llama.cpp hard-codes for it (src/llama-model.cpp) and the file does not store.
GGUF_LAYER_NAMES = {**llama.GGUF_LAYER_NAMES, "ffn_norm": "pre_feedforward_layernorm",
                    "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
                    "post_attention_norm": "post_attention_layernorm",
                    "post_ffw_norm": "post_feedforward_layernorm"}
GGUF_FIXED = {"sliding_window_pattern": DEFAULT_PATTERN, "rope_local_base_freq": 10000.0,
              "hidden_activation": "gelu_pytorch_tanh", "architectures": ["Gemma3ForCausalLM"],
              "model_type": "gemma3_text"}


def _gguf_config(fields: dict[str, Any], hf_config: dict[str, Any]) -> dict[str, Any]:
    """The head width (attention.key_length), logit scale 1/√head width and window."""
    head_dim = int(fields.get("gemma3.attention.key_length", 256))
    return {**hf_config, "head_dim": head_dim, "query_pre_attn_scalar": head_dim,
            "sliding_window": fields.get("gemma3.attention.sliding_window")}


def _gguf_tensor(name: str, value: np.ndarray, hf_config: dict[str, Any]) -> np.ndarray:
    """llama.cpp stored the norm weights as 1 + w (q/k are not permuted: NeoX rotary)."""
    del hf_config
    return value - np.float32(1.0) if name.endswith("norm.weight") else value


GGUF = gguf.Architecture("gemma3", GGUF_LAYER_NAMES, GGUF_FIXED, tokenizers=("llama",),
                         config=_gguf_config, tensor=_gguf_tensor)


def layer_types(hf_config: dict[str, Any]) -> list[str]:
    """'sliding_attention' / 'full_attention' per layer: config.json's layer_types, else every
    sliding_window_pattern-th layer global (transformers' rule; saved by transformers ≥ 5 as
    _sliding_window_pattern)."""
    n = int(hf_config["num_hidden_layers"])
    pattern = int(hf_config.get("sliding_window_pattern") or hf_config.get(
        "_sliding_window_pattern") or DEFAULT_PATTERN)
    types = hf_config.get("layer_types") or [
        "sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    if len(types) != n or set(types) - set(DEFAULT_THETA):
        raise ValueError(f"layer_types must be {n} of {sorted(DEFAULT_THETA)}, got {types}")
    return list(types)


def config_from_hf(hf_config: dict[str, Any], precision: str = "highest",
                   source: str = "config.json") -> TransformerConfig:
    require_keys(hf_config, ("hidden_size", "num_attention_heads", "num_hidden_layers",
                             "intermediate_size", "vocab_size"), source)
    for key in ("attn_logit_softcapping", "use_bidirectional_attention"):
        if hf_config.get(key):
            raise PretrainedError(f"{source}: unsupported settings: {key}={hf_config[key]}")
    with config_errors(source):
        rope = {kind: rotary.config_settings(hf_config, kind, default_base=base)
                for kind, base in DEFAULT_THETA.items()}
        d, heads = int(hf_config["hidden_size"]), int(hf_config["num_attention_heads"])
        head_dim = int(hf_config.get("head_dim") or 256)
        std = float(hf_config.get("initializer_range", 0.02))
        bias = bool(hf_config.get("attention_bias", False))
        block = BlockConfig(
            d_model=d, num_heads=heads, d_ff=int(hf_config["intermediate_size"]),
            norm_position="pre", norm="rms", attention="qk_layernorm", sandwich_norms=True,
            layer_norm_eps=float(hf_config.get("rms_norm_eps", 1e-6)),
            activation=hf_config.get("hidden_activation") or hf_config.get(
                "hidden_act") or "gelu_pytorch_tanh",
            gated_mlp=True, causal=True,
            num_kv_heads=int(hf_config.get("num_key_value_heads") or heads), head_dim=head_dim,
            rotary_dims=rotary.rotary_dims_for(head_dim, rope["full_attention"][0]),
            rotary_base=rope["full_attention"][1],
            logit_scale=float(hf_config.get("query_pre_attn_scalar") or 256) ** -0.5,
            qkv_bias=bias, out_bias=bias, mlp_bias=False, init_std=std, residual_init_std=std,
            precision=precision)
        local = block.replace(rotary_base=rope["sliding_attention"][1],
                              sliding_window=int(hf_config.get("sliding_window", 4096) or 0))
        stack = transformer.rotary_decoder_config(
            block, {"tie_word_embeddings": True, "max_position_embeddings": 131072, **hf_config})
        return stack.replace(embedding_scale=d ** 0.5, layer_blocks=tuple(
            local if kind == "sliding_attention" else block for kind in layer_types(hf_config)))


def _gemma_gains(tree: Any) -> Any:
    """Every norm gain w of a parameter tree → 1 + w (Gemma's RMSNorm multiplies by 1 + w)."""
    if not isinstance(tree, dict):
        return tree
    return {key: (value + np.float32(1.0) if key == "scale" and value is not None
                  else _gemma_gains(value)) for key, value in tree.items()}


def convert(tensors: dict[str, np.ndarray], cfg: TransformerConfig,
            source: str = "model.safetensors") -> tuple[dict[str, Any], list[str]]:
    """Hugging Face Gemma-3 text tensors → ({"params": tree} of Transformer, unused names)."""
    read = TensorReader(tensors, detect_prefix(tensors, "embed_tokens.weight", ("model.",)))
    block = cfg.block
    params: dict[str, Any] = {
        "token_embedding": {"embedding": read.get("embed_tokens.weight",
                                                  (cfg.vocab_size, block.d_model))},
        "final_norm": read.norm("norm", block.d_model, bias=False),
    }
    for i in range(cfg.num_layers):
        layer = read.block({path: f"layers.{i}.{name}" for path, name in LAYER_NAMES.items()},
                           block)
        for path, name in QK_NORMS.items():
            layer["attention"][path] = read.norm(f"layers.{i}.{name}", block.d_head, bias=False)
        params[f"block_{i}"] = layer
    params = _gemma_gains(params)
    params.update(transformer.untied_head(read, cfg, "lm_head.weight"))
    return read.finish(params, source, r"layers\.(\d+)\.", cfg.num_layers)


def summary(cfg: TransformerConfig) -> dict[str, Any]:
    """The causal LMs' summary, with the local/global layer pattern."""
    base = transformer.summary(cfg)
    init = base.pop("untrained_init")
    local = [i for i, b in enumerate(cfg.blocks) if b.sliding_window]
    return {**base, "sliding_window": cfg.blocks[local[0]].sliding_window if local else 0,
            "global_layers": [i for i in range(cfg.num_layers) if i not in local],
            "rotary_bases": sorted({b.rotary_base for b in cfg.blocks}),
            "embedding_scale": cfg.embedding_scale, "logit_scale": cfg.block.logit_scale,
            "untrained_init": init}


FAMILY = transformer.causal_lm_family("gemma3", ("gemma3_text",), config_from_hf, convert,
                                      summary=summary, config_keys=CONFIG_KEYS,
                                      native_formats=(GGUF.native(),))
