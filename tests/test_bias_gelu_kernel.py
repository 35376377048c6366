"""The Pallas bias + GELU kernels of benchmarks/bias_gelu_ab.py (interpret mode on the CPU)
against the model's own gelu_exact(h + b) under autodiff, and against float64."""
import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import erf

from benchmarks import bias_gelu_ab as ab
from anisotropy_jax.models import layers


def _inputs(rows, cols, dtype):
    keys = jax.random.split(jax.random.key(3), 3)
    h, dy = (jax.random.normal(k, (rows, cols), dtype) for k in keys[:2])
    return h, (0.5 * jax.random.normal(keys[2], (cols,))).astype(dtype), dy


def test_bias_gelu_kernels_equal_the_models_gelu_with_a_partial_last_block():
    reference = ab._forward_backward(lambda h, b: layers.gelu_exact(h + b[None, :]))
    fused = ab._forward_backward(ab.bias_gelu)
    h, b, dy = _inputs(ab.ROWS + 6, ab.COLS, jnp.float32)  # two row blocks, the second partial
    for got, want in zip(fused(h, b, dy), reference(h, b, dy)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(jnp.abs(want).max()))
    # bf16: y within one bf16 rounding step (the order of XLA's fused float32 arithmetic may
    # differ from the kernel's); dh likewise; db nearer float64 than the reference's
    h, b, dy = _inputs(ab.ROWS + 6, ab.COLS, jnp.bfloat16)
    (y, dh, db), (y_ref, dh_ref, db_ref) = fused(h, b, dy), reference(h, b, dy)
    np.testing.assert_allclose(np.asarray(y, np.float32), np.asarray(y_ref, np.float32),
                               rtol=2 ** -7, atol=0)
    np.testing.assert_allclose(np.asarray(dh, np.float32), np.asarray(dh_ref, np.float32),
                               rtol=1e-2, atol=1e-2)
    x = np.asarray(h + b[None, :], np.float64)
    exact = (np.asarray(dy, np.float64) * (0.5 * (1 + erf(x / np.sqrt(2)))
                                           + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi))).sum(0)
    error = np.abs(np.asarray(db, np.float64) - exact).max() / np.abs(exact).max()
    error_ref = np.abs(np.asarray(db_ref, np.float64) - exact).max() / np.abs(exact).max()
    assert error < 8e-3 and error <= error_ref, (error, error_ref)
