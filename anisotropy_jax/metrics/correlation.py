"""Host-side statistics (scipy): rank correlations and intervals over independent units.

Which units are independent is the caller's to say, and every study's output says it: seeds of a
training configuration are independent replicates; heads of one checkpoint are units of one model
(their p-values test an association across the heads of that model, not across models); layers
of one model are not independent (each feeds the next), so a p-value across layers is descriptive.
"""
from __future__ import annotations

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


def t_interval(values: Any, axis: int = 0, confidence: float = 0.95) -> dict[str, np.ndarray]:
    """Mean and Student-t interval over `axis` (independent replicates, e.g. seeds).

    {"mean", "low", "high", "n"}: mean ± t_{(1+confidence)/2, n−1} · s/√n with s the sample
    standard deviation (ddof = 1). Needs n ≥ 2; NaN values propagate.
    """
    from scipy import stats  # host-side only

    x = np.asarray(values, dtype=np.float64)
    n = x.shape[axis]
    if n < 2:
        raise ValueError(f"an interval over replicates needs at least 2 of them, got {n}")
    mean = np.mean(x, axis=axis)
    half = stats.t.ppf(0.5 + confidence / 2, n - 1) * np.std(x, axis=axis, ddof=1) / math.sqrt(n)
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
