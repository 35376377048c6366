"""RankMe and α-ReQ of a hidden state on the host, in numpy float64.

The studies that follow these along training (the normalisation grid's per-checkpoint analysis,
the embeddings study) return the state itself (float32, cheap) from their compiled programs and
take its spectrum here: an eigendecomposition inside the compiled per-checkpoint analysis stalled
XLA's CPU backend. `spectrum_metrics(x)` of the points x (..., D), flattened to (N, D) and
divided by max |x| (both metrics are scale-free), forms the raw second moment XᵀX and the centred
scatter (X − x̄)ᵀ(X − x̄) in float64 and takes their eigenvalues (`np.linalg.eigvalsh`):

  rankme     `metrics.rankme`: exp(−Σ_k p_k log p_k), p_k = σ_k / ‖σ‖₁ + RANKME_EPS over the
             min(N, D) largest singular values σ_k of x as it is (σ_k² the eigenvalues of XᵀX);
             0 for an all-zero x
  alpha_req  `metrics.alpha_req`: minus the least-squares slope of log λ_i on log i, λ the
             eigenvalues of the centred scatter in descending order, over the ranks
             `alpha_req_ranks(N, D)` whose λ_i > ALPHA_REQ_FLOOR · λ₁; NaN with fewer than 2
Both are NaN for a state that is not finite.

In float64 the second moments resolve singular values down to ~1e-8 σ₁, where the float32 ones
of `metrics.rankme` stop near 3e-4 σ₁ (a zero singular value reads as noise of that size there).
"""
from __future__ import annotations

from typing import Any

import jax
import numpy as np

from anisotropy_jax.metrics.geometry import ALPHA_REQ_FLOOR, RANKME_EPS, alpha_req_ranks

SPECTRUM_METRICS = ("rankme", "alpha_req")


def _eigenvalues(matrix_DxD: Any) -> np.ndarray:
    """The eigenvalues of a symmetric matrix in float64, ascending, clipped at 0."""
    m = np.asarray(matrix_DxD, np.float64)
    return np.clip(np.linalg.eigvalsh((m + m.T) / 2), 0.0, None)


def rankme_from_gram(raw_DxD: Any, n: int) -> float:
    """RankMe of N points from their raw second moment XᵀX (module docstring)."""
    lam = _eigenvalues(raw_DxD)
    sigma = np.sqrt(lam[len(lam) - min(int(n), len(lam)):])  # the min(N, D) largest
    total = sigma.sum()
    if not total > 0:
        return 0.0
    p = sigma / total + RANKME_EPS
    return float(np.exp(-np.sum(p * np.log(p))))


def alpha_req_from_scatter(centered_DxD: Any, n: int) -> float:
    """α-ReQ of N points from their centred scatter (X − x̄)ᵀ(X − x̄) (module docstring)."""
    lam = _eigenvalues(centered_DxD)[::-1]  # descending
    first, last = alpha_req_ranks(int(n), len(lam))
    ranks = np.arange(first, last + 1)
    values = lam[first - 1:last]
    keep = values > ALPHA_REQ_FLOOR * lam[0]
    if keep.sum() < 2:
        return float("nan")
    t, y = np.log(ranks[keep]), np.log(values[keep])
    t_c = t - t.mean()
    sxx = np.sum(t_c ** 2)
    if not sxx > 0:
        return float("nan")
    return float(-np.sum(t_c * (y - y.mean())) / sxx)


def second_moments(x: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """(XᵀX, (X − x̄)ᵀ(X − x̄), N) in float64 of the points x (..., D) flattened to (N, D) and
    divided by max |x| (not for an all-zero x)."""
    x = np.asarray(x, np.float64)
    x_NxD = x.reshape(-1, x.shape[-1])
    scale = np.max(np.abs(x_NxD)) if x_NxD.size else 0.0
    x_NxD = x_NxD / (scale if scale > 0 else 1.0)
    centred_NxD = x_NxD - x_NxD.mean(axis=0, keepdims=True)
    return x_NxD.T @ x_NxD, centred_NxD.T @ centred_NxD, x_NxD.shape[0]


def spectrum_metrics(x: Any) -> dict[str, float]:
    """{"rankme", "alpha_req"} of the points x (..., D), a numpy or JAX array (module
    docstring); both NaN where x is not finite (a diverged run)."""
    x = np.asarray(jax.device_get(x))
    if not np.all(np.isfinite(x)):
        return {"rankme": float("nan"), "alpha_req": float("nan")}
    raw_DxD, centred_DxD, n = second_moments(x)
    return {"rankme": rankme_from_gram(raw_DxD, n),
            "alpha_req": alpha_req_from_scatter(centred_DxD, n)}
