"""Metrics at scale, for benchmarks/benchmark.py: the O(N·D) average cosine and the
covariance-trace IsoScore of anisotropy_jax.metrics against the obvious implementations.

  average cosine of N × D vectors: ours = one pass (‖Σu‖² − N)/(N(N − 1));
    obvious = the N × N similarity matrix in row blocks (jitted block, Python loop over blocks),
    2·N²·D FLOPs. Where that would take too long (`max_blocked_n`), it runs on the first
    `max_blocked_n` vectors and its time is extrapolated by (N / n)², reported as such.
  IsoScore of N × D vectors: ours = trace and Frobenius norm of the D × D covariance;
    obvious = PCA by SVD of the centred data (as sklearn's PCA and the IsoScore package do),
    then the paper's algorithm on the variance vector (numpy on CPU, torch.linalg.svd on GPU
    when torch is installed).
"""
from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax import metrics
from benchmarks.profiling import harness


def _timed(fn, *args, repeats: int = 3) -> tuple[Any, float, float]:
    """(result, first-call seconds, median seconds of `repeats` further calls)."""
    timing = harness.time_calls(fn, *args, repeats=repeats)
    return timing.result, timing.first_s, timing.median_s


def blocked_average_cosine(u_NxD: jax.Array, block: int = 8192) -> float:
    """Σ_{i≠j} cos / (N(N − 1)) from N × N similarity blocks (unit vectors in, float32)."""
    n = u_NxD.shape[0]

    @jax.jit
    def block_sum(rows_bxD, all_NxD):
        return jnp.sum(rows_bxD @ all_NxD.T)

    total = 0.0
    for start in range(0, n, block):
        total += float(block_sum(u_NxD[start:start + block], u_NxD))
    return (total - n) / (n * (n - 1))


def svd_isoscore_numpy(x_NxD: np.ndarray) -> float:
    """IsoScore by PCA (SVD of the centred data) and the paper's algorithm, numpy float32."""
    xc = x_NxD - x_NxD.mean(0)
    s = np.linalg.svd(xc, full_matrices=False, compute_uv=False)
    return _isoscore_from_variances(s.astype(np.float64) ** 2 / (len(x_NxD) - 1))


def svd_isoscore_torch(x_NxD: np.ndarray, device: str) -> float:
    import torch  # noqa: PLC0415

    x = torch.as_tensor(x_NxD, device=device)
    xc = x - x.mean(0)
    s = torch.linalg.svdvals(xc)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return _isoscore_from_variances(s.double().cpu().numpy() ** 2 / (len(x_NxD) - 1))


def _isoscore_from_variances(var: np.ndarray) -> float:
    d = len(var)
    var_hat = np.sqrt(d) * var / np.linalg.norm(var)
    defect = np.linalg.norm(var_hat - 1.0) / np.sqrt(2 * (d - np.sqrt(d)))
    k = (d - defect ** 2 * (d - np.sqrt(d))) ** 2 / d ** 2
    return float((d * k - 1) / (d - 1))


def run_metric_benchmarks(cosine_n: int, isoscore_n: int, d: int, max_blocked_n: int,
                          seed: int = 0, log=print) -> dict[str, Any]:
    """Times both metrics, ours and obvious, and checks that they agree."""
    key_a, key_b = jax.random.split(jax.random.key(seed))
    # Anisotropic test data: a common drift plus noise with a decaying spectrum.
    scales = jnp.linspace(2.0, 0.2, d)
    x = jax.random.normal(key_a, (cosine_n, d)) * scales[None, :] + 0.5
    out: dict[str, Any] = {"device": str(jax.devices()[0]), "d": d}

    ours_fn = jax.jit(metrics.average_cosine_similarity)
    ours_value, ours_first, ours_time = _timed(ours_fn, x)
    n_blocked = min(cosine_n, max_blocked_n)
    u = jax.block_until_ready(metrics.unit_vectors(x[:n_blocked]))
    t0 = time.perf_counter()
    blocked_value = blocked_average_cosine(u)
    blocked_time = time.perf_counter() - t0
    sub_value = float(ours_fn(x[:n_blocked]))
    extrapolated = blocked_time * (cosine_n / n_blocked) ** 2
    out["average_cosine"] = {
        "n": cosine_n, "ours_s": ours_time, "ours_first_call_s": ours_first,
        "ours_value": float(ours_value), "blocked_n": n_blocked, "blocked_s": blocked_time,
        "blocked_value_on_blocked_n": blocked_value, "ours_value_on_blocked_n": sub_value,
        "blocked_s_for_n": extrapolated, "blocked_extrapolated": n_blocked < cosine_n,
        "speedup": extrapolated / ours_time,
    }
    log(f"average cosine N={cosine_n:,} D={d}: ours {ours_time:.4f} s; N×N blocks "
        f"{extrapolated:.2f} s{' (extrapolated from N=' + format(n_blocked, ',') + ')' if n_blocked < cosine_n else ''}"
        f"; values {sub_value:.6f} vs {blocked_value:.6f}")

    y = np.asarray(jax.random.normal(key_b, (isoscore_n, d)) * scales[None, :] + 3.0, np.float32)
    y_dev = jax.device_put(y)
    iso_value, iso_first, iso_time = _timed(jax.jit(metrics.isoscore), y_dev)
    backend = jax.default_backend()
    try:
        import torch  # noqa: F401, PLC0415

        use_torch = backend == "gpu" and torch.cuda.is_available()
    except ImportError:
        use_torch = False
    if use_torch:
        svd_isoscore_torch(y, "cuda")  # warm-up (cuSOLVER handles)
        t0 = time.perf_counter()
        svd_value = svd_isoscore_torch(y, "cuda")
        baseline = "torch.linalg.svdvals (cuda) + paper algorithm"
    else:
        t0 = time.perf_counter()
        svd_value = svd_isoscore_numpy(y)
        baseline = "numpy.linalg.svd + paper algorithm"
    svd_time = time.perf_counter() - t0
    out["isoscore"] = {"n": isoscore_n, "ours_s": iso_time, "ours_first_call_s": iso_first,
                       "ours_value": float(iso_value), "baseline": baseline,
                       "baseline_s": svd_time, "baseline_value": svd_value,
                       "speedup": svd_time / iso_time}
    log(f"IsoScore N={isoscore_n:,} D={d}: ours {iso_time:.4f} s; {baseline} {svd_time:.3f} s; "
        f"values {float(iso_value):.6f} vs {svd_value:.6f}")
    return out
