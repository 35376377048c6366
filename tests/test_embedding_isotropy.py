"""metrics/embedding_isotropy.py: partition isotropy in Machina & Mercer's one-sign convention
and the sign-free one (float64 loops, closed forms), the gain-scaled output matrix, and the 2-D
SVD projection."""
import math

import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax import metrics
from anisotropy_jax.metrics import embedding_isotropy as ei


def _loop(w, vecs, both_signs):
    """min_c Z(c) / max_c Z(c) with explicit sums, c = the given eigenvectors (± if asked)."""
    directions = [vecs[:, k] for k in range(vecs.shape[1])]
    if both_signs:
        directions += [-c for c in directions]
    z = [sum(math.exp(float(row @ c)) for row in w) for c in directions]
    return min(z) / max(z)


def test_both_conventions_match_float64_loops_and_order():
    w = np.random.default_rng(0).standard_normal((40, 6)) * 0.7 + np.linspace(-1, 1, 6)
    with jax.enable_x64(True):
        got = ei.partition_isotropy_conventions(w)
        _, vecs = jnp.linalg.eigh(jnp.asarray(w.T @ w))  # the eigenvectors the metric uses
        sign_free_metric = metrics.partition_isotropy(w)
    vecs = np.asarray(vecs)
    np.testing.assert_allclose(got["one_sign"], _loop(w, vecs, False), rtol=1e-10)
    np.testing.assert_allclose(got["sign_free"], _loop(w, vecs, True), rtol=1e-10)
    np.testing.assert_allclose(got["sign_free"], sign_free_metric, rtol=1e-10)
    assert got["sign_free"] < got["one_sign"]  # a common direction: Z(c) ≠ Z(−c)


def test_symmetric_rows_make_the_conventions_agree_and_flipping_a_sign_matters():
    half = np.random.default_rng(1).standard_normal((20, 5))
    w = np.concatenate([half, -half])  # Z(c) = Z(−c) for every c
    with jax.enable_x64(True):
        got = ei.partition_isotropy_conventions(w)
    np.testing.assert_allclose(got["one_sign"], got["sign_free"], rtol=1e-12)
    # One-sign depends on the eigenvectors' signs: evaluated with one of them flipped, the loop
    # gives another value for a biased matrix, the sign-free one does not.
    w = half + 2.0
    vecs = np.linalg.eigh(w.T @ w)[1]
    flipped = vecs * np.array([1, 1, 1, 1, -1])
    assert abs(_loop(w, vecs, False) - _loop(w, flipped, False)) > 1e-3
    np.testing.assert_allclose(_loop(w, vecs, True), _loop(w, flipped, True), rtol=1e-12)


def test_embedding_isotropy_keys_and_gain_scaling():
    rng = np.random.default_rng(2)
    w_in, w_out = rng.standard_normal((30, 4)), rng.standard_normal((30, 4)) + 0.5
    gain = np.array([2.0, 0.5, 1.0, 3.0])
    with jax.enable_x64(True):
        got = ei.embedding_isotropy(w_in, w_out, gain)
        want = ei.partition_isotropy_conventions(w_out * gain)
        centred = ei.partition_isotropy_conventions(w_in - w_in.mean(0))
        unit = ei.embedding_isotropy(w_in, w_out, np.ones(4))
    assert len(got) == 3 * 2 * 2
    np.testing.assert_allclose(got["output_scaled_raw_one_sign"], want["one_sign"], rtol=1e-12)
    np.testing.assert_allclose(got["input_centered_sign_free"], centred["sign_free"], rtol=1e-12)
    np.testing.assert_allclose(unit["output_scaled_raw_sign_free"],
                               unit["output_raw_sign_free"], rtol=1e-12)


def test_svd_projection_keeps_the_two_leading_directions():
    rng = np.random.default_rng(3)
    basis = np.linalg.qr(rng.standard_normal((6, 6)))[0]
    coords = rng.standard_normal((50, 6)) * np.array([5.0, 3.0, 0.1, 0.1, 0.1, 0.1])
    w = coords @ basis.T + 10.0
    with jax.enable_x64(True):
        proj = np.asarray(ei.svd_projection_2d(w, center=True))
    u, s, _ = np.linalg.svd(w - w.mean(0), full_matrices=False)  # numpy float64 reference
    np.testing.assert_allclose(np.abs(proj), np.abs(u[:, :2] * s[:2]), rtol=1e-8, atol=1e-10)
    # It keeps the variance of the two strong directions (std 5 and 3), not the weak ones.
    assert 0.99 < np.sum(proj ** 2) / np.sum((w - w.mean(0)) ** 2) < 1.0
