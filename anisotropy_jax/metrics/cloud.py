"""Every cosine, norm and drift metric of one (B, L, D) point cloud from shared intermediates.

The functions of `geometry` and `norms` each recompute the per-token norms and unit vectors and
their own column sums, each in passes of its own over the tensor. `cloud_metrics` reads x three
times at most:

  pass 1  per token i: m_i, a power of two above max_d |x_id|, and q_i = Σ_d (x_id/m_i)², so
          ‖x_i‖ = m_i √q_i (`norms._scale_and_sum_of_squares`: one pass on accelerators, two on
          the CPU);
  pass 2  two reductions with the same axes and shapes (over L, to (B, D)), which XLA's GPU
          compiler can emit as one multi-output fusion (XLA:CPU does not):
          S_b = Σ_t u_bt with u_i = x_i / ‖x_i‖ (0 for a zero vector), and Σ_t x_bt / c;
  pass 3  (IsoScore only) the centred (x − μ)/c, written once, and its Gram matrix
          (`geometry._gram`, the GEMM reading it).

c = 2^k is the smallest power of two above 2·max_i m_i, clipped so that 1/c stays a normal float
(float32: c ≤ 2^126): |x/c| < 1/2 and |(x − μ)/c| < 1 (< 4 and < 8 once max |x| ≥ 2^125), so no
sum or product can overflow. Scaling by a power of two commutes with rounding wherever nothing
underflows: it changes no digit of a sum that would not overflow unscaled.

With N = B·L, S = Σ_b S_b, Z the number of non-zero vectors (= Σ_i ‖u_i‖², counted exactly here
rather than summed from the rounded u_i) and μ = Σ_i x_i / N; in brackets, the function of
`geometry` or `norms` that each key equals (the keys are names of `metrics.layer.LAYER_METRICS`):
  average_cosine          = (‖S‖² − Z) / (N(N − 1))          [average_cosine_similarity]
  mean_norm               = Σ_i ‖x_i‖ / N                      [mean_norm]
  within_sequence_cosine  = (Σ_b ‖S_b‖² − Z) / (B·L(L − 1))    [within_sequence_cosine_similarity]
  cross_sequence_cosine   = (‖S‖² − Σ_b ‖S_b‖²) / (N² − B·L²)  [cross_sequence_cosine_similarity]
  drift_norm              = ‖μ‖                                [drift_norm]
  relative_drift          = ‖μ‖ / norm, 0 when norm = 0        [relative_drift]
  isoscore                = (PR − 1)/(D − 1), PR = (tr C)²/‖C‖_F² over the sample covariance C
                            of the x_i                          [isoscore]
A zero vector has cosine 0 with every vector and still counts in N, as in `geometry`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from anisotropy_jax.metrics.geometry import _gram, _participation_score
from anisotropy_jax.metrics.norms import (_scale_and_sum_of_squares, power_of_two_above,
                                         require_pairs, vector_norms)

Array = jax.Array


def _column_sums(x_BxLxD: Array, inv_norm_BxL: Array, inv_c: Array,
                 with_mean: bool) -> tuple[Array, Array | None]:
    """(S_BxD, Σ_t x_bt / c): both reduce (B, L, D) over L to (B, D), so that XLA can emit them
    as one multi-output reduction that reads x once (it does on GPUs)."""
    seq_sums_BxD = jnp.sum(x_BxLxD * inv_norm_BxL[..., None], axis=1)
    if not with_mean:
        return seq_sums_BxD, None
    return seq_sums_BxD, jnp.sum(x_BxLxD * inv_c, axis=1)


def _cosines(seq_sums_BxD: Array, nonzero: Array, b: int, l: int,
             sequences: bool) -> dict[str, Array]:
    n = float(b * l)  # Python floats: N(N − 1) overflows int32 beyond N ≈ 46,000
    total_D = jnp.sum(seq_sums_BxD, axis=0)
    total_sq = jnp.sum(total_D * total_D)
    out = {"average_cosine": (total_sq - nonzero) / (n * (n - 1.0))}
    if sequences:
        within_sq = jnp.sum(seq_sums_BxD * seq_sums_BxD)
        if l >= 2:
            out["within_sequence_cosine"] = (within_sq - nonzero) / (float(b) * l * (l - 1.0))
        if b >= 2:
            out["cross_sequence_cosine"] = (total_sq - within_sq) / (n * n - float(b) * l * l)
    return out


def _isoscore(x_BxLxD: Array, inv_c: Array, mean_over_c_D: Array) -> Array:
    """IsoScore from the Gram matrix of (x − μ)/c, entries bounded by c's choice: the score is
    scale-free, so no extra pass for max |x − μ| (which `geometry.isoscore` takes)."""
    b, l, d = x_BxLxD.shape
    centred_NxD = (x_BxLxD * inv_c - mean_over_c_D[None, None, :]).reshape(b * l, d)
    return _participation_score(_gram(centred_NxD) / (b * l - 1))


def cloud_metrics(x_BxLxD: Array, *, sequences: bool = True, drift: bool = True,
                  isoscore: bool = False) -> dict[str, Array]:
    """The cosine, norm, drift and IsoScore metrics of the point cloud x (B, L, D) at once
    (formulas in the module docstring), each equal within rounding to its function in `geometry`.

    Always "average_cosine" and "mean_norm"; with `sequences`, "within_sequence_cosine" (when L ≥ 2) and
    "cross_sequence_cosine" (when B ≥ 2); with `drift`, "drift_norm" and "relative_drift"; with
    `isoscore`, "isoscore". Scalars in the dtype of x; jit- and vmap-safe. Norms are overflow-safe
    up to ~1e38. Raises ValueError unless x is (B, L, D) with B·L ≥ 2.
    """
    x_BxLxD = jnp.asarray(x_BxLxD)
    if x_BxLxD.ndim != 3:
        raise ValueError(f"expected (B, L, D) hidden states, got shape {x_BxLxD.shape}")
    b, l, _ = x_BxLxD.shape
    require_pairs(b * l, "cloud_metrics")
    # The barriers keep XLA from folding the later sums of these (B, L) and (B, D) partials back
    # into reductions of x (XLA:CPU did: two more passes over x).
    m_BxL, q_BxL = jax.lax.optimization_barrier(_scale_and_sum_of_squares(x_BxLxD))  # pass 1
    c, inv_c = power_of_two_above(jnp.max(m_BxL))
    # 1/‖x_i‖ without forming ‖x_i‖ (no overflow); a zero vector gets 1 and stays 0.
    inv_norm_BxL = (1.0 / jnp.where(m_BxL > 0, m_BxL, 1.0)
                    / jnp.sqrt(jnp.where(q_BxL > 0, q_BxL, 1.0)))
    seq_sums_BxD, col_sums_BxD = jax.lax.optimization_barrier(_column_sums(  # pass 2
        x_BxLxD, inv_norm_BxL, inv_c, with_mean=drift or isoscore))
    nonzero = jnp.sum((q_BxL > 0).astype(x_BxLxD.dtype))
    out = _cosines(seq_sums_BxD, nonzero, b, l, sequences)
    norm_over_c = jnp.mean(m_BxL * inv_c * jnp.sqrt(q_BxL))  # mean ‖x_i‖ / c
    out["mean_norm"] = norm_over_c * c
    if col_sums_BxD is not None:
        mean_over_c_D = jnp.sum(col_sums_BxD, axis=0) / (b * l)  # μ / c
        if drift:
            drift_over_c = vector_norms(mean_over_c_D)
            out["drift_norm"] = drift_over_c * c
            out["relative_drift"] = drift_over_c / jnp.where(norm_over_c > 0, norm_over_c, 1.0)
        if isoscore:
            out["isoscore"] = _isoscore(x_BxLxD, inv_c, mean_over_c_D)  # pass 3
    return out
