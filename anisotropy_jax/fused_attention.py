"""Fused self-attention with its sharpness statistics, as one Pallas (Triton) GPU kernel.

The bias sweep needs, per head and query, the attention output and three statistics of the
softmax: its entropy, its largest probability and its mass on the first key. The plain path
(`model.SelfAttention`, XLA) writes the (B, H, L, L) logits and weights to memory and reads them
back for every metric. This kernel keeps one (L, L) tile of logits per (sequence, head) on chip:
with m = max_k s_k, l = Σ_k exp(s_k − m) and p_k = exp(s_k − m)/l,

    entropy  = log l − Σ_k p_k (s_k − m)        (= −Σ p log p; masked keys have p = 0)
    max p    = 1 / l                            (the largest term is exp(0)/l)
    sink     = p_0

so the statistics cost no extra pass. Same float32 logits and softmax as the plain path; the two
products run at the block's precision ('highest' → IEEE float32, 'default' → TF32, 'bfloat16' →
bfloat16 inputs with float32 accumulation).

`supported(L, Dh)` says which shapes the kernel takes (L and Dh powers of two ≥ 16, L ≤ 256);
padding masks are not supported. Off GPU the kernel runs in Pallas interpret mode (slow), which
is how the CPU tests check it against the plain path.
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

Array = jax.Array

MAX_SEQ_LEN = 256  # one (L, L) float32 tile per program; beyond this it would spill


def _is_power_of_two(n: int) -> bool:
    return n >= 16 and n & (n - 1) == 0


def supported(seq_len: int, d_head: int) -> bool:
    """True when `fused_attention` takes these shapes."""
    return (_is_power_of_two(seq_len) and seq_len <= MAX_SEQ_LEN and _is_power_of_two(d_head))


def _kernel(q_ref, k_ref, v_ref, o_ref, entropy_ref, max_ref, sink_ref, *, scale: float,
            causal: bool, precision):
    q_LxDh = q_ref[...]
    k_LxDh = k_ref[...]
    v_LxDh = v_ref[...]
    logits_LxL = jax.lax.dot_general(
        q_LxDh, k_LxDh, (((1,), (1,)), ((), ())), precision=precision,
        preferred_element_type=jnp.float32) * scale
    seq_len = logits_LxL.shape[0]
    key_index = jax.lax.broadcasted_iota(jnp.int32, (seq_len, seq_len), 1)
    if causal:
        query_index = jax.lax.broadcasted_iota(jnp.int32, (seq_len, seq_len), 0)
        visible = key_index <= query_index
        logits_LxL = jnp.where(visible, logits_LxL, -jnp.inf)
    row_max_L = jnp.max(logits_LxL, axis=1)
    shifted_LxL = logits_LxL - row_max_L[:, None]
    unnorm_LxL = jnp.exp(shifted_LxL)
    total_L = jnp.sum(unnorm_LxL, axis=1)
    p_LxL = unnorm_LxL / total_L[:, None]
    # p·(s − m) with 0 for masked keys (p = 0, s − m = −inf).
    weighted_LxL = jnp.where(unnorm_LxL > 0, p_LxL * shifted_LxL, 0.0)
    entropy_ref[...] = jnp.log(total_L) - jnp.sum(weighted_LxL, axis=1)
    max_ref[...] = 1.0 / total_L
    sink_ref[...] = jnp.sum(jnp.where(key_index == 0, p_LxL, 0.0), axis=1)
    out_LxDh = jax.lax.dot_general(
        p_LxL.astype(v_LxDh.dtype), v_LxDh, (((1,), (0,)), ((), ())), precision=precision,
        preferred_element_type=jnp.float32)
    o_ref[...] = out_LxDh.astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("logit_scale", "causal", "precision", "interpret",
                                             "num_warps"))
def fused_attention(q_BxLxHxDh: Array, k_BxLxHxDh: Array, v_BxLxHxDh: Array, *,
                    logit_scale: float, causal: bool = False,
                    precision: jax.lax.Precision = jax.lax.Precision.HIGHEST,
                    interpret: bool = False, num_warps: int = 8):
    """softmax(q·kᵀ · logit_scale)·v per head, plus per-query statistics of the softmax.

    Returns (out (B, L, H, Dh) float32, {"attn_entropy", "attn_max", "attn_sink"} each (B, H, L)
    float32: entropy in nats, largest probability, probability of key 0).
    num_warps: 8 ran the BERT-base tile (L = 128, Dh = 64) in 0.046 ms per grid point on an
    H200 against 0.069 ms with 4 (experiments/profile_block.py, 2026-11-26).
    """
    batch, seq_len, heads, d_head = q_BxLxHxDh.shape
    kernel = functools.partial(_kernel, scale=logit_scale, causal=causal, precision=precision)
    row_spec = pl.BlockSpec((None, seq_len, None, d_head), lambda b, h: (b, 0, h, 0))
    stat_spec = pl.BlockSpec((None, None, seq_len), lambda b, h: (b, h, 0))
    stat_shape = jax.ShapeDtypeStruct((batch, heads, seq_len), jnp.float32)
    compiler_params = None
    if not interpret:
        from jax.experimental.pallas import triton as plgpu  # GPU only

        compiler_params = plgpu.CompilerParams(num_warps=num_warps, num_stages=1)
    out, entropy, max_p, sink = pl.pallas_call(
        kernel,
        grid=(batch, heads),
        in_specs=[row_spec, row_spec, row_spec],
        out_specs=[row_spec, stat_spec, stat_spec, stat_spec],
        out_shape=[jax.ShapeDtypeStruct(q_BxLxHxDh.shape, jnp.float32), stat_shape, stat_shape,
                   stat_shape],
        compiler_params=compiler_params,
        interpret=interpret,
        name="attention_with_stats",
    )(q_BxLxHxDh, k_BxLxHxDh, v_BxLxHxDh)
    return out, {"attn_entropy": entropy, "attn_max": max_p, "attn_sink": sink}


def reference_statistics(logits_BxHxLxL: Array, weights_BxHxLxL: Array,
                         mask: Array | None = None) -> dict[str, Array]:
    """The same statistics from materialised logits and weights (the plain path)."""
    log_p = jax.nn.log_softmax(logits_BxHxLxL if mask is None
                               else jnp.where(mask, logits_BxHxLxL, -jnp.inf), axis=-1)
    p = jnp.exp(log_p)
    return {"attn_entropy": -jnp.sum(jnp.where(p > 0, p * log_p, 0.0), axis=-1),
            "attn_max": jnp.max(weights_BxHxLxL, axis=-1),
            "attn_sink": weights_BxHxLxL[..., 0]}


def logit_scale(d_head: int, temperature: float) -> float:
    return 1.0 / (math.sqrt(d_head) * temperature)
