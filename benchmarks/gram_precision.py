r"""Speed and accuracy of the Gram matrix XᵀX behind IsoScore and effective rank, by dot algorithm.

  python -m benchmarks.gram_precision [--repeats=20]

For a chunk of 32 BERT-base block outputs (N = 32·128 = 4,096 vectors of D = 768, a mean offset
added), computes IsoScore with the centred covariance at several precisions / dot algorithms, and
reports ms per grid point and the largest |IsoScore − float64 reference| over the chunk. Chooses
what `metrics.geometry` uses on accelerators (docs/PERFORMANCE.md).
"""
from __future__ import annotations

from absl import app, flags

from benchmarks.timing import median_time

_REPEATS = flags.DEFINE_integer("repeats", 20, "Timed repetitions (median).")


def main(argv):
    del argv
    import jax
    import jax.numpy as jnp
    import numpy as np

    chunk, n, d = 32, 4096, 768
    key_x, key_scale = jax.random.split(jax.random.key(0))
    scales = jax.random.uniform(key_scale, (chunk, 1, d), minval=0.1, maxval=3.0)  # anisotropic
    x = jax.random.normal(key_x, (chunk, n, d)) * scales + 5.0

    def isoscore(x_NxD, precision):
        xc = x_NxD - jnp.mean(x_NxD, axis=0, keepdims=True)
        xc = xc / jnp.max(jnp.abs(xc))
        c = jnp.einsum("nd,ne->de", xc, xc, precision=precision)
        c = c / jnp.max(jnp.abs(c))
        return (jnp.trace(c) ** 2 / jnp.sum(c * c) - 1) / (d - 1)

    def isoscore_halves(x_NxD, precision):
        """The same score from the three distinct blocks of the symmetric Gram (D split in two
        halves): 3/4 of the products."""
        xc = x_NxD - jnp.mean(x_NxD, axis=0, keepdims=True)
        xc = xc / jnp.max(jnp.abs(xc))
        a, b = xc[:, : d // 2], xc[:, d // 2:]
        g11, g12, g22 = (jnp.einsum("nd,ne->de", u, w, precision=precision)
                         for u, w in ((a, a), (a, b), (b, b)))
        trace = jnp.trace(g11) + jnp.trace(g22)
        frob = jnp.sum(g11 * g11) + 2 * jnp.sum(g12 * g12) + jnp.sum(g22 * g22)
        return (trace ** 2 / frob - 1) / (d - 1)

    x64 = np.asarray(x, np.float64)
    reference = []
    for x_NxD in x64:
        xc = x_NxD - x_NxD.mean(0)
        c = xc.T @ xc
        reference.append((np.trace(c) ** 2 / np.sum(c * c) - 1) / (d - 1))
    reference = np.asarray(reference)
    presets = jax.lax.DotAlgorithmPreset
    print(f"{jax.devices()[0].device_kind}: IsoScore of {chunk} × ({n}, {d}); reference "
          f"{reference.min():.4f}..{reference.max():.4f}")
    for name, precision in (("HIGHEST", jax.lax.Precision.HIGHEST),
                            ("DEFAULT", jax.lax.Precision.DEFAULT),
                            ("TF32_TF32_F32_X3", presets.TF32_TF32_F32_X3),
                            ("BF16_BF16_F32_X3", presets.BF16_BF16_F32_X3),
                            ("BF16_BF16_F32_X6", presets.BF16_BF16_F32_X6),
                            ("BF16_BF16_F32_X9", presets.BF16_BF16_F32_X9),
                            ("BF16_BF16_F32", presets.BF16_BF16_F32),
                            ("DEFAULT, symmetric halves", "halves")):
        try:
            if precision == "halves":
                fn = jax.jit(jax.vmap(lambda v: isoscore_halves(v, jax.lax.Precision.DEFAULT)))
            else:
                fn = jax.jit(jax.vmap(lambda v, p=precision: isoscore(v, p)))
            seconds = median_time(fn, x, repeats=_REPEATS.value)
            error = float(np.max(np.abs(np.asarray(fn(x), np.float64) - reference)))
            print(f"  {name:26s} {seconds / chunk * 1e3:8.4f} ms/point   max |error| {error:.2e}")
        except Exception as exc:  # noqa: BLE001 - an algorithm the backend lacks
            print(f"  {name:18s} unsupported here: {str(exc).splitlines()[0][:100]}")


if __name__ == "__main__":
    app.run(main)
