"""The Qwen2 family (Qwen2, Qwen2.5): a Llama with biases on the query, key and value projections
only (none on the attention output or the MLP). Llama's name table (`models/families/llama.py`) reads it;
sliding-window attention is not supported (every Qwen2 checkpoint up to 32k context leaves it
off). GGUF files (llama.cpp, architecture "qwen2": `GGUF`, e.g. Qwen2.5-Coder's,
`gguf.packaged_qwen25_coder_gguf`) are read through `models/formats/gguf.py` with Llama's tensor
names plus the q/k/v biases; llama.cpp's converter does not permute Qwen2's q/k rows (unlike
Llama's), so the tensors are taken as they are, as transformers' GGUF loader does. Parity with
transformers: tests/test_families_causal.py, tests/test_qwen2_gguf.py.
"""
from __future__ import annotations

from typing import Any

from anisotropy_jax.config import TransformerConfig
from anisotropy_jax.models.families import llama
from anisotropy_jax.models.formats import gguf
from anisotropy_jax.models.formats.checkpoint import PretrainedError
from anisotropy_jax.models.transformer import causal_lm_family


def config_from_hf(hf_config: dict[str, Any], precision: str = "highest",
                   source: str = "config.json") -> TransformerConfig:
    if hf_config.get("use_sliding_window", False) or set(
            hf_config.get("layer_types") or ["full_attention"]) != {"full_attention"}:
        raise PretrainedError(f"{source}: unsupported settings: sliding-window attention "
                              f"(use_sliding_window, layer_types)")
    return llama.llama_like_config(hf_config, precision, source, qkv_bias=True, out_bias=False,
                                   mlp_bias=False)


# use_sliding_window is refused when true; then sliding_window and max_window_layers are unused.
CONFIG_KEYS = llama.LLAMA_LIKE_KEYS | {"use_sliding_window", "sliding_window", "max_window_layers",
                                       "layer_types"}

# llama.cpp's "qwen2" files: Llama's per-layer names (a blk.i.attn_{q,k,v}.bias maps to the
# projection's bias), q/k unpermuted, sliding window not stored (off).
GGUF = gguf.Architecture("qwen2", llama.GGUF_LAYER_NAMES, tokenizers=("gpt2",),
                         fixed={"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"],
                                "hidden_act": "silu"})

FAMILY = causal_lm_family("qwen2", ("qwen2",), config_from_hf, llama.convert,
                          config_keys=CONFIG_KEYS, native_formats=(GGUF.native(),))
