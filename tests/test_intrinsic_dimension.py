"""Numerical claims about anisotropy_jax.metrics.intrinsic_dimension: float64 numpy implementations
of the papers' formulas (Facco et al. 2017's fit, Denti et al. 2022's likelihood), dadapy's own
numbers on fixed data (docs/results/extreme/intrinsic_dimension/dadapy_reference.json), manifolds of known
dimension, invariances, masks, extreme scales, jit and vmap."""
import importlib.util
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize, special

from anisotropy_jax import metrics

N, D = 200, 8  # one shape for most tests: each new shape compiles the estimators again
RESULTS = pathlib.Path(__file__).resolve().parent.parent / "docs/results/extreme/intrinsic_dimension"

twonn = jax.jit(metrics.twonn_dimension, static_argnames=("fraction", "block_size"))
gride = jax.jit(metrics.gride_dimension, static_argnames=("n1", "n2", "unbiased", "block_size"))
scaling = jax.jit(metrics.gride_scaling, static_argnames=("max_rank", "unbiased", "block_size"))
neighbours = jax.jit(metrics.neighbor_distances, static_argnames=("ranks", "block_size"))


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


def _subspace(rng, n, d, big_d, offset=0.0):
    basis = np.linalg.qr(rng.normal(size=(big_d, d)))[0]
    return rng.normal(size=(n, d)) @ basis.T + offset


# ---------------------------------------------------------------- float64 numpy references

def _sorted_distances(x):
    d = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    np.fill_diagonal(d, np.inf)
    return np.sort(d, axis=1)  # column r − 1 = distance to the r-th neighbour


def _twonn_reference(x, fraction=0.9):
    """Facco et al. 2017: F(μ_(i)) = i/N, fit −log(1 − F) = d log μ through the origin on the
    smallest ⌊fraction·N⌋ ratios."""
    r = _sorted_distances(x)
    mu = np.sort(r[:, 1] / r[:, 0])
    n = len(mu)
    kept = int(np.floor(n * fraction))
    xs = np.log(mu[:kept])
    ys = -np.log(1.0 - np.arange(1, kept + 1) / n)
    return float(xs @ ys / (xs @ xs))


def _gride_loglik(d, mu, n1, n2):
    """log of Denti et al.'s density f(μ) = d (μ^d − 1)^{n2−n1−1} / (B(n2−n1, n1) μ^{(n2−1)d+1})."""
    return np.sum(np.log(d) + (n2 - n1 - 1) * np.log(mu ** d - 1.0)
                  - ((n2 - 1) * d + 1) * np.log(mu) - special.betaln(n2 - n1, n1))


def _gride_reference(x, n1, n2):
    r = _sorted_distances(x)
    mu = r[:, n2 - 1] / r[:, n1 - 1]
    res = optimize.minimize_scalar(lambda d: -_gride_loglik(d, mu, n1, n2), bounds=(0.05, 400),
                                   method="bounded", options={"xatol": 1e-11})
    d = res.x
    h = 1e-4 * d  # observed information −ℓ''(d) by central differences
    second = (_gride_loglik(d + h, mu, n1, n2) - 2 * _gride_loglik(d, mu, n1, n2)
              + _gride_loglik(d - h, mu, n1, n2)) / h ** 2
    return d, 1.0 / np.sqrt(-second)


# ---------------------------------------------------------------- against the definitions

def test_neighbor_distances_match_brute_force():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 6)) * 3 + 100.0
    ref = _sorted_distances(x)
    got = neighbours(x, (1, 2, 4, 8), block_size=16)  # several blocks, the last one partial
    np.testing.assert_allclose(got, ref[:, [0, 1, 3, 7]], rtol=1e-12)
    mask = np.ones(40, bool)
    mask[[3, 17, 30]] = False
    got = neighbours(x, (1, 3), mask)
    np.testing.assert_allclose(np.asarray(got)[mask], _sorted_distances(x[mask])[:, [0, 2]],
                               rtol=1e-12)
    few = neighbours(x[:5], (1, 4), np.array([True, True, True, False, False]))
    assert np.isinf(few[0, 1]) and np.isfinite(few[0, 0])  # only 2 other counted points
    with pytest.raises(ValueError, match="ranks"):
        metrics.neighbor_distances(x[:5], (5,))


@pytest.mark.parametrize("seed", [0, 1])
def test_twonn_matches_numpy_fit(seed):
    rng = np.random.default_rng(seed)
    x = _subspace(rng, N, 4, D) + 0.05 * rng.normal(size=(N, D))
    assert float(twonn(x)) == pytest.approx(_twonn_reference(x), rel=1e-10)
    assert float(twonn(x, fraction=0.5)) == pytest.approx(_twonn_reference(x, 0.5), rel=1e-10)


@pytest.mark.parametrize("n1,n2", [(1, 2), (2, 4), (1, 5)])
def test_gride_matches_numpy_likelihood(n1, n2):
    rng = np.random.default_rng(n1 + 10 * n2)
    x = _subspace(rng, N, 3, D, offset=1.0)
    got = gride(x, n1=n1, n2=n2)
    d, err = _gride_reference(x, n1, n2)
    assert float(got.dimension) == pytest.approx(d, rel=1e-7)
    assert float(got.stderr) == pytest.approx(err, rel=1e-4)
    r = _sorted_distances(x)
    assert float(got.scale) == pytest.approx(np.mean(r[:, [n1 - 1, n2 - 1]]), rel=1e-12)


def test_twonn_maximum_likelihood_closed_form():
    rng = np.random.default_rng(2)
    x = _subspace(rng, N, 6, D)
    r = _sorted_distances(x)
    total = np.sum(np.log(r[:, 1] / r[:, 0]))
    got = gride(x, n1=1, n2=2)
    assert float(got.dimension) == pytest.approx(N / total, rel=1e-10)
    assert float(got.stderr) == pytest.approx(N / total / np.sqrt(N), rel=1e-10)
    assert float(gride(x, n1=1, n2=2, unbiased=True).dimension) == pytest.approx((N - 1) / total,
                                                                                 rel=1e-10)
    log_mu = jnp.asarray(np.log(r[:, 1] / r[:, 0]))
    d, _ = metrics.gride_from_ratios(log_mu, 1, 2)
    assert float(d) == pytest.approx(N / total, rel=1e-10)


def test_gride_scaling_equals_single_scales():
    rng = np.random.default_rng(3)
    x = _subspace(rng, N, 3, D)
    got = scaling(x, max_rank=16)
    assert got.dimension.shape == (4,)  # (1, 2), (2, 4), (4, 8), (8, 16)
    for i, n1 in ((0, 1), (3, 8)):
        single = gride(x, n1=n1)
        for a, b in zip(got, single):
            assert float(a[i]) == pytest.approx(float(b), rel=1e-12)
    assert scaling(x[:10], max_rank=64).dimension.shape == (3,)  # ranks ≤ N − 1 = 9: 1, 2, 4, 8


# ---------------------------------------------------------------- dadapy's numbers

def _reference_datasets():
    spec = importlib.util.spec_from_file_location("dadapy_reference",
                                                  RESULTS / "dadapy_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_datasets()


def test_matches_dadapy_on_its_reference_data():
    reference = json.loads((RESULTS / "dadapy_reference.json").read_text())["datasets"]
    datasets = _reference_datasets()
    assert set(datasets) == set(reference)
    for name, (x, dim) in datasets.items():
        ref = reference[name]
        # The data are regenerated: a change in numpy's random stream must fail here, not compare
        # other data.
        assert np.sum(x) == pytest.approx(ref["checksum"]["sum"], rel=1e-12), name
        np.testing.assert_allclose(x[0, :3], ref["checksum"]["first"], rtol=1e-14)
        assert dim == ref["true_dimension"]
        assert float(twonn(x)) == pytest.approx(ref["twonn_fit_fraction_0.9"], rel=1e-9), name
        got = scaling(x, max_rank=64, unbiased=True)
        # its first scale, (n1, n2) = (1, 2), is the TwoNN maximum likelihood (N − 1)/Σ log μ
        assert float(got.dimension[0]) == pytest.approx(ref["twonn_ml_unbiased"], rel=1e-7)
        gs = ref["gride_scaling_64"]
        assert gs["ratios_dropped_by_dadapy_filter"] == [0] * 6  # dadapy's filter: a no-op here
        # dadapy's bisection stops at |d0 − d1| < 1e-7; its stderr uses N/d² (not N − 1)
        np.testing.assert_allclose(got.dimension, gs["dimension"], rtol=1e-7, err_msg=name)
        np.testing.assert_allclose(got.stderr, gs["stderr"], rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(got.scale, gs["scale"], rtol=1e-12, err_msg=name)


def _duplicate_datasets():
    spec = importlib.util.spec_from_file_location("dadapy_duplicates",
                                                  RESULTS / "dadapy_duplicates.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_datasets()


def _copies_as_neighbours_twonn(x):
    """TwoNN as it was before copies were left out of the neighbour search: every point keeps
    its neighbours (copies included) and only the points with r1 = 0 lose their ratio (float64
    loops): the number that identical points inflate."""
    logs = []
    for i in range(len(x)):
        r = np.sort(np.linalg.norm(np.delete(x, i, axis=0) - x[i], axis=1))
        if r[0] > 0:
            logs.append(np.log(r[1] / r[0]))
    logs = np.sort(logs)
    kept = int(np.floor(len(logs) * 0.9))
    ys = -np.log(1.0 - np.arange(1, kept + 1) / len(logs))
    return float(logs[:kept] @ ys / (logs[:kept] @ logs[:kept]))


def test_identical_points_count_once_as_dadapy_removes_them():
    """60 % of the points exact copies: TwoNN and GRIDE equal those of the distinct points (to
    1e-9: the same points up to their order), and dadapy's numbers after its
    remove_identical_points (dadapy_duplicates.json: TwoNN to 1e-9, GRIDE's scales to 1e-6, its
    bisection stopping at 1e-7). The negative control: keeping the copies as neighbours (only
    their ratios dropped) does not give the distinct points' value."""
    reference = json.loads((RESULTS / "dadapy_duplicates.json").read_text())["datasets"]
    datasets = _duplicate_datasets()
    assert set(datasets) == set(reference)
    for name, (x, unique, dim) in datasets.items():
        ref = reference[name]
        assert np.sum(x) == pytest.approx(ref["checksum"]["sum"], rel=1e-12), name
        np.testing.assert_allclose(x[0, :3], ref["checksum"]["first"], rtol=1e-14)
        assert int(metrics.distinct_points(x).sum()) == ref["n_distinct"] == len(unique)
        got, alone = float(twonn(x)), float(twonn(unique))
        assert got == pytest.approx(alone, rel=1e-9), name
        assert got == pytest.approx(ref["with_copies"]["twonn_fit_fraction_0.9"], rel=1e-9)
        assert got == pytest.approx(dim, rel=0.15)
        np.testing.assert_allclose(scaling(x, max_rank=32, unbiased=True).dimension,
                                   ref["with_copies"]["gride_scaling_32"], rtol=1e-6)
        inflated = _copies_as_neighbours_twonn(x)
        assert inflated > 1.3 * alone, (name, inflated, alone)


def test_matches_dadapy_on_the_states_of_a_real_model():
    """all-MiniLM-L6-v2's embedding output (50 of its 400 rows exact copies: the [CLS] rows) and
    block 3's output, 400 tokens, float16 (minilm_states.npz; dadapy_states.json, made by
    dadapy_states.py): TwoNN to 1e-9 and GRIDE's scales (1, 2) … (16, 32) to 1e-6 of dadapy
    0.3.4 after its remove_identical_points."""
    reference = json.loads((RESULTS / "dadapy_states.json").read_text())["states"]
    with np.load(RESULTS / "minilm_states.npz") as stored:
        states = {name: stored[name].astype(np.float64) for name in stored.files}
    assert set(states) == set(reference) == {"embeddings", "block_3"}
    for name, x in states.items():
        ref = reference[name]
        assert np.sum(x) == pytest.approx(ref["sum"], rel=1e-12), name
        assert int(metrics.distinct_points(x).sum()) == ref["n_after_remove_identical_points"]
        assert float(twonn(x)) == pytest.approx(ref["twonn_fit_fraction_0.9"], rel=1e-9), name
        np.testing.assert_allclose(scaling(x, max_rank=32, unbiased=True).dimension,
                                   ref["gride_scaling_32"], rtol=1e-6, err_msg=name)
    assert reference["embeddings"]["n_after_remove_identical_points"] < len(states["embeddings"])


# ---------------------------------------------------------------- known dimensions

@pytest.mark.parametrize("d", [1, 2, 5])
def test_linear_subspaces_and_spheres_of_known_dimension(d):
    rng = np.random.default_rng(d)
    flat = _subspace(rng, 800, d, 16, offset=rng.normal(size=16))
    sphere = rng.normal(size=(800, d + 1))
    sphere = (sphere / np.linalg.norm(sphere, axis=1, keepdims=True)) @ np.linalg.qr(
        rng.normal(size=(16, d + 1)))[0].T  # S^d, a d-dimensional manifold, in R^16
    for x in (flat, sphere):
        # TwoNN's standard error is about d/√N (3.5 %): 15 % is a loose, never-flaky bound
        assert float(twonn(x)) == pytest.approx(d, rel=0.15)
        assert float(gride(x, n1=2).dimension) == pytest.approx(d, rel=0.15)


def test_gaussian_in_high_dimension_is_underestimated():
    # docs/SCIENCE.md: TwoNN underestimates high dimensions (about 150 for 768 dims at
    # N ≈ 2000); already at 64 dims and N = 500 it finds about half.
    x = np.random.default_rng(4).normal(size=(500, 64))
    assert 20 < float(twonn(x)) < 45


# ---------------------------------------------------------------- invariances, masks, scales

def test_translation_rotation_scale_invariance_float32():
    rng = np.random.default_rng(5)
    x = _subspace(rng, N, 4, D)
    ref = float(twonn(x))
    ref_gride = float(gride(x, n1=2).dimension)
    rotation = np.linalg.qr(rng.normal(size=(D, D)))[0]
    u = rng.normal(size=D)
    u /= np.linalg.norm(u)
    for scale, shift in ((1.0, 1e4), (1e-30, 0.0), (1e30, 0.0), (3.0, 256.0)):
        x32 = jnp.asarray(scale * (x @ rotation + shift * u), jnp.float32)
        got = twonn(x32)
        assert got.dtype == jnp.float32
        assert float(got) == pytest.approx(ref, rel=2e-3), (scale, shift)
        assert float(gride(x32, n1=2).dimension) == pytest.approx(ref_gride, rel=2e-3)


def test_mask_equals_subset_and_duplicates_drop_out():
    rng = np.random.default_rng(6)
    x = _subspace(rng, N, 3, D)
    mask = rng.uniform(size=N) > 0.3
    assert float(twonn(x, mask)) == pytest.approx(float(twonn(x[mask])), rel=1e-12)
    assert float(gride(x, n1=2, mask=mask).dimension) == pytest.approx(
        float(gride(x[mask], n1=2).dimension), rel=1e-12)
    # (..., D) points with a (...,) mask, as the cosine metrics take them
    assert float(twonn(x.reshape(4, N // 4, D), mask.reshape(4, N // 4))) == pytest.approx(
        float(twonn(x[mask])), rel=1e-12)
    # A duplicated point is counted once: the estimate is that of the points without the copy.
    dup = np.concatenate([x, x[:1]])
    assert float(gride(dup, n1=1, n2=2).dimension) == pytest.approx(
        float(gride(x, n1=1, n2=2).dimension), rel=1e-12)


def test_layer_dimensions_equal_the_two_estimators_with_masks_and_small_clouds():
    rng = np.random.default_rng(8)
    x = _subspace(rng, N, 4, D, offset=3.0)
    mask = rng.uniform(size=N) > 0.2
    both = jax.jit(metrics.layer_dimensions)
    for m in (None, mask):
        got = both(x, m)
        assert float(got["twonn_dimension"]) == pytest.approx(float(twonn(x, m)), rel=1e-12)
        assert float(got["gride_dimension"]) == pytest.approx(
            float(gride(x, n1=8, n2=16, mask=m).dimension), rel=1e-12)
    small = both(x[:10])  # GRIDE (8, 16) needs 17 points, TwoNN 3
    assert np.isnan(small["gride_dimension"]) and float(small["twonn_dimension"]) == pytest.approx(
        float(twonn(x[:10])), rel=1e-12)
    assert all(np.isnan(v) for v in both(x[:2]).values())


def test_gride_bisection_edges():
    # every ratio 1 (no information about d): the root lies above the range → +inf
    d, _ = metrics.gride_from_ratios(jnp.zeros(10), 1, 2)
    assert float(d) == np.inf
    d, err = metrics.gride_from_ratios(jnp.full(10, 1e-30), 2, 4)
    assert float(d) == np.inf
    # weights select the ratios that count
    log_mu = jnp.asarray([0.1, 0.2, 0.3, 50.0])
    d_w, _ = metrics.gride_from_ratios(log_mu, 1, 2, jnp.asarray([1, 1, 1, 0]))
    assert float(d_w) == pytest.approx(3 / 0.6, rel=1e-12)


def test_jit_and_vmap_equal_eager_and_loop():
    rng = np.random.default_rng(7)
    clouds = np.stack([_subspace(rng, 60, 2, 5) for _ in range(3)])
    batched = jax.jit(jax.vmap(lambda c: metrics.twonn_dimension(c, block_size=64)))(clouds)
    for i in range(3):
        assert float(batched[i]) == pytest.approx(float(twonn(clouds[i])), rel=1e-12)
    assert float(metrics.twonn_dimension(clouds[0])) == pytest.approx(float(twonn(clouds[0])),
                                                                      rel=1e-12)
    layers = jax.jit(jax.vmap(lambda c: metrics.gride_scaling(c, max_rank=8)))(clouds)
    for i in range(3):
        np.testing.assert_allclose(layers.dimension[i], scaling(clouds[i], max_rank=8).dimension,
                                   rtol=1e-12)


def test_argument_errors():
    x = np.random.default_rng(8).normal(size=(20, 3))
    with pytest.raises(ValueError, match="fraction"):
        metrics.twonn_dimension(x, fraction=1.0)
    with pytest.raises(ValueError, match="n1 < n2"):
        metrics.gride_dimension(x, n1=2, n2=2)
    with pytest.raises(ValueError, match="mask has"):
        metrics.twonn_dimension(x, np.ones(7, bool))
    with pytest.raises(ValueError, match="max_rank"):
        metrics.gride_scaling(x[:2])
