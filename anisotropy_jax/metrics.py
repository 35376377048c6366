"""Anisotropy and attention-sharpness metrics (SCIENCE.md "Metrics"). Pure, jit/vmap-safe.

Conventions:
  * Point clouds are (N, D), or (..., D) flattened to (N, D) over the leading axes.
  * Sequence-aware cosines take (B, L, D) and an optional (B, L) mask of valid tokens.
  * Attention metrics take (..., Lq, Lk) logits or weights and an optional boolean mask of visible
    keys broadcastable to them; they return one value per query, (..., Lq).
  * Queries/keys for the geometry are (B, L, H, Dh).
Everything is computed in the input dtype (float32 by default; the tests run float64 through the
same code). Shape errors (too few vectors for a pair) are raised at trace time, so they surface
before any compilation of a larger program.
Only `drift_anisotropy_correlation` is host-side (scipy).
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


# --------------------------------------------------------------------------------------------
# Helpers

def _as_points(x: Array) -> Array:
    """(..., D) → (N, D)."""
    x = jnp.asarray(x)
    if x.ndim < 1:
        raise ValueError("expected (..., D) vectors, got a scalar")
    return x.reshape(-1, x.shape[-1])


def _scale_and_sum_of_squares_two_pass(x: Array) -> tuple[Array, Array]:
    """(m, q) with m = max|x_i| (one pass), then q = Σ (x_i/m)² (a second pass)."""
    m = jnp.max(jnp.abs(x), axis=-1)
    y = x / jnp.where(m > 0, m, 1.0)[..., None]
    return m, jnp.sum(y * y, axis=-1)


def _scale_and_sum_of_squares_one_pass(x: Array) -> tuple[Array, Array]:
    """The same (m, q) in one pass: a variadic reduction carries the running maximum and rescales
    the running sum when it grows (the LAPACK nrm2 scheme)."""
    a = jnp.abs(x)
    zero = jnp.zeros((), a.dtype)

    def combine(left, right):
        (m1, q1), (m2, q2) = left, right
        m = jnp.maximum(m1, m2)
        safe = jnp.where(m > 0, m, jnp.ones((), a.dtype))
        r1, r2 = m1 / safe, m2 / safe
        return m, q1 * r1 * r1 + q2 * r2 * r2

    return jax.lax.reduce((a, (a > 0).astype(a.dtype)), (zero, zero), combine, (x.ndim - 1,))


def _scale_and_sum_of_squares(x: Array) -> tuple[Array, Array]:
    """(m, q) over the last axis with ‖x‖ = m·√q, m = max|x_i|, q = Σ (x_i/m)² ∈ [1, D] (0 for a
    zero vector): the squares never overflow or underflow (norms up to ~1e38).

    One pass on accelerators (the bf16 sweep's metric reduction measured 16 µs per point before
    and 14 after, in two H200 runs), two on the CPU, where XLA ran the variadic reduction 1.3–2×
    slower than the two plain ones (docs/PERFORMANCE.md). Both are tested against float64 on the
    CPU.
    """
    return jax.lax.platform_dependent(x, cpu=_scale_and_sum_of_squares_two_pass,
                                      default=_scale_and_sum_of_squares_one_pass)


def vector_norms(x: Array) -> Array:
    """‖x‖ over the last axis without overflow or underflow of the squares (norms up to ~1e38)."""
    m, q = _scale_and_sum_of_squares(x)
    return m * jnp.sqrt(q)


def unit_vectors(x: Array) -> Array:
    """x / ‖x‖ over the last axis; a zero vector stays zero (its cosine with anything is 0)."""
    m, q = _scale_and_sum_of_squares(x)
    inv_m = 1.0 / jnp.where(m > 0, m, 1.0)
    inv_root_q = 1.0 / jnp.sqrt(jnp.where(q > 0, q, 1.0))
    return x * inv_m[..., None] * inv_root_q[..., None]  # never forms ‖x‖: no overflow


def _require_pairs(n: int, what: str) -> None:
    if n < 2:
        raise ValueError(f"{what} needs at least 2 vectors to form a pair, got {n}")


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
    u_NxD = unit_vectors(_as_points(x))
    _require_pairs(u_NxD.shape[0], "average_cosine_similarity")
    if mask is None:
        n = float(u_NxD.shape[0])  # a Python float: N(N − 1) overflows int32 beyond N ≈ 46,000
    else:
        w_N = jnp.asarray(mask).reshape(-1).astype(u_NxD.dtype)
        u_NxD = u_NxD * w_N[:, None]
        n = jnp.sum(w_N)
    total_D = jnp.sum(u_NxD, axis=0)
    self_terms = jnp.sum(u_NxD * u_NxD)
    return (jnp.sum(total_D * total_D) - self_terms) / (n * (n - 1))


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
    x_NxD = _as_points(x)
    n = x_NxD.shape[0]
    _require_pairs(n, "sampled_pair_cosine_similarity")
    key_i, key_o = jax.random.split(key)
    i_K = jax.random.randint(key_i, (num_pairs,), 0, n)
    j_K = (i_K + jax.random.randint(key_o, (num_pairs,), 1, n)) % n
    u_NxD = unit_vectors(x_NxD)
    return jnp.mean(jnp.sum(u_NxD[i_K] * u_NxD[j_K], axis=-1))


# --------------------------------------------------------------------------------------------
# Drift

def drift_norm(x: Array) -> Array:
    """‖μ‖ with μ the mean of the *unnormalised* vectors x (..., D) (common drift, Biś et al.)."""
    x_NxD = _as_points(x)
    return vector_norms(jnp.mean(x_NxD, axis=0))


def relative_drift(x: Array) -> Array:
    """‖μ‖ / mean_i ‖x_i‖ ∈ [0, 1]: 1 when all vectors are equal, ~1/√N for isotropic noise.

    0 for a cloud of zero vectors (no drift), never NaN.
    """
    x_NxD = _as_points(x)
    mean_norm = jnp.mean(vector_norms(x_NxD))
    return drift_norm(x_NxD) / jnp.where(mean_norm > 0, mean_norm, 1.0)


# --------------------------------------------------------------------------------------------
# Spectrum-based isotropy

def _centred_covariance(x_NxD: Array) -> tuple[Array, Array]:
    """(C / s², s): sample covariance (1/(N − 1) normalisation) of x / s, and the scale s.

    The mean is removed first and the data divided by s = max |x − mean| so that the products
    cannot overflow for huge activations (IsoScore is scale-free; IsoScore* rescales its shrinkage).
    """
    xc_NxD = x_NxD - jnp.mean(x_NxD, axis=0, keepdims=True)
    scale = jnp.max(jnp.abs(xc_NxD))
    scale = jnp.where(scale > 0, scale, 1.0)
    xc_NxD = xc_NxD / scale
    n = x_NxD.shape[0]
    cov = jnp.einsum("nd,ne->de", xc_NxD, xc_NxD, precision=jax.lax.Precision.HIGHEST) / (n - 1)
    return cov, scale


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
    x_NxD = _as_points(x)
    _require_pairs(x_NxD.shape[0], "isoscore")
    cov_DxD, _ = _centred_covariance(x_NxD)
    return _participation_score(cov_DxD)


def isoscore_star(x: Array, shrinkage: float = 0.1) -> Array:
    """IsoScore* with covariance shrinkage: the score of C_ζ = (1 − ζ) C + ζ I, ζ = `shrinkage`.

    For few samples (N ≲ D) the sample covariance is rank-deficient and IsoScore under-reports
    isotropy; shrinkage towards the identity stabilises it. ζ = 0 gives `isoscore`. Note that
    ζ I is in absolute units, so the result depends on the scale of x (SCIENCE.md definition).
    """
    if not 0.0 <= shrinkage <= 1.0:
        raise ValueError(f"shrinkage must be in [0, 1], got {shrinkage}")
    x_NxD = _as_points(x)
    _require_pairs(x_NxD.shape[0], "isoscore_star")
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
    w_NxD = _as_points(w)
    gram_DxD = jnp.einsum("nd,ne->de", w_NxD, w_NxD, precision=jax.lax.Precision.HIGHEST)
    _, vecs_DxD = jnp.linalg.eigh(gram_DxD)
    proj_NxD = jnp.einsum("nd,de->ne", w_NxD, vecs_DxD, precision=jax.lax.Precision.HIGHEST)
    log_z = jnp.concatenate([jax.nn.logsumexp(proj_NxD, axis=0),
                             jax.nn.logsumexp(-proj_NxD, axis=0)])
    return jnp.exp(jnp.min(log_z) - jnp.max(log_z))


def _singular_values_squared(x_NxD: Array, center: bool) -> Array:
    if center:
        x_NxD = x_NxD - jnp.mean(x_NxD, axis=0, keepdims=True)
    scale = jnp.max(jnp.abs(x_NxD))
    x_NxD = x_NxD / jnp.where(scale > 0, scale, 1.0)  # the spectrum's shape is scale-free
    gram_DxD = jnp.einsum("nd,ne->de", x_NxD, x_NxD, precision=jax.lax.Precision.HIGHEST)
    return jnp.clip(jnp.linalg.eigvalsh(gram_DxD), 0.0, None)


def effective_rank(x: Array, center: bool = False) -> Array:
    """Effective rank (Roy & Vetterli 2007) of the matrix x (N, D): exp(H(p)), p = σ / Σσ.

    σ are the singular values of x (of x minus its mean when `center`); H uses 0·log 0 = 0.
    In [1, min(N, D)]; 0 for an all-zero matrix.
    """
    sigma = jnp.sqrt(_singular_values_squared(_as_points(x), center))
    total = jnp.sum(sigma)
    p = sigma / jnp.where(total > 0, total, 1.0)
    entropy = -jnp.sum(jax.scipy.special.xlogy(p, p))
    return jnp.where(total > 0, jnp.exp(entropy), 0.0)


def top_pc_variance_ratio(x: Array, center: bool = True) -> Array:
    """Share of the variance on the first principal component: σ₁² / Σσ² (centred by default).

    1 when every vector lies on one line through the mean, 1/D for isotropic data. 0 when x has
    no variance. With center=False it is the share of the top singular direction of raw x.
    """
    sigma_sq = _singular_values_squared(_as_points(x), center)
    total = jnp.sum(sigma_sq)
    return jnp.where(total > 0, jnp.max(sigma_sq) / jnp.where(total > 0, total, 1.0), 0.0)


# --------------------------------------------------------------------------------------------
# Attention sharpness

def _visible(mask: Array | None, shape) -> Array:
    if mask is None:
        return jnp.ones(shape, dtype=bool)
    return jnp.broadcast_to(jnp.asarray(mask).astype(bool), shape)


def attention_entropy(attn_logits: Array, mask: Array | None = None) -> Array:
    """Entropy −Σ_k p_k log p_k (nats) of each query's attention, from logits (..., Lq, Lk).

    Computed from log_softmax (never log(softmax)), with 0·log 0 = 0, so one-hot attention gives
    exactly 0 and no NaN. Masked keys (mask False, or logits of −inf / model.MASK_VALUE) get
    p = 0. Returns (..., Lq). Uniform over L keys gives ln L.
    """
    logits = jnp.asarray(attn_logits)
    visible = _visible(mask, logits.shape)
    logits = jnp.where(visible, logits, -jnp.inf)
    log_p = jax.nn.log_softmax(logits, axis=-1)
    p = jnp.exp(log_p)
    return -jnp.sum(jnp.where(p > 0, p * log_p, 0.0), axis=-1)


def normalized_attention_entropy(attn_logits: Array, mask: Array | None = None) -> Array:
    """attention_entropy / ln(number of visible keys) ∈ [0, 1], per query (..., Lq).

    1 = uniform over the visible keys, 0 = one-hot. A query with a single visible key (the first
    query of a causal head) has no choice to make: its value is defined as 0 and callers that
    average over queries should exclude it (see `visible_key_counts`).
    """
    logits = jnp.asarray(attn_logits)
    counts = visible_key_counts(logits.shape, mask)
    log_counts = jnp.log(jnp.maximum(counts, 1).astype(logits.dtype))
    entropy = attention_entropy(logits, mask)
    return jnp.where(counts > 1, entropy / jnp.where(counts > 1, log_counts, 1.0), 0.0)


def visible_key_counts(shape, mask: Array | None = None) -> Array:
    """Number of visible keys per query, (..., Lq), for attention tensors of `shape`."""
    return jnp.sum(_visible(mask, tuple(shape)), axis=-1)


def attention_max(attn_weights: Array) -> Array:
    """Largest attention probability max_k p_k of each query, (..., Lq); 1/L when uniform."""
    return jnp.max(jnp.asarray(attn_weights), axis=-1)


def attention_sink_mass(attn_weights: Array, position: int = 0) -> Array:
    """Probability mass each query puts on key `position` (default the first: the attention
    sink), (..., Lq)."""
    return jnp.asarray(attn_weights)[..., position]


# --------------------------------------------------------------------------------------------
# Query/key geometry

def query_key_geometry(queries_BxLxHxDh: Array, keys_BxLxHxDh: Array,
                       mask_BxL: Array | None = None) -> dict[str, Array]:
    """Per-head geometry of queries and keys (B, L, H, Dh); every entry has shape (H,).

      query_norm, key_norm: mean over tokens of ‖q_i‖, ‖k_j‖;
      mean_query_norm, mean_key_norm: ‖q̄‖, ‖k̄‖ (means over batch and positions);
      mean_query_key_cosine: cos(q̄, k̄) (0 when either mean is zero);
      mean_query_key_dot: q̄·k̄ / √Dh, the bias the means add to every logit.
    `mask_BxL` (B, L) restricts the means to valid tokens.
    """
    q = jnp.asarray(queries_BxLxHxDh)
    k = jnp.asarray(keys_BxLxHxDh)
    if q.ndim != 4 or k.shape != q.shape:
        raise ValueError(f"expected queries and keys of equal shape (B, L, H, Dh), got "
                         f"{q.shape} and {k.shape}")
    if mask_BxL is None:
        w_BxL = jnp.ones(q.shape[:2], q.dtype)
    else:
        w_BxL = jnp.asarray(mask_BxL).astype(q.dtype)
    count = jnp.sum(w_BxL)

    def mean_over_tokens(v_BxLxH):
        return jnp.einsum("blh,bl->h", v_BxLxH, w_BxL) / count

    mean_q_HxDh = jnp.einsum("blhd,bl->hd", q, w_BxL) / count
    mean_k_HxDh = jnp.einsum("blhd,bl->hd", k, w_BxL) / count
    mq = vector_norms(mean_q_HxDh)
    mk = vector_norms(mean_k_HxDh)
    cos = jnp.sum(unit_vectors(mean_q_HxDh) * unit_vectors(mean_k_HxDh), axis=-1)
    return {
        "query_norm": mean_over_tokens(vector_norms(q)),
        "key_norm": mean_over_tokens(vector_norms(k)),
        "mean_query_norm": mq,
        "mean_key_norm": mk,
        "mean_query_key_cosine": cos,
        "mean_query_key_dot": jnp.sum(mean_q_HxDh * mean_k_HxDh, axis=-1) / q.shape[-1] ** 0.5,
    }


# --------------------------------------------------------------------------------------------
# Host-side statistics

def drift_anisotropy_correlation(drift: Any, anisotropy: Any) -> dict[str, float]:
    """Spearman and Pearson correlation of drift with anisotropy across layers (host, scipy).

    Returns {"spearman", "spearman_p", "pearson", "pearson_p", "n"}. Needs ≥ 3 finite pairs;
    a constant input has no defined correlation, which scipy reports as NaN (kept, not hidden).
    """
    from scipy import stats  # host-side only

    a = np.asarray(drift, dtype=np.float64).reshape(-1)
    b = np.asarray(anisotropy, dtype=np.float64).reshape(-1)
    if a.shape != b.shape:
        raise ValueError(f"drift and anisotropy differ in length: {a.shape} vs {b.shape}")
    if a.size < 3:
        raise ValueError(f"a correlation needs at least 3 layers, got {a.size}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("drift and anisotropy must be finite")
    spearman = stats.spearmanr(a, b)
    pearson = stats.pearsonr(a, b)
    return {
        "spearman": float(spearman.statistic),
        "spearman_p": float(spearman.pvalue),
        "pearson": float(pearson.statistic),
        "pearson_p": float(pearson.pvalue),
        "n": int(a.size),
    }
