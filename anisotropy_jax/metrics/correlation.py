"""Host-side statistics across layers (scipy)."""
from __future__ import annotations

from typing import Any

import numpy as np


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
