"""Host-side statistics (scipy): rank correlations and intervals over independent units.

Which units are independent is the caller's to say, and every study's output says it: seeds of a
training configuration are independent replicates; heads of one checkpoint are units of one model
(their p-values test an association across the heads of that model, not across models); layers
of one model are not independent (each feeds the next), so a p-value across layers is descriptive.
"""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

EXACT_P_METHOD = "exact permutation: |rho| = 1 is reached by 2 of the n! orderings (no ties)"
SCIPY_P_METHOD = "scipy t approximation"


def _pair(x: Any, y: Any, what: str) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    b = np.asarray(y, dtype=np.float64).reshape(-1)
    if a.shape != b.shape:
        raise ValueError(f"{what} differ in length: {a.shape} vs {b.shape}")
    if a.size < 3:
        raise ValueError(f"a correlation needs at least 3 {what.split()[-1]}, got {a.size}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError(f"{what} must be finite")
    return a, b


def spearman(x: Any, y: Any) -> dict[str, Any]:
    """Spearman ρ with its two-sided p: {"rho", "p", "p_method", "n"}.

    When |ρ| = 1 and neither series has ties, p is exact: under independence each of the n!
    orderings of y against x is equally likely and exactly two give |ρ| = 1, so p = 2/n!
    (scipy's t approximation gives 0 there). Otherwise scipy's t approximation. A constant series
    has no defined ρ: NaN (scipy's convention, kept).
    """
    from scipy import stats  # host-side only

    a, b = _pair(x, y, "x and y values")
    result = stats.spearmanr(a, b)
    rho, p, method = float(result.statistic), float(result.pvalue), SCIPY_P_METHOD
    no_ties = np.unique(a).size == a.size and np.unique(b).size == b.size
    if no_ties and abs(abs(rho) - 1.0) < 1e-12:
        p, method = 2.0 / math.factorial(a.size), EXACT_P_METHOD
    return {"rho": rho, "p": p, "p_method": method, "n": int(a.size)}


def drift_anisotropy_correlation(drift: Any, anisotropy: Any) -> dict[str, float]:
    """Spearman and Pearson correlation of drift with anisotropy across layers (host, scipy).

    Returns {"spearman", "spearman_p", "pearson", "pearson_p", "n"}; `spearman_p` is the exact
    2/n! when |ρ| = 1 without ties (`spearman`). The layers of one model are not independent
    units: the p-values describe, they do not test across models. Needs ≥ 3 finite pairs; a
    constant input has no defined correlation, which scipy reports as NaN (kept, not hidden).
    """
    from scipy import stats  # host-side only

    a, b = _pair(drift, anisotropy, "drift and anisotropy layers")
    rank = spearman(a, b)
    pearson = stats.pearsonr(a, b)
    return {
        "spearman": rank["rho"],
        "spearman_p": rank["p"],
        "pearson": float(pearson.statistic),
        "pearson_p": float(pearson.pvalue),
        "n": int(a.size),
    }


def t_cdf(t: float, df: int) -> float:
    """P(T ≤ t) for Student's t with an integer `df` ≥ 1, by the finite series in
    θ = arctan(t/√df) (Abramowitz & Stegun 26.7.3-4: A(t|ν) = P(|T| ≤ |t|))."""
    if df < 1 or int(df) != df:
        raise ValueError(f"df: the closed form needs an integer >= 1, got {df}")
    theta = math.atan(abs(t) / math.sqrt(df))
    c2, term = math.cos(theta) ** 2, 1.0
    if df % 2:  # odd: (2/π)(θ + sin θ cos θ Σ_k (2·4···2k)/(1·3···(2k+1)) cos^2k θ), k < (ν−1)/2
        total = 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        a = 2.0 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
    else:  # even: sin θ Σ_k (1·3···(2k−1))/(2·4···2k) cos^2k θ, k < ν/2
        total = 1.0
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        a = math.sin(theta) * total
    return 0.5 + math.copysign(0.5 * a, t)


def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with an integer `df` ≥ 1: `t_cdf` inverted by bisection in
    θ (equal to scipy.stats.t.ppf within 1e-12 relative for p in [0.001, 0.999], 1e-9 out to 1e-6
    and 1 − 1e-6, tested). Pure Python: importing scipy costs the main job about half a second."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p: must lie in (0, 1), got {p}")
    low, high = -math.pi / 2, math.pi / 2
    for _ in range(200):
        mid = 0.5 * (low + high)
        if mid in (low, high):
            break
        low, high = (mid, high) if t_cdf(math.sqrt(df) * math.tan(mid), df) < p else (low, mid)
    return math.sqrt(df) * math.tan(0.5 * (low + high))


def t_interval(values: Any, axis: int = 0, confidence: float = 0.95) -> dict[str, np.ndarray]:
    """Mean and Student-t interval over `axis` (independent replicates, e.g. seeds).

    {"mean", "low", "high", "n"}: mean ± t_{(1+confidence)/2, n−1} · s/√n with s the sample
    standard deviation (ddof = 1). Needs n ≥ 2; NaN values propagate.
    """
    x = np.asarray(values, dtype=np.float64)
    n = x.shape[axis]
    if n < 2:
        raise ValueError(f"an interval over replicates needs at least 2 of them, got {n}")
    mean = np.mean(x, axis=axis)
    half = t_quantile(0.5 + confidence / 2, n - 1) * np.std(x, axis=axis, ddof=1) / math.sqrt(n)
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": int(n)}


def one_sample_t_test(values: Any) -> dict[str, float]:
    """Two-sided one-sample t-test of mean 0 over independent replicates (e.g. the per-seed
    change of a quantity): {"t", "p", "n"}. Needs n ≥ 2."""
    from scipy import stats  # host-side only

    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size < 2:
        raise ValueError(f"a t-test over replicates needs at least 2 of them, got {x.size}")
    test = stats.ttest_1samp(x, 0.0)
    return {"t": float(test.statistic), "p": float(test.pvalue), "n": int(x.size)}


# |ρ| is clipped below 1 before arctanh, so that one seed with ρ = ±1 gives a large finite z
# (arctanh(1 − 1e-9) ≈ 10.7) rather than an infinite mean.
_MAX_ABS_RHO = 1.0 - 1e-9
FISHER_INTERVAL = ("Fisher z: z = artanh(rho), interval in z, then tanh back (bounded by ±1)")


def fisher_z(rho: Any) -> np.ndarray:
    """artanh ρ with |ρ| clipped to 1 − 1e-9 (finite at ρ = ±1); NaN stays NaN."""
    return np.arctanh(np.clip(np.asarray(rho, np.float64), -_MAX_ABS_RHO, _MAX_ABS_RHO))


def fisher_z_interval(rho: Any, n: int, num_covariates: int = 0,
                      confidence: float = 0.95) -> dict[str, Any]:
    """Interval for one (partial) correlation of n pairs: tanh(artanh ρ ± z_{(1+c)/2}/√(n − 3 − k))
    with k = num_covariates (the partialled-out variables). {"rho", "low", "high", "n"}; needs
    n − 3 − k ≥ 1. Normal theory (Pearson ρ of bivariate normal pairs); for Spearman ρ it is the
    usual approximation."""
    from scipy import stats  # host-side only

    df = n - 3 - num_covariates
    if df < 1:
        raise ValueError(f"a Fisher-z interval needs n - 3 - covariates >= 1, got n = {n} and "
                         f"{num_covariates} covariates")
    r = np.asarray(rho, np.float64)
    z = fisher_z(r)
    half = stats.norm.ppf(0.5 + confidence / 2) / math.sqrt(df)
    return {"rho": r, "low": np.tanh(z - half), "high": np.tanh(z + half), "n": int(n)}


def mean_correlation_interval(rhos: Any, axis: int = 0,
                              confidence: float = 0.95) -> dict[str, np.ndarray]:
    """Mean of per-replicate correlations (e.g. one ρ per seed) with its interval, in Fisher z:
    z = artanh ρ (|ρ| clipped to 1 − 1e-9), Student-t interval of the mean z over `axis`
    (`t_interval`), then tanh back. {"mean" = tanh(mean z), "low", "high", "mean_z", "n"}; the
    bounds stay inside (−1, 1). NaN values propagate."""
    ci = t_interval(fisher_z(rhos), axis=axis, confidence=confidence)
    return {"mean": np.tanh(ci["mean"]), "low": np.tanh(ci["low"]), "high": np.tanh(ci["high"]),
            "mean_z": ci["mean"], "n": ci["n"]}


@functools.lru_cache(maxsize=4)
def _permutations(n: int) -> np.ndarray:
    """All n! orderings of range(n), (n!, n) int8 (read-only: cached), by inserting each new
    element at every position of the orderings of the previous ones."""
    perms = np.zeros((1, 0), np.int8)
    for value in range(n):
        rows = [np.insert(perms, position, value, axis=1) for position in range(value + 1)]
        perms = np.concatenate(rows, axis=0)
    perms.flags.writeable = False
    return perms


def exact_permutation_p(x: Any, y: Any, method: str = "spearman") -> dict[str, Any]:
    """Two-sided exact permutation p of a correlation for n ≤ 10 pairs: the share of all n!
    orderings of y against x whose |ρ| is at least the observed |ρ| (within 1e-12, so that
    orderings of the same statistic count, ties included). {"rho", "p", "n", "p_method"}.

    method "spearman" (ρ of the average ranks: ties keep scipy's convention) or "pearson". Under
    independence every ordering is equally likely, so p is exact; its smallest value is 2/n!
    (ρ = ±1 without ties). A constant series has no ρ: ValueError.
    """
    from scipy import stats  # host-side only

    if method not in ("spearman", "pearson"):
        raise ValueError(f"method must be 'spearman' or 'pearson', got {method!r}")
    a, b = _pair(x, y, "x and y values")
    if a.size > 10:
        raise ValueError(f"exact permutation p enumerates n! orderings: n <= 10, got {a.size}")
    if method == "spearman":
        a, b = stats.rankdata(a), stats.rankdata(b)
    a, b = a - a.mean(), b - b.mean()
    norm = math.sqrt(float(a @ a) * float(b @ b))
    if norm == 0:
        raise ValueError("a constant series has no correlation")
    rho = float(a @ b) / norm
    extreme = 0
    perms = _permutations(a.size)
    for start in range(0, perms.shape[0], 200_000):  # ≤ 16 MB of float64 per chunk
        rhos = b[perms[start:start + 200_000]] @ a / norm
        extreme += int(np.sum(np.abs(rhos) >= abs(rho) - 1e-12))
    return {"rho": rho, "p": extreme / perms.shape[0], "n": int(a.size),
            "p_method": f"exact permutation ({method}): all {a.size}! orderings"}


def partial_correlation(x: Any, y: Any, covariates_NxK: Any) -> dict[str, Any]:
    """Pearson correlation of x and y after both are regressed (least squares, with an
    intercept) on the K columns of `covariates_NxK`: {"rho", "p", "df", "n", "num_covariates",
    "explained"}.

    k = the rank of the covariates once the intercept is taken out; df = n − 2 − k, and p is the
    two-sided t test of ρ√(df/(1 − ρ²)) on df degrees of freedom (normal theory). For a partial
    Spearman correlation pass ranks. Needs df ≥ 1. NaN when x or y is an exact linear function
    of the covariates (nothing is left to correlate): "explained" names them ("x", "y"; () when
    neither is).
    """
    from scipy import stats  # host-side only

    a, b = _pair(x, y, "x and y values")
    z = np.asarray(covariates_NxK, np.float64).reshape(a.size, -1)
    design = np.concatenate([np.ones((a.size, 1)), z], axis=1)
    k = int(np.linalg.matrix_rank(design)) - 1
    df = a.size - 2 - k
    if df < 1:
        raise ValueError(f"a partial correlation needs n - 2 - covariates >= 1, got n = {a.size}"
                         f" and {k} covariates")

    def residual(v):
        return v - design @ np.linalg.lstsq(design, v, rcond=None)[0]

    ra, rb = residual(a), residual(b)
    # A series the covariates explain exactly has no partial correlation: its residual is
    # rounding noise (below 1e-9 of its own spread), whose correlation would mean nothing.
    explained = tuple(name for name, r, v in (("x", ra, a), ("y", rb, b))
                      if float(r @ r) <= 1e-18 * float((v - v.mean()) @ (v - v.mean())))
    denominator = math.sqrt(float(ra @ ra) * float(rb @ rb))
    rho = float(ra @ rb) / denominator if denominator > 0 and not explained else math.nan
    t = rho * math.sqrt(df / max(1.0 - rho * rho, 1e-300))
    p = float(2 * stats.t.sf(abs(t), df)) if math.isfinite(rho) else math.nan
    return {"rho": rho, "p": p, "df": df, "n": int(a.size), "num_covariates": k,
            "explained": explained}
