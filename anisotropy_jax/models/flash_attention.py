"""Flash attention for training: Pallas (Triton) forward and backward kernels, every
normalisation that has a flash form, never writing the (B, H, L, L) logits.

The XLA core (`models.attention.attention_core`) writes the float32 logits and weights of every
head to memory, forward and backward; cuDNN's fused attention ('dot_product') avoids that for
bf16 softmax only. This core streams key tiles through an on-chip accumulator (the structure of
`jax.experimental.pallas.ops.gpu.attention`, FlashAttention-2) for each normalisation of
`models/normalizations.py` that has a flash form, exactly as defined there:

  softmax      running max m (from −∞) and sum l of exp(ℓ − m); out = Σ e v / l
  off_by_one   the softmax with one more key, logit 0 and value 0: m starts at 0 and l at
               exp(0 − m) = 1, so l carries the e^{−m} of the denominator
  sigmoid      σ(ℓ − ln L), L the key length: elementwise, no running statistics
  sigmoid_per_query_bias  σ(ℓ − ln n_q), n_q = q + 1 causal, L otherwise
  softpick     a = e^{ℓ−m} − e^{−m} with m from 0 (= e^{−m}(e^ℓ − 1), so a rescales with m as
               the softmax's terms do); out = Σ ReLU(a) v / (Σ |a| + ε e^{−m})

The forward saves one float32 statistic per query for the backward, the log of the full
denominator (log-sum-exp for softmax and off-by-one, log(Σ|e^ℓ − 1| + ε) for softpick; sigmoid
needs none), and the backward recomputes the weights p tile by tile from it: with dP = dO·vᵀ and
δ = Σ_d dO·O per query, ∂ℓ = p (dP − δ) (softmax, off-by-one: the null key's value is 0),
p (1 − p) dP (sigmoid), and e^ℓ/D ([ℓ > 0] dP − sgn(ℓ) δ) (softpick, D its denominator).

Masks: causal or none (the training LMs); no padding mask or logit bias. Shapes (B, L, H, Dh);
L is padded to a power of two and Dh to a power of two ≥ 16 (Triton's tiles), the padded keys
masked. Precision as `fused_attention`: the block's lax precision on q, k, v of its dtype
('highest' → IEEE float32, 'default' → TF32, 'bfloat16' → bf16 inputs), float32 accumulation,
logits and statistics. Off GPU the kernels run in Pallas interpret mode (slow; the CPU tests).
"""
from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from anisotropy_jax.config.model import FLASH_MAX_HEAD_WIDTH as MAX_HEAD_WIDTH
from anisotropy_jax.config.model import FLASH_NORMALIZATIONS
from anisotropy_jax.models.layers import matmul_settings

Array = jax.Array

__all__ = ["FLASH_NORMALIZATIONS", "MAX_HEAD_WIDTH", "core", "flash_attention",
           "supported"]
SOFTPICK_EPS = 1e-6  # normalizations.softpick's default ε
# Masked logits: finite, so a running max over masked keys stays finite (no ∞ − ∞), yet exp of
# it minus any real logit underflows to exactly 0.
_MASKED = -0.7 * float(jnp.finfo(jnp.float32).max)
_SIGMOIDS = ("sigmoid", "sigmoid_per_query_bias")


def supported(normalization: str, d_head: int) -> bool:
    """True when `flash_attention` computes this normalisation at head width `d_head`."""
    return normalization in FLASH_NORMALIZATIONS and 1 <= d_head <= MAX_HEAD_WIDTH


class Spec(NamedTuple):
    """The static settings of one kernel call (hashable: a nondiff argument of the custom VJP)."""

    normalization: str
    scale: float
    causal: bool
    precision: Any  # a jax.lax.Precision
    seq_len: int  # the unpadded L: keys from here on are padding
    block_q: int
    block_k: int
    block_backward: int
    num_warps: int | None
    interpret: bool


def _dot(a: Array, b: Array, spec: Spec, contract: tuple[int, int]) -> Array:
    """a·b over dims `contract` = (of a, of b), at the block's precision, float32 result."""
    return jax.lax.dot_general(a, b, (((contract[0],), (contract[1],)), ((), ())),
                               precision=spec.precision, preferred_element_type=jnp.float32)


def _tile_logits(q_QxDh: Array, k_KxDh: Array, spec: Spec, q_start, k_start, n_keys: int
                 ) -> tuple[Array, Array | None]:
    """(scaled logits of one (Q, K) tile, masked ones _MASKED; the visibility mask or None)."""
    logits_QxK = _dot(q_QxDh, k_KxDh, spec, (1, 1)) * spec.scale
    key_QxK = k_start + jax.lax.broadcasted_iota(jnp.int32, logits_QxK.shape, 1)
    mask_QxK = None
    if spec.causal:
        mask_QxK = key_QxK <= q_start + jax.lax.broadcasted_iota(jnp.int32, logits_QxK.shape, 0)
    elif spec.seq_len < n_keys:  # causal already hides the padded keys from every real query
        mask_QxK = key_QxK < spec.seq_len
    if mask_QxK is not None:
        logits_QxK = jnp.where(mask_QxK, logits_QxK, _MASKED)
    return logits_QxK, mask_QxK


def _visible(x: Array, mask: Array | None) -> Array:
    return x if mask is None else jnp.where(mask, x, 0.0)


def _sigmoid_bias(spec: Spec, q_start, rows: int):
    """The sigmoid's bias: −ln L, or per query −ln n_q (a (Q, 1) column)."""
    if spec.normalization == "sigmoid" or not spec.causal:
        return -math.log(spec.seq_len)
    visible_Q = q_start + 1 + jax.lax.broadcasted_iota(jnp.int32, (rows, 1), 0)
    return -jnp.log(visible_Q.astype(jnp.float32))


def _initial_statistics(spec: Spec, rows: int) -> tuple[Array, Array]:
    """(m, l) before the first key tile: off-by-one and softpick include the zero logit in m;
    off-by-one's l holds its null key's exp(0 − 0)."""
    m_Q = jnp.full((rows,), -jnp.inf if spec.normalization == "softmax" else 0.0, jnp.float32)
    l_Q = jnp.full((rows,), 1.0 if spec.normalization == "off_by_one" else 0.0, jnp.float32)
    return m_Q, l_Q


def _online_step(spec: Spec, logits_QxK: Array, mask_QxK, m_Q: Array, l_Q: Array, bias
                 ) -> tuple[Array, Array, Array, Array]:
    """One key tile of the forward: (its unnormalised weights, the factor that rescales what was
    accumulated before, the new m and l)."""
    if spec.normalization in _SIGMOIDS:
        return _visible(jax.nn.sigmoid(logits_QxK + bias), mask_QxK), 1.0, m_Q, l_Q
    m_next_Q = jnp.maximum(m_Q, jnp.max(logits_QxK, axis=1))
    correction_Q = jnp.exp(m_Q - m_next_Q)
    e_QxK = jnp.exp(logits_QxK - m_next_Q[:, None])
    if spec.normalization == "softpick":
        a_QxK = _visible(e_QxK - jnp.exp(-m_next_Q)[:, None], mask_QxK)
        weights_QxK, total_Q = jnp.maximum(a_QxK, 0.0), jnp.sum(jnp.abs(a_QxK), axis=1)
    else:
        weights_QxK = _visible(e_QxK, mask_QxK)
        total_Q = jnp.sum(weights_QxK, axis=1)
    return weights_QxK, correction_Q[:, None], m_next_Q, l_Q * correction_Q + total_Q


def _finish(spec: Spec, acc_QxDh: Array, m_Q: Array, l_Q: Array) -> tuple[Array, Array]:
    """(output, the log-denominator the backward needs) from the accumulations."""
    if spec.normalization in _SIGMOIDS:
        return acc_QxDh, jnp.zeros_like(m_Q)
    if spec.normalization == "softpick":
        l_Q = l_Q + SOFTPICK_EPS * jnp.exp(-m_Q)
    return acc_QxDh / l_Q[:, None], m_Q + jnp.log(l_Q)


def _forward_kernel(q_ref, k_ref, v_ref, o_ref, stat_ref, *, spec: Spec):
    # One program: a block of queries of one (sequence, head) against the key tiles it sees.
    block_q, block_k = spec.block_q, spec.block_k
    n_keys, d_head = k_ref.shape
    q_start = pl.program_id(2) * block_q
    q_QxDh = q_ref[...]
    bias = _sigmoid_bias(spec, q_start, block_q)

    def body(j, carry):
        acc_QxDh, m_Q, l_Q = carry
        k_start = j * block_k
        logits_QxK, mask_QxK = _tile_logits(q_QxDh, k_ref[pl.ds(k_start, block_k), :], spec,
                                            q_start, k_start, n_keys)
        weights_QxK, correction, m_Q, l_Q = _online_step(spec, logits_QxK, mask_QxK, m_Q, l_Q,
                                                         bias)
        v_KxDh = v_ref[pl.ds(k_start, block_k), :]
        acc_QxDh = acc_QxDh * correction + _dot(weights_QxK.astype(v_KxDh.dtype), v_KxDh, spec,
                                                (1, 0))
        return acc_QxDh, m_Q, l_Q

    # Causal: key tiles past the block's last query are all masked; skip them.
    tiles = (q_start + block_q + block_k - 1) // block_k if spec.causal else n_keys // block_k
    acc_QxDh = jnp.zeros((block_q, d_head), jnp.float32)
    acc_QxDh, m_Q, l_Q = jax.lax.fori_loop(0, tiles, body,
                                           (acc_QxDh, *_initial_statistics(spec, block_q)))
    out_QxDh, stat_Q = _finish(spec, acc_QxDh, m_Q, l_Q)
    o_ref[...] = out_QxDh.astype(o_ref.dtype)
    stat_ref[...] = stat_Q


def _tile_gradients(spec: Spec, logits_QxK: Array, mask_QxK, stat_Q: Array, delta_Q: Array,
                    dp_QxK: Array, bias) -> tuple[Array, Array]:
    """(the weights p of one tile, ∂loss/∂logits) from the saved log-denominator (module
    docstring)."""
    norm = spec.normalization
    if norm in _SIGMOIDS:
        p_QxK = jax.nn.sigmoid(logits_QxK + bias)
        dlogits_QxK = p_QxK * (1.0 - p_QxK) * dp_QxK
    elif norm == "softpick":
        e_QxK = jnp.exp(logits_QxK - stat_Q[:, None])  # e^ℓ / D
        a_QxK = e_QxK - jnp.exp(-stat_Q)[:, None]  # (e^ℓ − 1) / D
        p_QxK = jnp.maximum(a_QxK, 0.0)
        dlogits_QxK = e_QxK * jnp.where(a_QxK > 0, dp_QxK - delta_Q[:, None],
                                        jnp.where(a_QxK < 0, delta_Q[:, None], 0.0))
    else:
        p_QxK = jnp.exp(logits_QxK - stat_Q[:, None])
        dlogits_QxK = p_QxK * (dp_QxK - delta_Q[:, None])
    return _visible(p_QxK, mask_QxK), _visible(dlogits_QxK, mask_QxK)


def _query_tile(refs, start: int | Array, block: int):
    """(q, dO at the matmul dtype, log-denominator, δ) of the queries [start, start + block)."""
    q_ref, do_ref, stat_ref, delta_ref = refs
    rows = pl.ds(start, block)
    return (q_ref[rows, :], do_ref[rows, :].astype(q_ref.dtype), stat_ref[rows],
            delta_ref[rows])


def _backward_kernel(q_ref, k_ref, v_ref, do_ref, stat_ref, delta_ref, dq_ref, dk_ref, dv_ref,
                     *, spec: Spec):
    # Program j: dk and dv of key block j over the query blocks that see it, then dq of query
    # block j over its key blocks (one grid for both: the blocks have one size).
    block, scale, dtype = spec.block_backward, spec.scale, k_ref.dtype
    n_keys, d_head = k_ref.shape
    blocks, j, query_refs = n_keys // block, pl.program_id(2), (q_ref, do_ref, stat_ref, delta_ref)
    k_start = j * block
    k_KxDh, v_KxDh = k_ref[pl.ds(k_start, block), :], v_ref[pl.ds(k_start, block), :]

    def over_queries(i, carry):
        dk_KxDh, dv_KxDh = carry
        q_QxDh, do_QxDh, stat_Q, delta_Q = _query_tile(query_refs, i * block, block)
        logits_QxK, mask_QxK = _tile_logits(q_QxDh, k_KxDh, spec, i * block, k_start, n_keys)
        p_QxK, dlogits_QxK = _tile_gradients(spec, logits_QxK, mask_QxK, stat_Q, delta_Q,
                                             _dot(do_QxDh, v_KxDh, spec, (1, 1)),
                                             _sigmoid_bias(spec, i * block, block))
        dv_KxDh = dv_KxDh + _dot(p_QxK.astype(dtype), do_QxDh, spec, (0, 0))
        dk_KxDh = dk_KxDh + _dot(dlogits_QxK.astype(dtype), q_QxDh, spec, (0, 0))
        return dk_KxDh, dv_KxDh

    zeros_KxDh = jnp.zeros((block, d_head), jnp.float32)
    dk_KxDh, dv_KxDh = jax.lax.fori_loop(j if spec.causal else 0, blocks, over_queries,
                                         (zeros_KxDh, zeros_KxDh))
    dk_ref[...] = (dk_KxDh * scale).astype(dk_ref.dtype)
    dv_ref[...] = dv_KxDh.astype(dv_ref.dtype)

    q_start = j * block
    q_QxDh, do_QxDh, stat_Q, delta_Q = _query_tile(query_refs, q_start, block)
    bias = _sigmoid_bias(spec, q_start, block)

    def over_keys(i, dq_QxDh):
        k_tile_KxDh = k_ref[pl.ds(i * block, block), :]
        logits_QxK, mask_QxK = _tile_logits(q_QxDh, k_tile_KxDh, spec, q_start, i * block,
                                            n_keys)
        dp_QxK = _dot(do_QxDh, v_ref[pl.ds(i * block, block), :], spec, (1, 1))
        _, dlogits_QxK = _tile_gradients(spec, logits_QxK, mask_QxK, stat_Q, delta_Q, dp_QxK,
                                         bias)
        return dq_QxDh + _dot(dlogits_QxK.astype(dtype), k_tile_KxDh, spec, (1, 0))

    dq_QxDh = jax.lax.fori_loop(0, j + 1 if spec.causal else blocks, over_keys,
                                jnp.zeros((block, d_head), jnp.float32))
    dq_ref[...] = (dq_QxDh * scale).astype(dq_ref.dtype)


def _compiler_params(spec: Spec, default_warps: int):
    if spec.interpret:
        return None
    from jax.experimental.pallas import triton as plgpu  # GPU only

    return plgpu.CompilerParams(num_warps=spec.num_warps or default_warps, num_stages=2)


def _row_spec(block: int, d_head: int) -> pl.BlockSpec:
    """Rows [i·block, (i + 1)·block) of one (sequence, head) of a (B, L, H, Dh) array."""
    return pl.BlockSpec((None, block, None, d_head), lambda b, h, i: (b, i, h, 0))


def _stat_spec(block: int) -> pl.BlockSpec:
    return pl.BlockSpec((None, None, block), lambda b, h, i: (b, h, i))


# Whole sequences of one (sequence, head), whatever block the program computes: block index 0
# along L. (Block index i of an L-row block would address rows i·L onwards: out of bounds on a
# GPU for i > 0, while interpret mode clamps the slice and so hides it.)
def _sequence_spec(n_keys: int, d_head: int) -> pl.BlockSpec:
    return pl.BlockSpec((None, n_keys, None, d_head), lambda b, h, i: (b, 0, h, 0))


def _sequence_stat_spec(n_keys: int) -> pl.BlockSpec:
    return pl.BlockSpec((None, None, n_keys), lambda b, h, i: (b, h, 0))


def _forward(q, k, v, spec: Spec) -> tuple[Array, Array]:
    """(out (B, L, H, Dh) float32, log-denominator (B, H, L) float32) of padded inputs."""
    batch, n_keys, heads, d_head = q.shape
    return pl.pallas_call(
        functools.partial(_forward_kernel, spec=spec),
        grid=(batch, heads, n_keys // spec.block_q),
        in_specs=[_row_spec(spec.block_q, d_head)] + [_sequence_spec(n_keys, d_head)] * 2,
        out_specs=[_row_spec(spec.block_q, d_head), _stat_spec(spec.block_q)],
        out_shape=[jax.ShapeDtypeStruct(q.shape, jnp.float32),
                   jax.ShapeDtypeStruct((batch, heads, n_keys), jnp.float32)],
        compiler_params=_compiler_params(spec, 4 if d_head <= 64 else 8),
        interpret=spec.interpret, name=f"flash_forward_{spec.normalization}",
    )(q, k, v)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _flash(q, k, v, spec: Spec) -> Array:
    return _forward(q, k, v, spec)[0]


def _flash_forward(q, k, v, spec: Spec):
    out, stat = _forward(q, k, v, spec)
    return out, (q, k, v, out, stat)


def _flash_backward(spec: Spec, residuals, do_BxLxHxDh):
    q, k, v, out, stat_BxHxL = residuals
    batch, n_keys, heads, d_head = q.shape
    # δ = Σ_d dO·O per query: the Σ_j p_j dP_j of the softmax's and softpick's ∂ℓ.
    delta_BxHxL = jnp.einsum("blhd,blhd->bhl", do_BxLxHxDh, out,
                             precision=jax.lax.Precision.HIGHEST)
    full, block = _sequence_spec(n_keys, d_head), spec.block_backward
    warps = 4 if block * block < 128 * 128 else 8
    return tuple(pl.pallas_call(
        functools.partial(_backward_kernel, spec=spec),
        grid=(batch, heads, n_keys // block),
        in_specs=[full] * 4 + [_sequence_stat_spec(n_keys)] * 2,
        out_specs=[_row_spec(block, d_head)] * 3,
        out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (q, k, v)],
        compiler_params=_compiler_params(spec, warps),
        interpret=spec.interpret, name=f"flash_backward_{spec.normalization}",
    )(q, k, v, do_BxLxHxDh, stat_BxHxL, delta_BxHxL))


_flash.defvjp(_flash_forward, _flash_backward)


def _power_of_two_at_least(n: int, floor: int = 16) -> int:
    return max(floor, 1 << (n - 1).bit_length())


def flash_attention(q_BxLxHxDh: Array, k_BxLxHxDh: Array, v_BxLxHxDh: Array, *,
                    normalization: str, logit_scale: float, causal: bool,
                    precision: Any = jax.lax.Precision.HIGHEST, interpret: bool | None = None,
                    block_q: int = 128, block_k: int = 64, block_backward: int = 64,
                    num_warps: int | None = None) -> Array:
    """normalise(q·kᵀ · logit_scale [causal mask])·v per head → (B, L, H, Dh) float32, with a
    custom VJP whose backward is two more passes of Pallas kernels (dq; dk and dv).

    q, k, v share their dtype (bf16 or float32: the matmul inputs) and shape. `interpret`: None
    = Pallas interpret mode off GPU. Blocks: queries per forward program, keys per forward tile,
    and the square tiles of the backward (powers of two ≥ 16, clipped to the padded L). The
    defaults were within 9 % of the fastest of 8 tilings for softmax and off-by-one at TF32 and
    bf16 at `train:gpu`'s shapes on one H200, and 6-12 % faster than the reference's 64, 64, 32
    (benchmarks/flash_tiling.py; docs/benchmarks/flash_core_h200/call4).
    `num_warps`: None = 4 for Dh ≤ 64 (8 above) forward, 4 backward below 128×128 tiles."""
    batch, seq_len, heads, d_head = q_BxLxHxDh.shape
    if not supported(normalization, d_head):
        raise ValueError(f"flash_attention: normalization {normalization!r} at head width "
                         f"{d_head}; supported: {FLASH_NORMALIZATIONS}, Dh <= {MAX_HEAD_WIDTH}")
    n_keys, d_padded = _power_of_two_at_least(seq_len), _power_of_two_at_least(d_head)
    blocks = [min(_power_of_two_at_least(b), n_keys) for b in (block_q, block_k, block_backward)]
    spec = Spec(normalization, float(logit_scale), bool(causal), precision, seq_len, *blocks,
                num_warps, jax.default_backend() != "gpu" if interpret is None else interpret)
    # Zero rows and columns change no real logit or output: padded keys are masked, padded
    # queries and dims sliced off (their cotangents are zero).
    pad = ((0, 0), (0, n_keys - seq_len), (0, 0), (0, d_padded - d_head))
    padded = [jnp.pad(x, pad) if pad[1][1] or pad[3][1] else x
              for x in (q_BxLxHxDh, k_BxLxHxDh, v_BxLxHxDh)]
    return _flash(*padded, spec)[:, :seq_len, :, :d_head]


def core(q, k, v, cfg, logit_scale: float, key_mask_BxL: Array | None,
               logit_bias: Array | None) -> tuple[Array, dict]:
    """`flash_attention` as a block's core (BlockConfig attention_impl='flash';
    `models.attention`): its normalisation, causal mask and precision. Returns (output, no
    probes): a training step needs none."""
    if key_mask_BxL is not None or logit_bias is not None:
        raise ValueError(f"model.attention_impl: 'flash' takes no padding mask and no logit bias "
                         f"(mask={key_mask_BxL is not None}, logit bias={logit_bias is not None})")
    mixed = flash_attention(q, k, v, normalization=cfg.attention_normalization,
                            logit_scale=logit_scale, causal=cfg.causal,
                            precision=matmul_settings(cfg)[1])
    return mixed, {}
