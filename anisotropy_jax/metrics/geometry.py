"""Geometry of point clouds: cosine similarities, drift, spectrum-based isotropy."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from anisotropy_jax.metrics.norms import (as_points, mean_norm, power_of_two_above, require_pairs,
                                         unit_vectors, vector_norms)

Array = jax.Array


# --------------------------------------------------------------------------------------------
# Cosine similarity

def average_cosine_similarity(x: Array, mask: Array | None = None) -> Array:
    """Mean cosine similarity over all distinct pairs of the vectors x (..., D).

    With unit vectors u_i and S = Σ u_i:  avg cos = (‖S‖² − Σ‖u_i‖²) / (N (N − 1)),
    i.e. (‖S‖² − N) / (N(N − 1)) when no vector is zero. O(N·D) and exact: no N×N matrix.
    A zero vector has cosine 0 with every other vector (it still counts as a vector).
    `mask` (...,) selects the vectors that count (N = mask.sum()).
    Raises ValueError when fewer than 2 vectors are given.
    """
    u_NxD = unit_vectors(as_points(x))
    require_pairs(u_NxD.shape[0], "average_cosine_similarity")
    if mask is None:
        n = float(u_NxD.shape[0])  # a Python float: N(N − 1) overflows int32 beyond N ≈ 46,000
    else:
        w_N = jnp.asarray(mask).reshape(-1).astype(u_NxD.dtype)
        u_NxD = u_NxD * w_N[:, None]
        n = jnp.sum(w_N)
    total_D = jnp.sum(u_NxD, axis=0)
    self_terms = jnp.sum(u_NxD * u_NxD)
    return (jnp.sum(total_D * total_D) - self_terms) / (n * (n - 1))


# The centres `centered_average_cosine` subtracts, and the rule for a massive token (Sun et al.'s
# factor): a token whose largest |activation| is at least MASSIVE_TOKEN_FACTOR times the median
# |activation| of the measured tokens. One such token (e.g. position 0 of SmolLM2, up to 13,820x
# the median) drags the mean towards itself, so subtracting the mean adds a shared direction to
# every other token: the "centred" cosine can then exceed the raw one.
CENTRES = ("mean", "mean_without_massive", "median")
MASSIVE_TOKEN_FACTOR = 100.0


def massive_tokens(x: Array, mask: Array | None = None,
                   factor: float = MASSIVE_TOKEN_FACTOR) -> Array:
    """(N,) bool: the vectors of x (..., D) (among those `mask` selects) whose largest |entry| is
    ≥ `factor` × the median |entry| of the selected vectors."""
    a_NxD = jnp.abs(as_points(x))
    if mask is None:
        median = jnp.median(a_NxD)
        selected_N = jnp.ones(a_NxD.shape[:1], bool)
    else:
        selected_N = jnp.asarray(mask).reshape(-1).astype(bool)
        median = jnp.nanmedian(jnp.where(selected_N[:, None], a_NxD, jnp.nan))
    return (jnp.max(a_NxD, axis=1) >= factor * median) & selected_N


def centered_average_cosine(x: Array, mask: Array | None = None, centre: str = "mean") -> Array:
    """`average_cosine_similarity` of the centred vectors h_i − μ, μ the mean of the vectors of
    x (..., D) (of the vectors `mask` selects, when given; (B, L, D) with a (B, L) mask as for
    `average_cosine_similarity`). `centre`: "mean"; "mean_without_massive", the mean of the
    vectors that are not `massive_tokens` (all of them when every one is), every vector still
    measured; "median", the per-dimension median of the vectors.

    Why: for vectors of equal norm the average cosine is a function of the mean's norm alone,
    avg cos = (N/(N − 1))·‖mean of the unit vectors‖² − 1/(N − 1), so a correlation of drift with
    the average cosine is an identity there. Centring removes the common offset; what is left is
    the anisotropy beyond one shared direction. The centred vectors sum to 0, so centred vectors
    of equal norm give exactly −1/(N − 1): the floor of the statistic, below 0 (for the mean).
    O(N·D), no N×N matrix; the mean is summed over x/c (c a power of two above max |x|: exact
    scaling), so it cannot overflow. A vector equal to the centre is a zero vector (cosine 0 with
    every other). A cloud of identical vectors (max |h − μ| within 8 ulps of max |h|, i.e.
    rounding only) gives 0, not the cosine of rounding residuals. Raises ValueError when fewer
    than 2 vectors are given or `centre` is unknown.
    """
    if centre not in CENTRES:
        raise ValueError(f"centre={centre!r}; choose from {CENTRES}")
    x_NxD = as_points(x)
    require_pairs(x_NxD.shape[0], "centered_average_cosine")
    w_N = (jnp.ones(x_NxD.shape[:1], x_NxD.dtype) if mask is None
           else jnp.asarray(mask).reshape(-1).astype(x_NxD.dtype))
    peak = jnp.max(jnp.abs(x_NxD) * w_N[:, None])
    _, inv_c = power_of_two_above(peak)
    y_NxD = x_NxD * inv_c
    if centre == "median":
        mean_D = jnp.nanmedian(jnp.where(w_N[:, None] > 0, y_NxD, jnp.nan), axis=0)
    else:
        c_N = w_N
        if centre == "mean_without_massive":
            c_N = w_N * ~massive_tokens(x_NxD, w_N > 0)
            c_N = jnp.where(jnp.sum(c_N) > 0, c_N, w_N)
        mean_D = jnp.sum(y_NxD * c_N[:, None], axis=0) / jnp.sum(c_N)
    centred_NxD = (y_NxD - mean_D[None, :]) * w_N[:, None]
    # Identical vectors leave only the rounding of the mean: call that no direction at all.
    rounding = 8.0 * jnp.finfo(x_NxD.dtype).eps * peak * inv_c
    spread = jnp.max(jnp.abs(centred_NxD))
    centred_NxD = jnp.where(spread > rounding, centred_NxD, 0.0)
    return average_cosine_similarity(centred_NxD, None if mask is None else w_N > 0)


def _sequence_sums(x_BxLxD: Array, mask_BxL: Array | None):
    x_BxLxD = jnp.asarray(x_BxLxD)
    if x_BxLxD.ndim != 3:
        raise ValueError(f"expected (B, L, D) hidden states, got shape {x_BxLxD.shape}")
    u_BxLxD = unit_vectors(x_BxLxD)
    if mask_BxL is None:
        lengths_B = jnp.full(x_BxLxD.shape[:1], x_BxLxD.shape[1], u_BxLxD.dtype)
    else:
        w_BxL = jnp.asarray(mask_BxL).astype(u_BxLxD.dtype)
        u_BxLxD = u_BxLxD * w_BxL[..., None]
        lengths_B = jnp.sum(w_BxL, axis=1)
    seq_sums_BxD = jnp.sum(u_BxLxD, axis=1)
    self_terms = jnp.sum(u_BxLxD * u_BxLxD)
    return seq_sums_BxD, lengths_B, self_terms


def cross_sequence_cosine_similarity(x_BxLxD: Array, mask_BxL: Array | None = None) -> Array:
    """Mean cosine over pairs of tokens from *different* sequences of x (B, L, D).

    With S_b the sum of the unit vectors of sequence b, S = Σ_b S_b and L_b its length:
    cross = (‖S‖² − Σ_b‖S_b‖²) / (N² − Σ_b L_b²), N = Σ_b L_b (= (‖S‖² − Σ‖S_b‖²)/(N² − B L²)
    without a mask). This is what the papers' uniform pair sampling over a corpus estimates.
    Raises ValueError when B < 2.
    """
    if jnp.ndim(x_BxLxD) == 3 and jnp.shape(x_BxLxD)[0] < 2:
        raise ValueError("cross_sequence_cosine_similarity needs at least 2 sequences (B >= 2)")
    seq_sums_BxD, lengths_B, _ = _sequence_sums(x_BxLxD, mask_BxL)
    total_D = jnp.sum(seq_sums_BxD, axis=0)
    n = jnp.sum(lengths_B)
    within_sq = jnp.sum(seq_sums_BxD * seq_sums_BxD)
    return (jnp.sum(total_D * total_D) - within_sq) / (n * n - jnp.sum(lengths_B * lengths_B))


def within_sequence_cosine_similarity(x_BxLxD: Array, mask_BxL: Array | None = None) -> Array:
    """Mean cosine over pairs of distinct tokens of the *same* sequence of x (B, L, D).

    within = (Σ_b‖S_b‖² − Σ_i‖u_i‖²) / Σ_b L_b(L_b − 1)  (= (Σ_b‖S_b‖² − N)/(B L (L − 1))).
    Raises ValueError when L < 2.
    """
    if jnp.ndim(x_BxLxD) == 3 and jnp.shape(x_BxLxD)[1] < 2:
        raise ValueError("within_sequence_cosine_similarity needs sequences of length >= 2")
    seq_sums_BxD, lengths_B, self_terms = _sequence_sums(x_BxLxD, mask_BxL)
    within_sq = jnp.sum(seq_sums_BxD * seq_sums_BxD)
    return (within_sq - self_terms) / jnp.sum(lengths_B * (lengths_B - 1))


def sampled_pair_cosine_similarity(x: Array, key: Array, num_pairs: int = 10_000) -> Array:
    """The papers' estimator: mean cosine of `num_pairs` pairs (i, j), i ≠ j, drawn uniformly.

    i ~ U{0..N−1}, j = (i + o) mod N with o ~ U{1..N−1}, so (i, j) is uniform over ordered pairs
    of distinct indices. Unbiased for `average_cosine_similarity`, standard error ~ std/√K.
    """
    x_NxD = as_points(x)
    n = x_NxD.shape[0]
    require_pairs(n, "sampled_pair_cosine_similarity")
    key_i, key_o = jax.random.split(key)
    i_K = jax.random.randint(key_i, (num_pairs,), 0, n)
    j_K = (i_K + jax.random.randint(key_o, (num_pairs,), 1, n)) % n
    u_NxD = unit_vectors(x_NxD)
    return jnp.mean(jnp.sum(u_NxD[i_K] * u_NxD[j_K], axis=-1))


# --------------------------------------------------------------------------------------------
# Drift

def drift_norm(x: Array) -> Array:
    """‖μ‖ with μ the mean of the *unnormalised* vectors x (..., D) (common drift, Biś et al.).
    The sum runs over x/c (c a power of two above max |x|), so it cannot overflow."""
    x_NxD = as_points(x)
    c, inv_c = power_of_two_above(jnp.max(jnp.abs(x_NxD)))
    return vector_norms(jnp.mean(x_NxD * inv_c, axis=0)) * c


def relative_drift(x: Array) -> Array:
    """‖μ‖ / mean_i ‖x_i‖ ∈ [0, 1]: 1 when all vectors are equal, ~1/√N for isotropic noise.

    0 for a cloud of zero vectors (no drift), never NaN.
    """
    x_NxD = as_points(x)
    mean = mean_norm(x_NxD)
    return drift_norm(x_NxD) / jnp.where(mean > 0, mean, 1.0)


# --------------------------------------------------------------------------------------------
# Spectrum-based isotropy

def _centred_covariance(x_NxD: Array) -> tuple[Array, Array]:
    """(C / s², s): sample covariance (1/(N − 1) normalisation) of x / s, and the scale s.

    The data are divided by a power of two c above max |x| (exact) so that the mean's sum cannot
    overflow, the mean is removed, and the result divided by s' = max |x/c − mean| so that the
    products cannot overflow for huge activations (IsoScore is scale-free; IsoScore* rescales its
    shrinkage by s = c·s').
    """
    c, inv_c = power_of_two_above(jnp.max(jnp.abs(x_NxD)))
    x_NxD = x_NxD * inv_c
    xc_NxD = x_NxD - jnp.mean(x_NxD, axis=0, keepdims=True)
    scale = jnp.max(jnp.abs(xc_NxD))
    scale = jnp.where(scale > 0, scale, 1.0)
    xc_NxD = xc_NxD / scale
    n = x_NxD.shape[0]
    return _gram(xc_NxD) / (n - 1), scale * c


def _gram_at(precision):
    def gram(x_NxD: Array) -> Array:
        return jnp.einsum("nd,ne->de", x_NxD, x_NxD, precision=precision,
                          preferred_element_type=x_NxD.dtype)
    return gram


def _gram(x_NxD: Array) -> Array:
    """XᵀX (D, D) for IsoScore. Full float32 on the CPU (and float64 in float64); TF32 on NVIDIA
    GPUs, where HIGHEST costs about three times as much and TF32 moves IsoScore by a few 1e-6 from
    a float64 reference (measured: docs/PERFORMANCE.md and its "Retired profilers"); three
    bfloat16 passes on TPUs. The errors of the D² sums average out in (tr C)²/‖C‖_F²."""
    if x_NxD.dtype != jnp.float32:
        return _gram_at(jax.lax.Precision.HIGHEST)(x_NxD)
    presets = jax.lax.DotAlgorithmPreset
    return jax.lax.platform_dependent(x_NxD, cuda=_gram_at(presets.TF32_TF32_F32),
                                      tpu=_gram_at(presets.BF16_BF16_F32_X3),
                                      default=_gram_at(jax.lax.Precision.HIGHEST))


def _participation_score(cov_DxD: Array) -> Array:
    """(PR − 1)/(D − 1) with PR = (Σλ)²/Σλ² = (tr C)² / ‖C‖_F² (no eigendecomposition needed).

    0 for an all-zero covariance (a cloud of identical points occupies no dimension).
    """
    d = cov_DxD.shape[-1]
    # Scale first so that the squares cannot overflow for huge activations.
    scale = jnp.max(jnp.abs(cov_DxD))
    c = cov_DxD / jnp.where(scale > 0, scale, 1.0)
    trace = jnp.trace(c)
    frob_sq = jnp.sum(c * c)
    participation = trace * trace / jnp.where(frob_sq > 0, frob_sq, 1.0)
    if d == 1:
        return jnp.where(frob_sq > 0, 1.0, 0.0).astype(c.dtype)
    return jnp.where(frob_sq > 0, (participation - 1.0) / (d - 1), 0.0)


def isoscore(x: Array) -> Array:
    """IsoScore (Rudman et al. 2022) of the point cloud x (..., D), in [0, 1].

    IsoScore = (PR − 1)/(D − 1), PR = (Σλ)²/Σλ² over the eigenvalues λ of the sample covariance.
    This equals the paper's algorithm (PCA-reorient, normalise the variance vector to length √D,
    isotropy defect δ, k = (D − δ²(D − √D))²/D², score (D·k − 1)/(D − 1)): substituting gives
    D·k = PR exactly. Invariant to a common shift (it cannot see a bias), to scaling and to
    rotation. k equal non-zero eigenvalues score exactly (k − 1)/(D − 1). Needs N ≥ 2.
    """
    x_NxD = as_points(x)
    require_pairs(x_NxD.shape[0], "isoscore")
    cov_DxD, _ = _centred_covariance(x_NxD)
    return _participation_score(cov_DxD)


def isoscore_star(x: Array, shrinkage: float = 0.1) -> Array:
    """IsoScore* with covariance shrinkage: the score of C_ζ = (1 − ζ) C + ζ I, ζ = `shrinkage`.

    For few samples (N ≲ D) the sample covariance is rank-deficient and IsoScore under-reports
    isotropy; shrinkage towards the identity stabilises it. ζ = 0 gives `isoscore`. Note that
    ζ I is in absolute units, so the result depends on the scale of x (docs/SCIENCE.md definition).
    """
    if not 0.0 <= shrinkage <= 1.0:
        raise ValueError(f"shrinkage must be in [0, 1], got {shrinkage}")
    x_NxD = as_points(x)
    require_pairs(x_NxD.shape[0], "isoscore_star")
    cov_DxD, scale = _centred_covariance(x_NxD)  # true covariance = scale² · cov_DxD
    eye = jnp.eye(cov_DxD.shape[0], dtype=cov_DxD.dtype)
    shrunk = (1.0 - shrinkage) * cov_DxD + (shrinkage / scale / scale) * eye  # all ÷ scale²
    return _participation_score(shrunk)


def partition_isotropy(w: Array) -> Array:
    """Partition-function isotropy (Mu & Viswanath 2018) of a matrix w (N, D), rows = vectors.

    I(W) = min_c Z(c) / max_c Z(c), Z(c) = Σ_i exp(w_i·c), with c over the eigenvectors of WᵀW.
    Eigenvectors are defined up to sign, so both c and −c are used (2D directions): the result
    is then a property of W alone. Computed in log space (logsumexp), so it never overflows;
    in (0, 1], 1 = isotropic. Centre w first for the "centred" variant.
    """
    log_z = jnp.concatenate(log_partition_functions(w))
    return jnp.exp(jnp.min(log_z) - jnp.max(log_z))


def log_partition_functions(w: Array) -> tuple[Array, Array]:
    """(log Z(c), log Z(−c)), each (D,), Z(c) = Σ_i exp(w_i·c), for c over the eigenvectors of
    WᵀW as `eigh` returns them (w (N, D), rows = vectors). The one implementation behind
    `partition_isotropy` and the one-sign convention of `metrics.embedding_isotropy`."""
    w_NxD = as_points(w)
    gram_DxD = jnp.einsum("nd,ne->de", w_NxD, w_NxD, precision=jax.lax.Precision.HIGHEST)
    _, vecs_DxD = jnp.linalg.eigh(gram_DxD)
    proj_NxD = jnp.einsum("nd,de->ne", w_NxD, vecs_DxD, precision=jax.lax.Precision.HIGHEST)
    return jax.nn.logsumexp(proj_NxD, axis=0), jax.nn.logsumexp(-proj_NxD, axis=0)


def _singular_values_squared(x_NxD: Array, center: bool) -> Array:
    if center:
        x_NxD = x_NxD - jnp.mean(x_NxD, axis=0, keepdims=True)
    scale = jnp.max(jnp.abs(x_NxD))
    x_NxD = x_NxD / jnp.where(scale > 0, scale, 1.0)  # the spectrum's shape is scale-free
    gram_DxD = jnp.einsum("nd,ne->de", x_NxD, x_NxD, precision=jax.lax.Precision.HIGHEST)
    return jnp.clip(jnp.linalg.eigvalsh(gram_DxD), 0.0, None)


def effective_rank(x: Array, center: bool = False, eps: float = 0.0) -> Array:
    """Effective rank (Roy & Vetterli 2007) of the matrix x (N, D): exp(H(p)), p = σ / Σσ.

    σ are the min(N, D) singular values of x (of x minus its mean when `center`); H uses
    0·log 0 = 0; `eps` is added to every p_k (`rankme`). In [1, min(N, D)] for eps = 0; 0 for an
    all-zero matrix.
    """
    x_NxD = as_points(x)
    k = min(x_NxD.shape)
    sigma = jnp.sqrt(_singular_values_squared(x_NxD, center)[-k:])  # the k largest
    total = jnp.sum(sigma)
    p = sigma / jnp.where(total > 0, total, 1.0) + eps
    entropy = -jnp.sum(jax.scipy.special.xlogy(p, p))
    return jnp.where(total > 0, jnp.exp(entropy), 0.0)


# RankMe's ε (Garrido et al. 2023, eq. 2: p_k = σ_k / ‖σ‖₁ + ε, the value they give for float32).
RANKME_EPS = 1e-7


def rankme(x: Array) -> Array:
    """RankMe (Garrido et al. 2023) of the representation matrix x (N, D): exp(−Σ_k p_k log p_k),
    p_k = σ_k / ‖σ‖₁ + ε over the min(N, D) singular values of x as it is (not centred),
    ε = RANKME_EPS. It is `effective_rank` with that ε: the two differ by O(min(N, D)·ε·log(1/ε))
    in the entropy (a relative 1e-3 at D = 384)."""
    return effective_rank(x, eps=RANKME_EPS)


# α-ReQ's fit range: ranks 11–100 of the eigenvalues (1-based), the default of Agrawal et al.'s
# own code (reptrix's fit_range, arange(10, 100) zero-based), cut to the K = min(N − 1, D)
# eigenvalues a centred sample of N points has; from rank 1 when fewer than ALPHA_REQ_MIN_RANKS
# ranks would be left. Eigenvalues at or below ALPHA_REQ_FLOOR·λ₁ (float32's eigvalsh noise of a
# rank-deficient cloud) are left out of the fit.
ALPHA_REQ_RANKS = (11, 100)
ALPHA_REQ_MIN_RANKS = 20
ALPHA_REQ_FLOOR = 1e-6


def alpha_req_ranks(n: int, d: int) -> tuple[int, int]:
    """(first, last), 1-based and inclusive: the ranks α-ReQ fits for N points of dimension D."""
    last = min(ALPHA_REQ_RANKS[1], n - 1, d)
    first = ALPHA_REQ_RANKS[0] if last - ALPHA_REQ_RANKS[0] + 1 >= ALPHA_REQ_MIN_RANKS else 1
    return first, last


def alpha_req(x: Array) -> Array:
    """α-ReQ (Agrawal et al. 2022) of the points x (N, D): the decay α of the eigenvalues λ_i of
    their sample covariance, λ_i ∝ i^(−α), i.e. minus the ordinary least-squares slope of log λ_i
    on log i over the ranks `alpha_req_ranks(N, D)` (their λ_i > ALPHA_REQ_FLOOR·λ₁). Scale-free;
    NaN with fewer than 2 such eigenvalues."""
    x_NxD = as_points(x)
    first, last = alpha_req_ranks(*x_NxD.shape)
    spectrum = _singular_values_squared(x_NxD, center=True)[::-1]  # descending
    lam = spectrum[first - 1:last]
    w = (lam > ALPHA_REQ_FLOOR * spectrum[0]).astype(lam.dtype)
    t = jnp.log(jnp.arange(first, last + 1, dtype=lam.dtype))
    y = jnp.log(jnp.where(w > 0, lam, 1.0))
    count = jnp.sum(w)
    t_mean, y_mean = (jnp.sum(w * v) / jnp.maximum(count, 1.0) for v in (t, y))
    sxx = jnp.sum(w * (t - t_mean) ** 2)
    slope = jnp.sum(w * (t - t_mean) * (y - y_mean)) / jnp.where(sxx > 0, sxx, 1.0)
    return jnp.where((count >= 2) & (sxx > 0), -slope, jnp.nan)


def top_pc_variance_ratio(x: Array, center: bool = True) -> Array:
    """Share of the variance on the first principal component: σ₁² / Σσ² (centred by default).

    1 when every vector lies on one line through the mean, 1/D for isotropic data. 0 when x has
    no variance. With center=False it is the share of the top singular direction of raw x.
    """
    sigma_sq = _singular_values_squared(as_points(x), center)
    total = jnp.sum(sigma_sq)
    return jnp.where(total > 0, jnp.max(sigma_sq) / jnp.where(total > 0, total, 1.0), 0.0)
