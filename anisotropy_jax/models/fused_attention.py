"""Fused self-attention with its sharpness statistics, as one Pallas (Triton) GPU kernel.

The bias sweep needs, per head and query, the attention output and three statistics of the
softmax: its entropy, its largest probability and its mass on the first key. The plain path
(`models.attention`, XLA) writes the (B, H, L, L) logits and weights to memory and reads them
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
is how the CPU tests check it against the plain path and `metrics.attention_statistics`.
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


def default_impl(seq_len: int, d_head: int, platform: str | None = None) -> str:
    """The attention core a study takes by default on `platform` (default: JAX's backend):
    'pallas' (this kernel) on GPUs for shapes it supports, 'xla' everywhere else — CPUs, TPUs
    (the kernel is a Triton kernel) and unsupported shapes. Nothing GPU-only is ever a default
    off GPUs."""
    platform = jax.default_backend() if platform is None else platform
    return "pallas" if platform in ("gpu", "cuda") and supported(seq_len, d_head) else "xla"


def tiling(dtype, seq_len: int) -> dict[str, int]:
    """{"block_q", "num_warps"} for keys of `dtype`: bfloat16 takes query blocks of 64 with 4
    warps, float32 (TF32) all queries with 8, whichever ran faster for a BERT-base point
    (benchmarks/profiling/kernel_cost.py; measured: docs/benchmarks/full_contract_h100_onchip/
    call4)."""
    if jnp.dtype(dtype) == jnp.bfloat16 and seq_len >= 64:
        return {"block_q": 64, "num_warps": 4}
    return {"block_q": 0, "num_warps": 8}


def _scaled_norms(x_NxDh: Array) -> Array:
    """‖x_i‖ per row without overflow of the squares (rows up to ~1e38): max|x| · ‖x / max|x|‖."""
    m_N = jnp.max(jnp.abs(x_NxDh), axis=1)
    y_NxDh = x_NxDh / jnp.where(m_N > 0, m_N, 1.0)[:, None]
    return m_N * jnp.sqrt(jnp.sum(y_NxDh * y_NxDh, axis=1))


def _write_reduction_statistics(refs, q_QxDh, k_LxDh, p_QxL, counted_Q):
    """The per-program inputs of the sweep's metric reduction (see `fused_attention`,
    `reduction_statistics`): token norms and sums of the queries and keys as the block sees them,
    and the mass and unit-row mass of the categorical-attention key sums over this block's counted
    queries (`counted_Q` None: every query counts). The votes are written by the caller, while
    the logits are still live."""
    query_norm_ref, key_norm_ref, query_sum_ref, key_sum_ref, mass_ref, unit_mass_ref = refs
    query_norm_ref[...] = _scaled_norms(q_QxDh)
    key_norm_ref[...] = _scaled_norms(k_LxDh)
    query_sum_ref[...] = jnp.sum(q_QxDh, axis=0)
    key_sum_ref[...] = jnp.sum(k_LxDh, axis=0)
    if counted_Q is not None:
        p_QxL = jnp.where(counted_Q[:, None], p_QxL, 0.0)
    mass_ref[...] = jnp.sum(p_QxL, axis=0)
    # Probabilities lie in [0, 1] and a row's norm in [1/√L, 1]: a plain norm is safe.
    row_norm_Q = jnp.sqrt(jnp.sum(p_QxL * p_QxL, axis=1))
    inv_row_norm_Q = 1.0 / jnp.where(row_norm_Q > 0, row_norm_Q, 1.0)
    unit_mass_ref[...] = jnp.sum(p_QxL * inv_row_norm_Q[:, None], axis=0)


def _plus_slope(x_ref, slope_ref, coefficient) -> Array:
    """x + t·slope (rows of x, float32), or x as float32 when there is no slope."""
    x_NxDh = x_ref[...].astype(jnp.float32)
    if slope_ref is None:
        return x_NxDh
    return x_NxDh + coefficient * slope_ref[...].astype(jnp.float32)[None, :]


def _key_votes(shifted_QxL: Array, counted_Q: Array | None) -> Array:
    """Per key, how many counted queries have their largest logit there: where s − max is exactly
    0 (ties vote for every tied key, as in `metrics.categorical_key_sums`)."""
    top_QxL = shifted_QxL == 0.0
    if counted_Q is not None:
        top_QxL = top_QxL & counted_Q[:, None]
    return jnp.sum(jnp.where(top_QxL, 1.0, 0.0), axis=0)


def _kernel(q_ref, k_ref, v_ref, *refs, scale: float, causal: bool, precision, affine: bool,
            reduce: bool):
    # One program: a block of Q queries of one (sequence, head) against all L keys.
    refs = list(refs)
    q_slope_ref = v_slope_ref = k_slope_ref = coefficient = None
    if affine:
        q_slope_ref, v_slope_ref, s_ref = refs[:3]
        k_slope_ref = refs[3] if reduce else None
        refs = refs[4 if reduce else 3:]
        coefficient = s_ref[0]
    q_f32_QxDh = _plus_slope(q_ref, q_slope_ref, coefficient)
    q_QxDh = q_f32_QxDh.astype(k_ref.dtype) if affine else q_ref[...]
    o_ref, entropy_ref, max_ref, sink_ref = refs[:4]
    k_LxDh = k_ref[...]
    v_LxDh = v_ref[...]
    logits_QxL = jax.lax.dot_general(
        q_QxDh, k_LxDh, (((1,), (1,)), ((), ())), precision=precision,
        preferred_element_type=jnp.float32) * scale
    block_q, seq_len = logits_QxL.shape
    key_index = jax.lax.broadcasted_iota(jnp.int32, (block_q, seq_len), 1)
    counted_Q = None  # reduction statistics: which queries count (None: all of them)
    if causal:
        query_index = (jax.lax.broadcasted_iota(jnp.int32, (block_q, seq_len), 0)
                       + pl.program_id(2) * block_q)
        logits_QxL = jnp.where(key_index <= query_index, logits_QxL, -jnp.inf)
        # A causal head's first query sees one key: no choice, not counted.
        counted_Q = (jax.lax.broadcasted_iota(jnp.int32, (block_q,), 0)
                     + pl.program_id(2) * block_q) >= 1
    row_max_Q = jnp.max(logits_QxL, axis=1)
    shifted_QxL = logits_QxL - row_max_Q[:, None]
    if reduce:
        refs[8][...] = _key_votes(shifted_QxL, counted_Q)  # attn_key_votes
    unnorm_QxL = jnp.exp(shifted_QxL)
    total_Q = jnp.sum(unnorm_QxL, axis=1)
    inv_total_Q = 1.0 / total_Q  # Q divisions, not Q·L: normalise the row sums and the output
    # Σ_k p_k (s_k − m) = Σ_k e_k (s_k − m) / l, with 0 for masked keys (e = 0, s − m = −inf).
    weighted_QxL = unnorm_QxL * shifted_QxL
    if causal:
        weighted_QxL = jnp.where(unnorm_QxL > 0, weighted_QxL, 0.0)
    entropy_ref[...] = jnp.log(total_Q) - jnp.sum(weighted_QxL, axis=1) * inv_total_Q
    max_ref[...] = inv_total_Q
    sink_ref[...] = jnp.sum(jnp.where(key_index == 0, unnorm_QxL, 0.0), axis=1) * inv_total_Q
    p_QxL = unnorm_QxL * inv_total_Q[:, None]
    out_QxDh = jax.lax.dot_general(
        p_QxL.astype(v_LxDh.dtype), v_LxDh, (((1,), (0,)), ((), ())), precision=precision,
        preferred_element_type=jnp.float32)
    if affine:  # the rows of p sum to 1: p·(v + t·v_slope) = p·v + t·v_slope
        out_QxDh = out_QxDh + coefficient * v_slope_ref[...].astype(jnp.float32)[None, :]
    o_ref[...] = out_QxDh.astype(o_ref.dtype)
    if reduce:  # the keys the block sees: k + t·k_slope (the logits above omit t·k_slope)
        _write_reduction_statistics(refs[4:8] + refs[9:], q_f32_QxDh,
                                    _plus_slope(k_ref, k_slope_ref, coefficient), p_QxL, counted_Q)


# Outputs of `reduction_statistics=True` (float32), after the per-query-block partials are
# combined; what the sweep's metric reduction reads instead of q, k and the (B, H, L, L) logits
# (studies/sweep/points.py): "attn_query_norms", "attn_key_norms" (B, H, L), ‖q_i‖ and ‖k_j‖
# (overflow-safe) of the queries and keys the block sees (with affine inputs k + t·k_slope);
# "attn_query_sums", "attn_key_sums" (B, H, Dh), Σ_i q_i and Σ_j k_j; and over the counted
# queries (more than one visible key) the key sums of `metrics.CategoricalSums`: "attn_key_votes"
# (queries whose largest logit is at key j; ties vote for each tied key), "attn_key_mass"
# Σ_i p_ij and "attn_key_unit_mass" Σ_i p_ij/‖p_i‖, each (B, H, L).
REDUCTION_STATISTICS = ("attn_query_norms", "attn_key_norms", "attn_query_sums", "attn_key_sums",
                        "attn_key_votes", "attn_key_mass", "attn_key_unit_mass")


def _reduction_specs(batch: int, heads: int, seq_len: int, d_head: int, block_q: int):
    """(out_specs, out_shapes) of the reduction statistics: query norms per query (B, H, L); per
    query block (B, H, L/Q, ·) the key norms (L), query and key sums (Dh) and the three key sums
    of the categorical statistics (L)."""
    blocks = seq_len // block_q
    per_query = pl.BlockSpec((None, None, block_q), lambda b, h, i: (b, h, i))
    per_block_keys = pl.BlockSpec((None, None, None, seq_len), lambda b, h, i: (b, h, i, 0))
    per_block_dims = pl.BlockSpec((None, None, None, d_head), lambda b, h, i: (b, h, i, 0))
    keys_shape = jax.ShapeDtypeStruct((batch, heads, blocks, seq_len), jnp.float32)
    dims_shape = jax.ShapeDtypeStruct((batch, heads, blocks, d_head), jnp.float32)
    specs = [per_query, per_block_keys, per_block_dims, per_block_dims, per_block_keys,
             per_block_keys, per_block_keys]
    shapes = [jax.ShapeDtypeStruct((batch, heads, seq_len), jnp.float32), keys_shape, dims_shape,
              dims_shape, keys_shape, keys_shape, keys_shape]
    return specs, shapes


def _combine_blocks(query_norms, key_norms, query_sums, key_sums, votes, mass, unit_mass):
    """Per-query-block partials → REDUCTION_STATISTICS: every block sees all keys (take block
    0's key norms and sums); query sums and the categorical key sums add up over blocks."""
    return dict(zip(REDUCTION_STATISTICS, (
        query_norms, key_norms[:, :, 0], jnp.sum(query_sums, axis=2), key_sums[:, :, 0],
        jnp.sum(votes, axis=2), jnp.sum(mass, axis=2), jnp.sum(unit_mass, axis=2))))


def _check_affine(affine: bool, query_slope, value_slope, key_slope, reduction_statistics: bool):
    if affine != (query_slope is not None) or affine != (value_slope is not None):
        raise ValueError("affine inputs: give query_slope_HxDh, value_slope_HxDh and coefficient "
                         "together")
    if (key_slope is not None) != (affine and reduction_statistics):
        raise ValueError("key_slope_HxDh: needed exactly with affine inputs and "
                         "reduction_statistics=True")


def _specs(shape_BxLxHxDh, block_q: int, affine: bool, reduction_statistics: bool):
    """(in_specs, out_specs, out_shapes) of the kernel: q, k, v [, q_slope, v_slope, t
    [, k_slope]] in; out, entropy, max, sink [, reduction statistics] out."""
    batch, seq_len, heads, d_head = shape_BxLxHxDh
    query_spec = pl.BlockSpec((None, block_q, None, d_head), lambda b, h, i: (b, i, h, 0))
    key_spec = pl.BlockSpec((None, seq_len, None, d_head), lambda b, h, i: (b, 0, h, 0))
    stat_spec = pl.BlockSpec((None, None, block_q), lambda b, h, i: (b, h, i))
    stat_shape = jax.ShapeDtypeStruct((batch, heads, seq_len), jnp.float32)
    in_specs = [query_spec, key_spec, key_spec]
    if affine:
        slope_spec = pl.BlockSpec((None, d_head), lambda b, h, i: (h, 0))
        in_specs += [slope_spec, slope_spec, pl.BlockSpec((1,), lambda b, h, i: (0,))]
        in_specs += [slope_spec] if reduction_statistics else []
    out_specs = [query_spec, stat_spec, stat_spec, stat_spec]
    out_shapes = [jax.ShapeDtypeStruct(shape_BxLxHxDh, jnp.float32)] + [stat_shape] * 3
    if reduction_statistics:
        specs, shapes = _reduction_specs(batch, heads, seq_len, d_head, block_q)
        out_specs, out_shapes = out_specs + specs, out_shapes + shapes
    return in_specs, out_specs, out_shapes


@functools.partial(jax.jit, static_argnames=("logit_scale", "causal", "precision", "interpret",
                                             "num_warps", "block_q", "reduction_statistics"))
def fused_attention(q_BxLxHxDh: Array, k_BxLxHxDh: Array, v_BxLxHxDh: Array, *,
                    logit_scale: float, causal: bool = False,
                    precision: jax.lax.Precision = jax.lax.Precision.HIGHEST,
                    interpret: bool = False, num_warps: int = 8, block_q: int = 0,
                    query_slope_HxDh: Array | None = None, value_slope_HxDh: Array | None = None,
                    coefficient: Array | None = None, key_slope_HxDh: Array | None = None,
                    reduction_statistics: bool = False):
    """softmax(q·kᵀ · logit_scale)·v per head, plus per-query statistics of the softmax.

    Returns (out (B, L, H, Dh) float32, {"attn_entropy", "attn_max", "attn_sink"} each (B, H, L)
    float32: entropy in nats, largest probability, probability of key 0).
    num_warps: 8 ran the BERT-base tile (L = 128, Dh = 64) faster than 4 (measured:
    docs/PERFORMANCE.md; benchmarks/profiling/profile_block.py).
    block_q: queries per program (a power of two ≥ 16 dividing L; 0 = all L).

    Affine inputs (`query_slope_HxDh`, `value_slope_HxDh` and a scalar `coefficient` t given):
    the attention of q + t·q_slope, k + t·k_slope, v + t·v_slope is computed from q, k, v and the
    two slopes: queries q + t·q_slope are formed on chip; the key slope is not needed (it adds
    (q + t·q_slope)·t·k_slope to every logit of a query, a constant the softmax cancels); and
    t·v_slope is added to the output (rows of weights sum to 1). Under a vmap over t, q, k, v and
    the slopes stay unbatched: one copy serves every t. (The bias sweep's inputs z + s·u have
    projections of this form, with t = s: studies/sweep/affine.py.)

    `reduction_statistics=True` adds what the bias sweep's metric reduction needs from q, k and
    the softmax (REDUCTION_STATISTICS; with affine inputs `key_slope_HxDh` is then required).
    """
    batch, seq_len, heads, d_head = q_BxLxHxDh.shape
    block_q = block_q or seq_len
    if not (_is_power_of_two(block_q) and seq_len % block_q == 0):
        raise ValueError(f"block_q: {block_q} must be a power of two >= 16 dividing L={seq_len}")
    affine = coefficient is not None
    _check_affine(affine, query_slope_HxDh, value_slope_HxDh, key_slope_HxDh, reduction_statistics)
    kernel = functools.partial(_kernel, scale=logit_scale, causal=causal, precision=precision,
                               affine=affine, reduce=reduction_statistics)
    in_specs, out_specs, out_shapes = _specs(q_BxLxHxDh.shape, block_q, affine,
                                             reduction_statistics)
    affine_args = []
    if affine:
        affine_args = [query_slope_HxDh, value_slope_HxDh,
                       jnp.reshape(jnp.asarray(coefficient, jnp.float32), (1,))]
        if reduction_statistics:
            affine_args.append(key_slope_HxDh)
    compiler_params = None
    if not interpret:
        from jax.experimental.pallas import triton as plgpu  # GPU only

        compiler_params = plgpu.CompilerParams(num_warps=num_warps, num_stages=1)
    out, entropy, max_p, sink, *partials = pl.pallas_call(
        kernel,
        grid=(batch, heads, seq_len // block_q),
        in_specs=in_specs,
        out_specs=out_specs,
        out_shape=out_shapes,
        compiler_params=compiler_params,
        interpret=interpret,
        name="attention_with_stats",
    )(q_BxLxHxDh, k_BxLxHxDh, v_BxLxHxDh, *affine_args)
    return out, {"attn_entropy": entropy, "attn_max": max_p, "attn_sink": sink,
                 **(_combine_blocks(*partials) if reduction_statistics else {})}


def logit_scale(d_head: int, temperature: float) -> float:
    return 1.0 / (math.sqrt(d_head) * temperature)
