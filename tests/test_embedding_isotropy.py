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


def _sign_free_loop(w):
    """Sign-free partition isotropy with float64 sums (numpy's eigenvectors: ± both used, so
    their signs do not matter)."""
    return _loop(w, np.linalg.eigh(w.T @ w)[1], True)


def _floats(values):
    return {k: float(v) for k, v in values.items()}


def _biased(rng, n, d):
    """Rows with a shared direction (as trained output embeddings have)."""
    return rng.standard_normal((n, d)) * 0.6 + rng.standard_normal(d) * 0.5


def test_scale_alone_lowers_partition_isotropy_and_a_uniform_gain_is_only_scale():
    rng = np.random.default_rng(4)
    w = _biased(rng, 60, 5)
    values = [_sign_free_loop(a * w) for a in (0.25, 0.5, 1.0, 2.0, 4.0)]
    assert all(b < a for a, b in zip(values, values[1:])), values  # scale alone lowers I
    with jax.enable_x64(True):
        np.testing.assert_allclose(ei.partition_isotropy_conventions(2.0 * w)["sign_free"],
                                   values[3], rtol=1e-10)
        # A gain of 1.7 in every dimension: output × γ is less isotropic than the output with no
        # direction-dependence at all, and the equal-norm control is exactly output × γ.
        gain = np.full(5, 1.7)
        got = _floats(ei.gain_controls(w, gain, jax.random.key(0), draws=2))
        scaled = _floats(ei.embedding_isotropy(w, w, gain))
    assert scaled["output_scaled_raw_sign_free"] < scaled["output_raw_sign_free"] - 0.01
    for v in ("raw", "centered"):
        for c in ("one_sign", "sign_free"):
            for control in ("equalnorm", "meangain"):
                np.testing.assert_allclose(got[f"output_{control}_{v}_{c}"],
                                           scaled[f"output_scaled_{v}_{c}"], rtol=1e-10)
    np.testing.assert_allclose(got["final_gain_frobenius_ratio"], 1.7, rtol=1e-12)


def test_gain_controls_match_float64_loops():
    rng = np.random.default_rng(5)
    w, gain = _biased(rng, 50, 6), rng.uniform(0.4, 2.5, 6)
    key, draws = jax.random.key(11), 3
    with jax.enable_x64(True):
        got = _floats(ei.gain_controls(w, gain, key, draws=draws))
        keys = dict(zip(("raw", "centered"), jax.random.split(key)))
        noise = {v: [np.asarray(jax.random.normal(k, w.shape, jnp.float64))
                     for k in jax.random.split(keys[v], draws)] for v in keys}
    ratio = math.sqrt(sum(float(np.sum((w[:, d] * gain[d]) ** 2)) for d in range(6))
                      / sum(float(np.sum(w[:, d] ** 2)) for d in range(6)))
    np.testing.assert_allclose(got["final_gain_frobenius_ratio"], ratio, rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(w * ratio), np.linalg.norm(w * gain), rtol=1e-12)
    centre = {"raw": lambda x: x, "centered": lambda x: x - x.mean(0)}
    for v, f in centre.items():
        for control, x in (("equalnorm", w * ratio), ("meangain", w * gain.mean())):
            x = f(x)
            with jax.enable_x64(True):
                vecs = np.asarray(jnp.linalg.eigh(jnp.asarray(x.T @ x))[1])
            np.testing.assert_allclose(got[f"output_{control}_{v}_sign_free"],
                                       _sign_free_loop(x), rtol=1e-10)
            np.testing.assert_allclose(got[f"output_{control}_{v}_one_sign"],
                                       _loop(x, vecs, False), rtol=1e-10)
        # rowdir: each row of (centred) W·diag(γ) with its norm, in the direction of a draw.
        x = f(w * gain)
        draws_ref = []
        for g in noise[v]:
            rows = np.array([g[i] / np.linalg.norm(g[i]) * np.linalg.norm(x[i])
                             for i in range(len(x))])
            draws_ref.append(_sign_free_loop(rows))
        np.testing.assert_allclose(got[f"output_rowdir_{v}_sign_free"], np.mean(draws_ref),
                                   rtol=1e-10)
    # Direction-dependence of γ: the equal-norm control differs from W·diag(γ) here.
    with jax.enable_x64(True):
        scaled = float(ei.embedding_isotropy(w, w, gain)["output_scaled_centered_sign_free"])
    assert abs(scaled - got["output_equalnorm_centered_sign_free"]) > 1e-3


def test_random_row_directions_keep_norms_and_are_uniform():
    rng = np.random.default_rng(6)
    w = _biased(rng, 6000, 3)
    w[7] = 0.0
    with jax.enable_x64(True):
        r = np.asarray(ei.random_row_directions(w, jax.random.key(3)))
    np.testing.assert_allclose(np.linalg.norm(r, axis=1), np.linalg.norm(w, axis=1), rtol=1e-12)
    assert np.all(r[7] == 0)
    u = np.delete(r / np.linalg.norm(r, axis=1, keepdims=True).clip(1e-300), 7, axis=0)
    # Uniform on the sphere: mean 0 and second moment I/3 (sampling error ~ 1/√6000 ≈ 0.013).
    assert np.max(np.abs(u.mean(0))) < 0.05
    np.testing.assert_allclose(u.T @ u / len(u), np.eye(3) / 3, atol=0.03)
    # The original directions shared one: its sign-free I is far below the control's.
    with jax.enable_x64(True):
        control = float(ei.row_direction_isotropy(w, jax.random.key(4), draws=2)["sign_free"])
    assert _sign_free_loop(w) < control - 0.1


def test_row_direction_control_of_isotropic_rows_is_their_own_isotropy():
    rng = np.random.default_rng(7)
    w = rng.standard_normal((3000, 4)) * rng.uniform(0.2, 1.0, (3000, 1))  # random directions
    with jax.enable_x64(True):
        control = float(ei.row_direction_isotropy(w, jax.random.key(5), draws=4)["sign_free"])
    np.testing.assert_allclose(control, _sign_free_loop(w), atol=0.03)


def test_pretrained_study_reports_the_gain_controls_only_where_there_is_a_gain():
    from anisotropy_jax.studies.pretrained import embeddings as pretrained

    rng = np.random.default_rng(8)
    w_in, w_out = rng.standard_normal((300, 8)) * 0.5, _biased(rng, 300, 8)
    gain = rng.uniform(0.8, 2.4, 8)
    out = pretrained.embedding_isotropy({"input": w_in, "output": w_out,
                                         "final_norm_scale": gain})
    matrices = ("input", "output", "output_scaled", "output_equalnorm", "output_meangain",
                "output_rowdir")
    want = {f"{m}_{v}_{c}" for m in matrices for v in ("raw", "centered")
            for c in ("one_sign", "sign_free")}
    want |= {f"{m}_{v}" for m in matrices for v in ("raw", "centred")}
    assert set(out) == want | {"final_gain_mean", "final_gain_frobenius_ratio"}
    ratio = np.linalg.norm(w_out * gain) / np.linalg.norm(w_out)
    np.testing.assert_allclose(out["final_gain_frobenius_ratio"], ratio, rtol=1e-5)
    np.testing.assert_allclose(out["final_gain_mean"], gain.mean(), rtol=1e-6)
    x = w_out * ratio
    np.testing.assert_allclose(out["output_equalnorm_centred"], _sign_free_loop(x - x.mean(0)),
                               rtol=1e-4)
    np.testing.assert_allclose(out["output_meangain_raw"], _sign_free_loop(w_out * gain.mean()),
                               rtol=1e-4)
    assert out["output_rowdir_raw"] > out["output_scaled_raw"] + 0.05  # a shared direction
    no_gain = pretrained.embedding_isotropy({"input": w_in, "output": w_out,
                                             "final_norm_scale": None})
    assert {m for k in no_gain for m in matrices if k.startswith(m + "_")} == {
        "input", "output"} and not any(k.startswith("final_gain") for k in no_gain)
