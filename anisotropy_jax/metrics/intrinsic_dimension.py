"""Intrinsic dimension from nearest-neighbour distance ratios: TwoNN (Facco, d'Errico, Rodriguez &
Laio, "Estimating the intrinsic dimension of datasets by a minimal neighborhood information",
Sci. Rep. 2017) and GRIDE (Denti, Doimo, Laio & Mira, "The generalized ratios intrinsic dimension
estimator", Sci. Rep. 2022), as Razzhigaev et al. ("The Shape of Learning", EACL 2024 Findings)
report them per layer (docs/SCIENCE.md, "Extreme tokens, sinks and intrinsic dimension").

For every point i let r_n(i) be the distance to its n-th nearest neighbour (n = 1 the nearest,
the point itself excluded) and μ_i = r_{n2}(i) / r_{n1}(i) ≥ 1. If the density is locally
constant on a d-dimensional manifold, μ has the density (GRIDE)

    f(μ) = d (μ^d − 1)^{n2−n1−1} / (B(n2 − n1, n1) μ^{(n2−1)d+1}),   μ > 1,

and for (n1, n2) = (1, 2) (TwoNN) the Pareto law F(μ) = 1 − μ^{−d}. Estimators here:

  * `twonn_dimension`: Facco et al.'s linear fit. Sort the μ_i, F̂(μ_(i)) = i/N, fit
    −log(1 − F̂) = d log μ through the origin by least squares on the smallest ⌊fraction·N⌋ ratios
    (the largest 10% discarded by default, as in the paper and in dadapy's `compute_id_2NN`).
  * `gride_dimension`: the maximum-likelihood d of f for one (n1, n2), root of the score
        N/d + Σ_i [(n2 − n1 − 1) log μ_i / (1 − μ_i^{−d}) − (n2 − 1) log μ_i] = 0,
    which decreases in d (one root); with its Fisher-information standard error
    (I(d) = N/d² + (n2 − n1 − 1) Σ_i (log μ_i)² μ_i^{−d} / (1 − μ_i^{−d})²). (n1, n2) = (1, 2)
    gives the TwoNN maximum likelihood d = N / Σ log μ_i. `unbiased=True` replaces N by N − 1 in
    the score, as dadapy does ((N − 1)/Σ log μ is unbiased for TwoNN).
  * `gride_scaling`: GRIDE at n1 = 1, 2, 4, …, n2 = 2 n1 up to `max_rank`, the ID as a function of
    the neighbourhood size (dadapy's `return_id_scaling_gride`).
Identical points are counted once (`distinct_points`), as dadapy's `remove_identical_points`
does before any estimate: a copy is left out of the ratios *and* of the neighbour search, so it
is nobody's neighbour (were copies only dropped as ratios, they would still be the second
neighbour of their other copies' neighbours, and 60 % duplicated points of a 5-dimensional
Gaussian raise TwoNN from 5.0 to 8.1). dadapy also drops ratios above 20 (q95 − q50) + q50 before
GRIDE (a second guard against duplicates); this module does not: beyond identical points it
leaves out only points whose n1-th neighbour is at distance 0 after centring (for which μ is
undefined).

Distances: the points are centred and divided by a power of two (translation and scale leave
every ratio unchanged), neighbours are ranked from the Gram matrix in blocks of rows (O(block·N)
memory, O(N²·D) time), and the distances at the ranks used are recomputed from the differences
x_i − x_j, so no precision is lost to the ‖x‖² − 2x·y + ‖y‖² cancellation. Points (..., D) with an
optional (...,) mask of the points that count (a masked point is nobody's neighbour).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from anisotropy_jax.metrics.norms import as_points, power_of_two_above, vector_norms

Array = jax.Array

D_RANGE = (1e-3, 1e5)  # GRIDE's search interval for d (a larger root gives +inf)


class IDEstimate(NamedTuple):
    """One GRIDE estimate (or one per scale, (S,) each, from `gride_scaling`)."""

    dimension: Array  # the maximum-likelihood intrinsic dimension
    stderr: Array     # 1/√(Fisher information) at that dimension
    scale: Array      # mean of r_{n1} and r_{n2} over the counted points (input units)


def _points_and_weights(points: Array, mask: Array | None) -> tuple[Array, Array]:
    x_NxD = as_points(points)
    if mask is None:
        return x_NxD, jnp.ones(x_NxD.shape[:1], bool)
    mask_N = jnp.asarray(mask).astype(bool).reshape(-1)
    if mask_N.shape[0] != x_NxD.shape[0]:
        raise ValueError(f"mask has {mask_N.shape[0]} entries for {x_NxD.shape[0]} points")
    return x_NxD, mask_N


# Earlier points checked for an exact copy of each point: the nearest by the Gram matrix, so an
# identical point is missed only behind this many distinct points closer than rounding.
COPY_CANDIDATES = 8


def _centred(x_NxD: Array, valid_N: Array) -> tuple[Array, Array]:
    """(y, c): the points centred on the mean of the counted points and divided by powers of two
    (exact up to rounding; it keeps a large common offset out of the Gram matrix), x ≈ c·y + mean."""
    w_N = valid_N.astype(x_NxD.dtype)
    c, inv_c = power_of_two_above(jnp.max(jnp.abs(x_NxD) * w_N[:, None]))
    y = x_NxD * inv_c
    y = y - jnp.sum(y * w_N[:, None], axis=0, keepdims=True) / jnp.sum(w_N)
    c2, inv_c2 = power_of_two_above(jnp.max(jnp.abs(y) * w_N[:, None]))
    return y * inv_c2, c * c2


def distinct_points(points: Array, mask: Array | None = None, block_size: int = 512) -> Array:
    """(N,) bool: the counted points (mask, None: all) that are not an exact copy of an earlier
    counted point, for points (..., D) flattened to (N, D): every distinct point counted once, as
    dadapy's `remove_identical_points` (np.unique over the rows) keeps it. The copies are looked
    for among each point's COPY_CANDIDATES nearest earlier points, and compared exactly."""
    x_NxD, valid_N = _points_and_weights(points, mask)
    n = x_NxD.shape[0]
    if n < 2:
        return valid_N
    y, _ = _centred(x_NxD, valid_N)
    sq_N = jnp.sum(y * y, axis=-1)
    k = min(COPY_CANDIDATES, n - 1)

    def row_copy(args):
        row_D, x_D, index = args
        d2_N = sq_N - 2.0 * jnp.dot(y, row_D, precision=jax.lax.Precision.HIGHEST)
        earlier = valid_N & (jnp.arange(n) < index)
        score, idx_K = jax.lax.top_k(jnp.where(earlier, -d2_N, -jnp.inf), k)
        same_K = jnp.all(x_NxD[idx_K] == x_D[None, :], axis=-1) & jnp.isfinite(score)
        return jnp.any(same_K)

    copy_N = jax.lax.map(row_copy, (y, x_NxD, jnp.arange(n)), batch_size=block_size)
    return valid_N & ~copy_N


def neighbor_distances(points: Array, ranks: tuple[int, ...], mask: Array | None = None,
                       block_size: int = 512) -> Array:
    """Distances to the neighbours of the given ranks (1 = nearest, self excluded), (N, len(ranks))
    for points (..., D) flattened to (N, D). Masked points are nobody's neighbour (their own row
    is computed but meaningless); a rank beyond the number of other counted points gives +inf."""
    x_NxD, valid_N = _points_and_weights(points, mask)
    ranks = tuple(int(r) for r in ranks)
    n = x_NxD.shape[0]
    if not ranks or min(ranks) < 1 or max(ranks) > n - 1:
        raise ValueError(f"ranks must lie in [1, N − 1 = {n - 1}], got {ranks}")
    w_N = valid_N.astype(x_NxD.dtype)
    y, scale = _centred(x_NxD, valid_N)
    sq_N = jnp.sum(y * y, axis=-1)
    k = max(ranks)

    def row_neighbours(args):  # one row; lax.map vmaps it over blocks of `block_size` rows
        row_D, index = args
        d2_N = sq_N - 2.0 * jnp.dot(y, row_D, precision=jax.lax.Precision.HIGHEST) + jnp.sum(
            row_D * row_D)
        excluded = ~valid_N | (jnp.arange(n) == index)
        return jax.lax.top_k(jnp.where(excluded, -jnp.inf, -d2_N), k)[1]

    idx_NxK = jax.lax.map(row_neighbours, (y, jnp.arange(n)), batch_size=block_size)
    picked_NxR = idx_NxK[:, jnp.asarray([r - 1 for r in ranks])]
    dist = vector_norms(y[:, None, :] - y[picked_NxR])
    available = jnp.sum(w_N) - w_N  # other counted points of each row
    beyond = jnp.asarray(ranks, x_NxD.dtype)[None, :] > available[:, None]
    return jnp.where(beyond, jnp.inf, dist * scale)


def _ratio_logs(r1_N: Array, r2_N: Array, valid_N: Array) -> tuple[Array, Array]:
    """(log μ ≥ 0, weight): points with r1 = 0 (duplicates) or a non-finite ratio drop out."""
    ok = valid_N & (r1_N > 0) & jnp.isfinite(r2_N)
    log_mu = jnp.log(jnp.where(ok, r2_N, 1.0)) - jnp.log(jnp.where(ok, r1_N, 1.0))
    return jnp.maximum(log_mu, 0.0), ok


def twonn_from_ratios(log_mu_N: Array, weights_N: Array | None = None, fraction: float = 0.9
                      ) -> Array:
    """Facco et al.'s fit from log μ_i = log(r2/r1), (N,), of the points with weight 1."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be in (0, 1) (the fit's last point is at F = 1, "
                         f"−log 0 = ∞); for all ratios use gride_dimension(n1=1, n2=2), the "
                         f"maximum likelihood, got {fraction}")
    log_mu = jnp.asarray(log_mu_N)
    ok = jnp.ones(log_mu.shape, bool) if weights_N is None else jnp.asarray(weights_N) > 0
    n = jnp.sum(ok).astype(log_mu.dtype)
    sorted_logs = jnp.sort(jnp.where(ok, log_mu, jnp.inf))
    rank = jnp.arange(1, log_mu.shape[0] + 1, dtype=log_mu.dtype)
    kept = rank <= jnp.floor(n * fraction)
    xs = jnp.where(kept, sorted_logs, 0.0)
    ys = jnp.where(kept, -jnp.log1p(-jnp.minimum(rank / n, fraction)), 0.0)
    return jnp.sum(xs * ys) / jnp.sum(xs * xs)


def twonn_dimension(points: Array, mask: Array | None = None, fraction: float = 0.9,
                    block_size: int = 512) -> Array:
    """TwoNN intrinsic dimension of the points (..., D), () (Facco et al.'s fit; see the module
    docstring). Translation-, rotation- and scale-invariant: a common bias added to every point
    cannot change it."""
    if not 0.0 < fraction < 1.0:
        twonn_from_ratios(jnp.zeros(1), None, fraction)  # the one message, before any work
    x_NxD, valid_N = _points_and_weights(points, mask)
    valid_N = distinct_points(x_NxD, valid_N, block_size)
    r_Nx2 = neighbor_distances(x_NxD, (1, 2), valid_N, block_size)
    r_Nx2 = jnp.sort(r_Nx2, axis=-1)  # ranks come from the Gram matrix: a near tie may swap
    log_mu, ok = _ratio_logs(r_Nx2[:, 0], r_Nx2[:, 1], valid_N)
    return twonn_from_ratios(log_mu, ok, fraction)


def _g(t: Array) -> Array:
    """t / (1 − e^{−t}), 1 at t = 0."""
    small = t < 1e-4
    safe = jnp.where(small, 1.0, t)
    return jnp.where(small, 1.0 + 0.5 * t, safe / -jnp.expm1(-safe))


def _h(t: Array) -> Array:
    """t² e^{−t} / (1 − e^{−t})² = (t / (2 sinh(t/2)))², 1 at t = 0."""
    small = t < 1e-4
    safe = jnp.where(small, 1.0, t)
    return jnp.where(small, 1.0, (safe / (2.0 * jnp.sinh(0.5 * safe))) ** 2)


def gride_from_ratios(log_mu_N: Array, n1: int, n2: int, weights_N: Array | None = None,
                      unbiased: bool = False, iterations: int = 80) -> tuple[Array, Array]:
    """(dimension, stderr) of GRIDE from log μ_i = log(r_{n2}/r_{n1}), (N,), of the points with
    weight 1: bisection on log d over `D_RANGE` for the root of the score (see the module
    docstring), written as d·score = N' + Σ_i [(n2 − n1 − 1) g(d ℓ_i) − (n2 − 1) d ℓ_i] with
    g(t) = t/(1 − e^{−t}) (stable as ℓ → 0), N' = N or N − 1 (`unbiased`). +inf when the root
    lies above the range (e.g. every μ = 1), 0 below it."""
    if not 1 <= n1 < n2:
        raise ValueError(f"need 1 <= n1 < n2, got n1={n1}, n2={n2}")
    log_mu = jnp.asarray(log_mu_N)
    w = (jnp.ones(log_mu.shape, log_mu.dtype) if weights_N is None
         else (jnp.asarray(weights_N) > 0).astype(log_mu.dtype))
    return _gride_solve(log_mu, w, jnp.asarray(n1, log_mu.dtype), jnp.asarray(n2, log_mu.dtype),
                        unbiased, iterations)


def _gride_solve(log_mu_N: Array, w_N: Array, n1: Array, n2: Array, unbiased: bool,
                 iterations: int) -> tuple[Array, Array]:
    """`gride_from_ratios` with n1, n2 as arrays (so that `gride_scaling` vmaps it over scales)."""
    n = jnp.sum(w_N)
    lead = n - 1.0 if unbiased else n
    ell = jnp.where(w_N > 0, log_mu_N, 0.0)

    def score_times_d(d):
        t = d * ell
        return lead + jnp.sum(w_N * ((n2 - n1 - 1) * _g(t) - (n2 - 1) * t))

    lo0, hi0 = (jnp.log(jnp.asarray(v, log_mu_N.dtype)) for v in D_RANGE)

    def step(_, bounds):
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        positive = score_times_d(jnp.exp(mid)) > 0
        return jnp.where(positive, mid, lo), jnp.where(positive, hi, mid)

    lo, hi = jax.lax.fori_loop(0, iterations, step, (lo0, hi0))
    d = jnp.exp(0.5 * (lo + hi))
    d = jnp.where(score_times_d(jnp.exp(hi0)) > 0, jnp.inf, d)
    d = jnp.where(score_times_d(jnp.exp(lo0)) < 0, 0.0, d)
    info_times_d2 = n + (n2 - n1 - 1) * jnp.sum(w_N * _h(d * ell))
    return d, d / jnp.sqrt(info_times_d2)


def gride_dimension(points: Array, n1: int = 1, n2: int | None = None,
                    mask: Array | None = None, unbiased: bool = False,
                    block_size: int = 512) -> IDEstimate:
    """GRIDE intrinsic dimension of the points (..., D) from the ratios r_{n2}/r_{n1} (n2 = 2 n1
    by default), an `IDEstimate` of scalars. (n1, n2) = (1, 2) is the TwoNN maximum likelihood."""
    n2 = 2 * n1 if n2 is None else n2
    if not 1 <= n1 < n2:
        raise ValueError(f"need 1 <= n1 < n2, got n1={n1}, n2={n2}")
    x_NxD, valid_N = _points_and_weights(points, mask)
    valid_N = distinct_points(x_NxD, valid_N, block_size)
    r = neighbor_distances(x_NxD, (n1, n2), valid_N, block_size)
    log_mu, ok = _ratio_logs(r[:, 0], r[:, 1], valid_N)
    d, err = gride_from_ratios(log_mu, n1, n2, ok, unbiased)
    wf = ok.astype(r.dtype)
    scale = jnp.sum(jnp.where(ok[:, None], r, 0.0)) / (2.0 * jnp.sum(wf))
    return IDEstimate(d, err, scale)


def gride_scaling(points: Array, max_rank: int = 64, mask: Array | None = None,
                  unbiased: bool = False, block_size: int = 512) -> IDEstimate:
    """GRIDE at (n1, n2) = (2^i, 2^{i+1}) for 2^{i+1} ≤ min(max_rank, N − 1): an `IDEstimate` of
    (S,) arrays, S = ⌊log2(min(max_rank, N − 1))⌋, one distance pass for every scale."""
    x_NxD, valid_N = _points_and_weights(points, mask)
    top = min(int(max_rank), x_NxD.shape[0] - 1)
    if top < 2:
        raise ValueError(f"gride_scaling needs max_rank >= 2 and N >= 3, got max_rank="
                         f"{max_rank}, N={x_NxD.shape[0]}")
    ranks = tuple(2 ** i for i in range(top.bit_length()))  # 1, 2, 4, …, ≤ top
    valid_N = distinct_points(x_NxD, valid_N, block_size)
    r_NxR = neighbor_distances(x_NxD, ranks, valid_N, block_size)
    r1_SxN, r2_SxN = r_NxR[:, :-1].T, r_NxR[:, 1:].T
    log_mu_SxN, ok_SxN = jax.vmap(_ratio_logs, in_axes=(0, 0, None))(r1_SxN, r2_SxN, valid_N)
    n1_S = jnp.asarray(ranks[:-1], r_NxR.dtype)
    solve = functools.partial(_gride_solve, unbiased=unbiased, iterations=80)
    dims, errs = jax.vmap(solve)(log_mu_SxN, ok_SxN.astype(r_NxR.dtype), n1_S, 2.0 * n1_S)
    pair_sums_S = jnp.sum(jnp.where(ok_SxN, r1_SxN + r2_SxN, 0.0), axis=1)
    return IDEstimate(dims, errs, pair_sums_S / (2.0 * jnp.sum(ok_SxN, axis=1)))


# The GRIDE scale reported per layer by the studies (`layer_dimensions`): (n1, n2) = (8, 16).
# TwoNN's (1, 2) looks at the smallest scale, where small-scale noise (and float32 rounding of
# nearly equal tokens) inflates the ID; GRIDE at n1 = 8 averages over 16 neighbours, the scale
# Denti et al. recommend moving to when the (1, 2) estimate is noise-dominated, still local in
# clouds of thousands of tokens, and the pair the common-bias probe reports
# (docs/results/extreme/intrinsic_dimension/README.md). It needs at least n2 + 1 = 17 points.
LAYER_GRIDE_RANKS = (8, 16)


def layer_dimensions(points: Array, mask: Array | None = None,
                     gride_ranks: tuple[int, int] = LAYER_GRIDE_RANKS, fraction: float = 0.9,
                     block_size: int = 512) -> dict[str, Array]:
    """{"twonn_dimension": `twonn_dimension(points, mask, fraction)`, "gride_dimension":
    `gride_dimension(points, *gride_ranks, mask).dimension`} from one neighbour pass (ranks 1, 2,
    n1, n2) over the points (..., D). NaN where an estimate is undefined: fewer than 3 points
    (TwoNN) or n2 + 1 (GRIDE), or no counted point left (every point a duplicate). Identical
    points are counted once (`distinct_points`)."""
    n1, n2 = (int(r) for r in gride_ranks)
    x_NxD, valid_N = _points_and_weights(points, mask)
    nan = jnp.full((), jnp.nan, x_NxD.dtype)
    n = x_NxD.shape[0]
    if n < 3:
        return {"twonn_dimension": nan, "gride_dimension": nan}
    with_gride = n2 <= n - 1
    ranks = (1, 2, n1, n2) if with_gride else (1, 2)
    valid_N = distinct_points(x_NxD, valid_N, block_size)
    r_NxR = neighbor_distances(x_NxD, ranks, valid_N, block_size)
    r_Nx2 = jnp.sort(r_NxR[:, :2], axis=-1)  # as twonn_dimension: a near tie may swap
    log_mu, ok = _ratio_logs(r_Nx2[:, 0], r_Nx2[:, 1], valid_N)
    out = {"twonn_dimension": jnp.where(jnp.sum(ok) >= 2, twonn_from_ratios(log_mu, ok, fraction),
                                        nan), "gride_dimension": nan}
    if with_gride:
        log_mu, ok = _ratio_logs(r_NxR[:, 2], r_NxR[:, 3], valid_N)
        d, _ = gride_from_ratios(log_mu, n1, n2, ok)
        out["gride_dimension"] = jnp.where(jnp.any(ok), d, nan)
    return out
