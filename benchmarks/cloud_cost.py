r"""The point-cloud metrics of the sweep's reduction, one function per metric against
`metrics.cloud_metrics` (issue 14, "fuse the reductions").

  python -m benchmarks.cloud_cost [--batch=32] [--chunk=32] [--repeats=20]

For one chunk of `chunk` grid points of (B, L, D) = (batch, 128, 768) float32 activations, times
(jitted, vmapped over the chunk) the per-metric calls that `studies/sweep/points.reduce_probes`
makes on x = resid_pre, attn_out and y = resid_post, against `cloud_metrics` giving the same
values, and prints ms per grid point and the largest difference between the two. The inputs are
random arrays with a shared offset (an anisotropic cloud); the numbers are the metrics' cost alone.
"""
from __future__ import annotations

from absl import app, flags

from benchmarks.timing import median_time

_BATCH = flags.DEFINE_integer("batch", 32, "Sequences per grid point (B).")
_CHUNK = flags.DEFINE_integer("chunk", 32, "Grid points per chunk.")
_REPEATS = flags.DEFINE_integer("repeats", 20, "Timed repetitions (median).")


def _per_metric(x, attn, y):
    """The calls of reduce_probes, one function per metric (keys as cloud_metrics names them)."""
    from anisotropy_jax import metrics

    return {
        "x": {"cosine": metrics.average_cosine_similarity(x), "norm": metrics.mean_norm(x),
              "drift_norm": metrics.drift_norm(x)},
        "attn": {"cosine": metrics.average_cosine_similarity(attn),
                 "norm": metrics.mean_norm(attn),
                 "cross_sequence_cosine": metrics.cross_sequence_cosine_similarity(attn)},
        "y": {"cosine": metrics.average_cosine_similarity(y),
              "within_sequence_cosine": metrics.within_sequence_cosine_similarity(y),
              "cross_sequence_cosine": metrics.cross_sequence_cosine_similarity(y),
              "norm": metrics.mean_norm(y), "isoscore": metrics.isoscore(y),
              "drift_norm": metrics.drift_norm(y), "relative_drift": metrics.relative_drift(y)},
    }


def _fused(x, attn, y):
    """The same values from one cloud_metrics call per tensor (a few extra keys come free)."""
    from anisotropy_jax.metrics import cloud_metrics

    return {"x": cloud_metrics(x, sequences=False), "attn": cloud_metrics(attn, drift=False),
            "y": cloud_metrics(y, isoscore=True)}


def _largest_difference(per_metric, fused):
    import numpy as np

    return max(float(np.max(np.abs(np.asarray(value) - np.asarray(fused[tensor][key]))
                            / np.maximum(np.abs(np.asarray(value)), 1e-6)))
               for tensor, values in per_metric.items() for key, value in values.items())


def main(argv):
    del argv
    import jax
    import jax.numpy as jnp

    chunk, b, l, d = _CHUNK.value, _BATCH.value, 128, 768
    keys = jax.random.split(jax.random.key(0), 4)
    offset_D = jax.random.normal(keys[3], (d,))
    x, attn, y = (jax.random.normal(k, (chunk, b, l, d)) + scale * offset_D
                  for k, scale in zip(keys[:3], (3.0, 0.5, 2.0)))
    by_tensor = {"x = resid_pre": 0, "attn = attn_out": 1, "y = resid_post": 2}
    print(f"{jax.devices()[0].device_kind}: chunk {chunk}, B={b}, L={l}, D={d}; ms per point")
    print(f"  {'':18s} {'per metric':>12s} {'cloud_metrics':>14s} {'ratio':>7s}")
    for name, index in by_tensor.items():
        tensor = ("x", "attn", "y")[index]
        old = jax.jit(jax.vmap(lambda *p: _per_metric(*p)[tensor]))
        new = jax.jit(jax.vmap(lambda *p: _fused(*p)[tensor]))
        t_old, t_new = (median_time(fn, x, attn, y, repeats=_REPEATS.value) / chunk * 1e3
                        for fn in (old, new))
        print(f"  {name:18s} {t_old:12.4f} {t_new:14.4f} {t_old / t_new:6.2f}x")
    old, new = jax.jit(jax.vmap(_per_metric)), jax.jit(jax.vmap(_fused))
    t_old, t_new = (median_time(fn, x, attn, y, repeats=_REPEATS.value) / chunk * 1e3
                    for fn in (old, new))
    print(f"  {'all three':18s} {t_old:12.4f} {t_new:14.4f} {t_old / t_new:6.2f}x")
    one_read = jax.jit(jax.vmap(lambda y: jnp.sum(y * y)))
    floor = median_time(one_read, y, repeats=_REPEATS.value) / chunk * 1e3
    print(f"  {'one read of y':18s} {floor:12.4f}   (memory-bound floor of one pass)")
    print(f"  largest relative difference, per metric vs cloud_metrics: "
          f"{_largest_difference(old(x, attn, y), new(x, attn, y)):.2e}")


if __name__ == "__main__":
    app.run(main)
