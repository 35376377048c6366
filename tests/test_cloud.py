"""metrics.cloud_metrics against the one-metric functions of metrics.geometry/norms and a float64
numpy reference built from the definitions (the full N×N cosine matrix), on fresh random clouds:
anisotropic, with zero vectors, at norms from 1e-30 to ~1e38, bfloat16-representable, B = 1, L = 2,
under jit and vmap."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from anisotropy_jax import metrics
from tests import reference

# B = 1 (no cross-sequence pairs), L = 2 (one within-sequence pair per sequence), the sweep's shape
# in miniature, and more vectors than dimensions.
SHAPES = [(1, 6, 5), (3, 2, 6), (4, 5, 8), (2, 24, 7)]
EXISTING = {
    "average_cosine": metrics.average_cosine_similarity, "mean_norm": metrics.mean_norm,
    "within_sequence_cosine": metrics.within_sequence_cosine_similarity,
    "cross_sequence_cosine": metrics.cross_sequence_cosine_similarity,
    "drift_norm": metrics.drift_norm, "relative_drift": metrics.relative_drift,
    "isoscore": metrics.isoscore,
}
ALL = dict(sequences=True, drift=True, isoscore=True)
# Observed (3 seeds × these cases): |float32 − float64| ≤ 2.4e-7 for the cosines, relative drift
# and IsoScore, ≤ 1.3e-7 of the mean norm for the norms; cloud_metrics − existing ≤ 4.2e-7.
RTOL, ATOL = 1e-6, 1e-6


@jax.jit
def _fused(x):
    return metrics.cloud_metrics(x, **ALL)


@jax.jit
def _existing(x):
    """The one-metric functions, jitted together (one compilation, not one per operation)."""
    skip = {"cross_sequence_cosine"} if x.shape[0] < 2 else set()
    return {key: fn(x) for key, fn in EXISTING.items() if key not in skip}


def _numpy_reference(x_BxLxD):
    """Every metric in float64 from its definition: mean of the pairwise cosine matrix over the
    pairs each one counts (a zero vector has cosine 0 with everything), norms, ‖mean‖, and
    IsoScore by the paper's algorithm (tests/reference.py)."""
    x = np.asarray(x_BxLxD, np.float64)
    b, l, d = x.shape
    x_NxD = x.reshape(b * l, d)
    norms_N = np.linalg.norm(x_NxD, axis=1)
    u_NxD = x_NxD / np.where(norms_N > 0, norms_N, 1.0)[:, None]
    cos_NxN = u_NxD @ u_NxD.T
    seq_N = np.repeat(np.arange(b), l)
    distinct = ~np.eye(b * l, dtype=bool)
    same_seq = seq_N[:, None] == seq_N[None, :]
    drift = np.linalg.norm(x_NxD.mean(axis=0))
    out = {"average_cosine": cos_NxN[distinct].mean(), "mean_norm": norms_N.mean(), "drift_norm": drift,
           "relative_drift": drift / norms_N.mean() if norms_N.mean() > 0 else 0.0,
           "isoscore": reference.isoscore_algorithm(x_NxD)}
    if l >= 2:
        out["within_sequence_cosine"] = cos_NxN[distinct & same_seq].mean()
    if b >= 2:
        out["cross_sequence_cosine"] = cos_NxN[~same_seq].mean()
    return out


def _cloud(seed, shape, offset=1.5, dtype=np.float32):
    """Per-dimension scales and a shared offset: an anisotropic cloud (mean cosine 0.47-0.91 in
    these tests)."""
    rng = np.random.default_rng(seed)
    d = shape[-1]
    x = rng.normal(size=shape) * rng.uniform(0.5, 2.0, size=d) + offset * rng.normal(size=d)
    return x.astype(dtype)


def _assert_close(got, want, rtol=RTOL, atol=ATOL, scale=1.0):
    """Cosines, relative drift and IsoScore in absolute terms, norms relative to `scale`."""
    assert set(got) == set(want)
    for key in want:
        tol = dict(rtol=rtol, atol=atol * (scale if key in ("mean_norm", "drift_norm") else 1.0))
        np.testing.assert_allclose(np.asarray(got[key], np.float64), want[key], **tol,
                                   err_msg=key)


@pytest.mark.parametrize("shape", SHAPES)
def test_float32_matches_the_existing_functions(shape):
    x = jnp.asarray(_cloud(sum(shape), shape))
    got, want = _fused(x), _existing(x)
    for value in got.values():
        assert value.dtype == jnp.float32 and value.shape == ()
    _assert_close(got, want, scale=float(want["mean_norm"]))


@pytest.mark.parametrize("shape", SHAPES)
def test_float32_close_to_float64_reference(shape):
    x = _cloud(sum(shape) + 1, shape)
    want = _numpy_reference(x)
    _assert_close(_fused(jnp.asarray(x)), want, scale=want["mean_norm"])


@pytest.mark.parametrize("shape", SHAPES[1:3])
def test_float64_equals_the_definitions(shape):
    """The algebra, without float32 rounding in the way."""
    with jax.enable_x64(True):
        x = _cloud(7, shape, dtype=np.float64)
        got = _fused(jnp.asarray(x))
        assert got["average_cosine"].dtype == jnp.float64
        _assert_close(got, _numpy_reference(x), rtol=1e-10, atol=1e-12,
                      scale=np.linalg.norm(x, axis=-1).mean())


def test_zero_vectors_have_cosine_zero_with_everything():
    x = _cloud(3, (3, 5, 6))
    x[0, 1] = 0.0
    x[1, 4] = 0.0
    x[2] = 0.0  # a whole sequence of zeros
    want = _numpy_reference(x)
    got = _fused(jnp.asarray(x))
    _assert_close(got, want, scale=want["mean_norm"])
    _assert_close(got, _existing(jnp.asarray(x)), scale=want["mean_norm"])


def test_all_zero_cloud_is_zero_and_finite():
    for key, value in _fused(jnp.zeros((2, 3, 4))).items():
        assert float(value) == 0.0, key


@pytest.mark.parametrize("scale", [1e30, 1e-30, 5e36])
def test_extreme_scales_are_exact(scale):
    """Huge and tiny clouds give the float64 values: nothing overflows or underflows. At 5e36 the
    128 vectors' column sums (~1e39) would overflow float32 without the power-of-two scale."""
    x = _cloud(4, (4, 32, 8), offset=3.0).astype(np.float64) * scale
    x = x.astype(np.float32)
    assert np.linalg.norm(x.astype(np.float64), axis=-1).max() < np.finfo(np.float32).max
    if scale > 1e35:
        with np.errstate(over="ignore"):
            assert not np.all(np.isfinite(x.sum(axis=(0, 1))))  # the unscaled sum overflows
    want = _numpy_reference(x)
    got = _fused(jnp.asarray(x))
    assert all(np.isfinite(float(v)) for v in got.values())
    _assert_close(got, want, scale=want["mean_norm"])


def test_bfloat16_representable_inputs():
    """The bfloat16 sweep casts its probes to float32 before the metrics: such inputs."""
    x = jnp.asarray(_cloud(5, (4, 16, 12), offset=4.0)).astype(jnp.bfloat16).astype(jnp.float32)
    got, want = _fused(x), _numpy_reference(x)
    _assert_close(got, want, scale=want["mean_norm"])
    _assert_close(got, _existing(x), scale=want["mean_norm"])


def test_vmap_matches_single_calls():
    x = jnp.asarray(_cloud(6, (3, 2, 5, 6)))  # vmap over the leading 3
    batched = jax.jit(jax.vmap(lambda x: metrics.cloud_metrics(x, **ALL)))(x)
    for i in range(x.shape[0]):
        for key, value in _fused(x[i]).items():
            np.testing.assert_allclose(batched[key][i], value, rtol=1e-6, atol=1e-7, err_msg=key)


def test_flags_select_the_keys():
    x = jax.ShapeDtypeStruct((2, 3, 4), jnp.float32)
    keys = lambda x, **flags: set(jax.eval_shape(lambda x: metrics.cloud_metrics(x, **flags), x))
    assert keys(x) == {"average_cosine", "mean_norm", "within_sequence_cosine",
                                             "cross_sequence_cosine", "drift_norm",
                                             "relative_drift"}
    assert keys(x, sequences=False, drift=False) == {"average_cosine", "mean_norm"}
    assert keys(x, drift=False, isoscore=True) == {
        "average_cosine", "mean_norm", "within_sequence_cosine", "cross_sequence_cosine", "isoscore"}
    assert "cross_sequence_cosine" not in keys(jax.ShapeDtypeStruct((1, 3, 4), jnp.float32))
    assert "within_sequence_cosine" not in keys(jax.ShapeDtypeStruct((2, 1, 4), jnp.float32))


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match="at least 2"):
        metrics.cloud_metrics(jnp.ones((1, 1, 4)))
    with pytest.raises(ValueError, match=r"\(B, L, D\)"):
        metrics.cloud_metrics(jnp.ones((5, 4)))
