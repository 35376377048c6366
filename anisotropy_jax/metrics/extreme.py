"""Extreme activations and dimensions of hidden states: massive activations, outliers (kurtosis,
∞-norm), rogue dimensions and the top principal component with and without the first token
(docs/SCIENCE.md, "Extreme tokens, sinks and intrinsic dimension").
Attention sinks and no-op heads: `metrics.sinks`.

Pure functions of arrays, no model knowledge. Hidden states are (B, L, D) with an optional (B, L)
mask of valid tokens; point clouds are (..., D) with an optional (...,) mask, as
`average_cosine_similarity` takes them; position 0 is the first token of every sequence (the BOS /
[CLS] position). Everything is computed in the input dtype; sums run over values divided by a
power of two above their maximum (`norms.power_of_two_above`), so float32 inputs up to ~1e38 give
finite results.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from anisotropy_jax.metrics.geometry import average_cosine_similarity
from anisotropy_jax.metrics.norms import as_points, power_of_two_above, require_pairs, unit_vectors

Array = jax.Array

# --------------------------------------------------------------------------------------------
# Massive activations (Sun et al., "Massive Activations in Large Language Models", COLM 2024)

def _hidden_states(x_BxLxD: Array, mask_BxL: Array | None) -> tuple[Array, Array]:
    x = jnp.asarray(x_BxLxD)
    if x.ndim != 3:
        raise ValueError(f"expected (B, L, D) hidden states, got shape {x.shape}")
    if mask_BxL is None:
        return x, jnp.ones(x.shape[:2], bool)
    mask_BxL = jnp.asarray(mask_BxL).astype(bool)
    if mask_BxL.shape != x.shape[:2]:
        raise ValueError(f"expected a (B, L) = {x.shape[:2]} mask, got {mask_BxL.shape}")
    return x, mask_BxL


def massive_activations(x_BxLxD: Array, mask_BxL: Array | None = None, k: int = 8,
                        absolute: float = 100.0, relative: float = 1000.0) -> dict[str, Array]:
    """Sun et al.'s massive activations of one layer's hidden states x (B, L, D).

    Sun et al. call an activation massive when its magnitude is larger than 100 *and* about
    1,000 times the median magnitude of its hidden state; here `absolute` and `relative`, the
    median taken per sequence over all its valid activations (L·D of them). The absolute
    threshold is in activation units: an untrained model's states never reach it, so the
    relative criterion alone is counted too.

      top_values     (k,) the k largest |x| of the batch with their sign (values of x), and their
      top_batch, top_token, top_dim  (k,) int32 coordinates (sequence, token, dimension); a rank
                     beyond the number of valid activations is NaN with coordinates −1;
      top_ratio      (k,) |top value| / median |x| of its sequence;
      median         (B,) median |x| of each sequence (NaN for a fully masked one);
      massive_count  (B,) activations over both thresholds; relative_count (B,) over the relative
                     one alone;
      massive_per_dim (D,) massive activations per dimension over the batch (Sun et al. find them
                     in a few fixed dimensions); massive_per_token (B, L) per token.
    """
    x, valid_BxL = _hidden_states(x_BxLxD, mask_BxL)
    b, l, d = x.shape
    if not 1 <= k <= b * l * d:
        raise ValueError(f"k must be in [1, B·L·D = {b * l * d}], got {k}")
    mag = jnp.abs(x)
    valid = valid_BxL[..., None]
    median_B = jnp.nanmedian(jnp.where(valid, mag, jnp.nan).reshape(b, -1), axis=1)
    over_relative = valid & (mag > relative * median_B[:, None, None])
    massive = over_relative & (mag > absolute)
    top_mag, flat_idx = jax.lax.top_k(jnp.where(valid, mag, -1.0).reshape(-1), k)
    found = top_mag >= 0
    ib, it, id_ = jnp.unravel_index(flat_idx, (b, l, d))
    top_values = x.reshape(-1)[flat_idx]
    ratio = top_mag / median_B[ib]

    def coordinate(c):
        return jnp.where(found, c, -1).astype(jnp.int32)

    return {
        "top_values": jnp.where(found, top_values, jnp.nan),
        "top_batch": coordinate(ib), "top_token": coordinate(it), "top_dim": coordinate(id_),
        "top_ratio": jnp.where(found, ratio, jnp.nan),
        "median": median_B,
        "massive_count": jnp.sum(massive, axis=(1, 2)),
        "relative_count": jnp.sum(over_relative, axis=(1, 2)),
        "massive_per_dim": jnp.sum(massive, axis=(0, 1)),
        "massive_per_token": jnp.sum(massive, axis=2),
    }


# --------------------------------------------------------------------------------------------
# Outliers (Bondarenko et al., "Quantizable Transformers", NeurIPS 2023)

def activation_kurtosis(x_BxLxD: Array, mask_BxL: Array | None = None) -> Array:
    """Kurtosis of each sequence's activations, (B,), as Bondarenko et al. report it: over all
    L·D activations of one sequence's layer output (flattened, not per token or per dimension),
    Pearson's (not excess: a Gaussian gives 3), m4 / m2² with m_p the central moments. Their code
    (`transformers_language/utils.py:kurtosis`) divides by (unbiased std)⁴ + 1e-6 instead of m2²,
    a relative difference of ~2/(L·D) (2e-5 for 128 × 768); their table's "avg kurtosis" is
    this value averaged over sequences, then over layers. Invariant to shift and scale; NaN for
    a sequence whose valid activations are all equal (or which has none)."""
    x, valid_BxL = _hidden_states(x_BxLxD, mask_BxL)
    w = valid_BxL[..., None].astype(x.dtype)
    n_B = jnp.sum(w, axis=(1, 2)) * x.shape[-1]
    _, inv_c = power_of_two_above(jnp.max(jnp.abs(x) * w, axis=(1, 2)))
    y = x * inv_c[:, None, None]  # exact; sums of y cannot overflow
    mean_B = jnp.sum(y * w, axis=(1, 2)) / n_B
    dev = (y - mean_B[:, None, None]) * w
    spread = jnp.max(jnp.abs(dev), axis=(1, 2))
    dev = dev / jnp.where(spread > 0, spread, 1.0)[:, None, None]  # |dev| ≤ 1: no overflow
    sq = dev * dev
    m2 = jnp.sum(sq, axis=(1, 2)) / n_B
    m4 = jnp.sum(sq * sq, axis=(1, 2)) / n_B
    return jnp.where(m2 > 0, m4 / jnp.where(m2 > 0, m2 * m2, 1.0), jnp.nan)


def activation_inf_norm(x_BxLxD: Array, mask_BxL: Array | None = None) -> Array:
    """∞-norm of each sequence's activations, max |x| over its valid tokens and dimensions, (B,)
    (Bondarenko et al. average it over sequences, then take the largest layer). 0 when fully
    masked."""
    x, valid_BxL = _hidden_states(x_BxLxD, mask_BxL)
    return jnp.max(jnp.where(valid_BxL[..., None], jnp.abs(x), 0.0), axis=(1, 2))


# --------------------------------------------------------------------------------------------
# Rogue dimensions (Timkey & van Schijndel, "All Bark and No Bite", EMNLP 2021)

def cosine_contributions(x: Array, mask: Array | None = None) -> Array:
    """CC_d, (D,): the contribution of dimension d to the average cosine over all distinct pairs
    of the vectors x (..., D) (Timkey & van Schijndel's CC(f_d) = E[x_d y_d / (‖x‖‖y‖)], here
    exact instead of sampled): with unit vectors x̂,

        CC_d = ((Σ_i x̂_id)² − Σ_i x̂_id²) / (N (N − 1)),   Σ_d CC_d = average cosine.

    O(N·D). `mask` (...,) selects the vectors that count; zero vectors count with cosine 0, as
    in `average_cosine_similarity`. Raises ValueError for fewer than 2 vectors."""
    u_NxD = unit_vectors(as_points(x))
    require_pairs(u_NxD.shape[0], "cosine_contributions")
    if mask is None:
        n = float(u_NxD.shape[0])
    else:
        w_N = jnp.asarray(mask).reshape(-1).astype(u_NxD.dtype)
        u_NxD = u_NxD * w_N[:, None]
        n = jnp.sum(w_N)
    total_D = jnp.sum(u_NxD, axis=0)
    return (total_D * total_D - jnp.sum(u_NxD * u_NxD, axis=0)) / (n * (n - 1))


def top_contribution_share(contributions_D: Array, k: int = 1) -> tuple[Array, Array]:
    """(share, dims): the k dimensions with the largest CC_d, (k,), and their summed contribution
    over the average cosine Σ_d CC_d, (). CC_d can be negative, so the share can exceed 1; it is
    meaningless when the average cosine is near 0 (an isotropic cloud)."""
    cc = jnp.asarray(contributions_D)
    if not 1 <= k <= cc.shape[-1]:
        raise ValueError(f"k must be in [1, D = {cc.shape[-1]}], got {k}")
    top, dims = jax.lax.top_k(cc, k)
    return jnp.sum(top) / jnp.sum(cc), dims


def standardized_average_cosine(x: Array, mask: Array | None = None) -> Array:
    """Average cosine over all distinct pairs after standardising every dimension over the cloud,
    z_d = (x_d − μ_d) / σ_d (Timkey & van Schijndel's postprocessing; a dimension with σ_d = 0
    becomes 0). Centring removes the common direction, so this is ~−1/(N − 1) for any cloud
    whose anisotropy is a shared offset; it stays high only for structure beyond one mean."""
    x_NxD = as_points(x)
    require_pairs(x_NxD.shape[0], "standardized_average_cosine")
    w_N = (jnp.ones(x_NxD.shape[:1], x_NxD.dtype) if mask is None
           else jnp.asarray(mask).reshape(-1).astype(x_NxD.dtype))
    _, inv_c = power_of_two_above(jnp.max(jnp.abs(x_NxD) * w_N[:, None]))
    y = x_NxD * inv_c
    n = jnp.sum(w_N)
    centred = (y - jnp.sum(y * w_N[:, None], axis=0, keepdims=True) / n) * w_N[:, None]
    spread_D = jnp.max(jnp.abs(centred), axis=0)
    centred = centred / jnp.where(spread_D > 0, spread_D, 1.0)[None, :]
    std_D = jnp.sqrt(jnp.sum(centred * centred, axis=0) / n)
    z = centred / jnp.where(std_D > 0, std_D, 1.0)[None, :]
    return average_cosine_similarity(z, None if mask is None else w_N > 0)


# --------------------------------------------------------------------------------------------
# The top principal component, with and without the first token

def top_pc_share(x_BxLxD: Array, mask_BxL: Array | None = None, drop_first: bool = False
                 ) -> Array:
    """λ_1 / Σλ over the eigenvalues of the covariance of the valid token vectors of x (B, L, D)
    pooled over the batch (the share of variance on the first principal component), or of all
    tokens but the first of every sequence (`drop_first`: without the BOS / [CLS] row, whose
    outlier alone can make the top PC). 1/D for an isotropic cloud, 1 for points on a line; 0 when
    the cloud has no variance. Same value as `geometry.top_pc_variance_ratio` without a mask."""
    x, valid_BxL = _hidden_states(x_BxLxD, mask_BxL)
    if drop_first:
        x, valid_BxL = x[:, 1:], valid_BxL[:, 1:]
    x_NxD = x.reshape(-1, x.shape[-1])
    w_N = valid_BxL.reshape(-1).astype(x.dtype)
    require_pairs(x_NxD.shape[0], "top_pc_share")
    _, inv_c = power_of_two_above(jnp.max(jnp.abs(x_NxD) * w_N[:, None]))
    y = x_NxD * inv_c
    n = jnp.sum(w_N)
    centred = (y - jnp.sum(y * w_N[:, None], axis=0, keepdims=True) / n) * w_N[:, None]
    spread = jnp.max(jnp.abs(centred))
    centred = centred / jnp.where(spread > 0, spread, 1.0)
    cov_DxD = jnp.einsum("nd,ne->de", centred, centred, precision=jax.lax.Precision.HIGHEST)
    eig_D = jnp.clip(jnp.linalg.eigvalsh(cov_DxD), 0.0, None)
    total = jnp.sum(eig_D)
    return jnp.where(total > 0, jnp.max(eig_D) / jnp.where(total > 0, total, 1.0), 0.0)
