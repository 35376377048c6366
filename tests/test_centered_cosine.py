"""metrics.centered_average_cosine against a float64 loop over pairs, the equal-norm identity that
makes ρ(drift, average cosine) = 1 a tautology (docs/SCIENCE.md, "Pretrained models"),
and the degenerate clouds."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from anisotropy_jax import metrics


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


def _pair_loop_centered(x_NxD, centre_D=None):
    """The definition, slowly: centre by the mean (or `centre_D`), then the mean cosine over all
    i ≠ j."""
    x = np.asarray(x_NxD, np.float64)
    c = x - (x.mean(axis=0) if centre_D is None else centre_D)
    n, total = len(c), 0.0
    for i in range(n):
        for j in range(n):
            if i != j:
                ni, nj = np.linalg.norm(c[i]), np.linalg.norm(c[j])
                total += 0.0 if ni == 0 or nj == 0 else float(c[i] @ c[j]) / (ni * nj)
    return total / (n * (n - 1))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_a_float64_pair_loop(seed):
    rng = np.random.default_rng(seed)
    # a shared offset plus anisotropic spread: the uncentred cosine is high, the centred is not
    x = rng.normal(size=(23, 6)) * rng.uniform(0.2, 3.0, size=6) + 4.0 * rng.normal(size=6)
    got = float(metrics.centered_average_cosine(jnp.asarray(x)))
    assert got == pytest.approx(_pair_loop_centered(x), abs=1e-12)
    assert float(metrics.average_cosine_similarity(jnp.asarray(x))) > 0.5 > abs(got)


def test_sequences_with_a_mask_match_the_loop_over_the_selected_vectors():
    rng = np.random.default_rng(3)
    x_BxLxD = rng.normal(size=(3, 5, 4)) + 2.0
    mask_BxL = rng.uniform(size=(3, 5)) < 0.6
    mask_BxL[0, :2] = True
    got = float(metrics.centered_average_cosine(jnp.asarray(x_BxLxD), jnp.asarray(mask_BxL)))
    assert got == pytest.approx(_pair_loop_centered(x_BxLxD[mask_BxL]), abs=1e-12)
    unmasked = float(metrics.centered_average_cosine(jnp.asarray(x_BxLxD)))
    assert unmasked == pytest.approx(_pair_loop_centered(x_BxLxD.reshape(-1, 4)), abs=1e-12)


def test_jit_float32_and_huge_values():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(17, 5)) + 3.0
    want = _pair_loop_centered(x)
    got32 = jax.jit(metrics.centered_average_cosine)(jnp.asarray(x, jnp.float32))
    assert got32.dtype == jnp.float32 and float(got32) == pytest.approx(want, abs=1e-5)
    # The mean's sum would overflow float32 unscaled (17 × 1e37 > 3.4e38); cosines are scale-free.
    huge = float(metrics.centered_average_cosine(jnp.asarray(x * 1e37, jnp.float32)))
    assert huge == pytest.approx(want, abs=1e-5)


def test_degenerate_clouds_are_finite():
    same = jnp.tile(jnp.asarray([[0.1, 0.7, -0.3]]), (6, 1))  # no spread: 0, not rounding noise
    assert float(metrics.centered_average_cosine(same)) == 0.0
    assert float(metrics.centered_average_cosine(jnp.zeros((4, 3)))) == 0.0
    # two vectors: centred they are opposite, cosine −1 = −1/(N − 1)
    assert float(metrics.centered_average_cosine(jnp.asarray([[1.0, 2.0], [3.0, 1.0]]))) == \
        pytest.approx(-1.0)
    with pytest.raises(ValueError, match="at least 2"):
        metrics.centered_average_cosine(jnp.ones((1, 3)))


def test_equal_norm_identity_and_the_centred_floor():
    """For unit vectors, avg cos = (N/(N−1))·‖mean of the unit vectors‖² − 1/(N−1): a function of
    the drift alone. Centred vectors of equal norm sit at the floor −1/(N − 1)."""
    rng = np.random.default_rng(5)
    for n, d, offset in ((9, 4, 0.0), (30, 8, 2.0), (50, 3, 5.0)):
        x = rng.normal(size=(n, d)) + offset * rng.normal(size=d)
        u = x / np.linalg.norm(x, axis=1, keepdims=True)
        mean_sq = float(np.sum(u.mean(axis=0) ** 2))
        identity = n / (n - 1) * mean_sq - 1 / (n - 1)
        assert float(metrics.average_cosine_similarity(jnp.asarray(u))) == pytest.approx(
            identity, abs=1e-12)
        # ±v pairs around a common offset m: centred they are ±v, all of norm 1
        v = u[: n // 2]
        pm = np.concatenate([v, -v]) + 3.0 * rng.normal(size=d)
        got = float(metrics.centered_average_cosine(jnp.asarray(pm)))
        assert got == pytest.approx(_pair_loop_centered(pm), abs=1e-12)
        assert got == pytest.approx(-1 / (len(pm) - 1), abs=1e-12)


def _with_a_massive_token(seed):
    """Sentence-like tokens, anisotropic around an offset, plus one token with one dimension
    ~1,000x the others' scale (a first-token outlier as in SmolLM2)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(19, 8)) + 0.5 * rng.normal(size=8)
    x[0, 3] = 1000.0
    return x


@pytest.mark.parametrize("seed", [5, 6])
def test_the_massive_token_free_and_median_centres_match_the_loop(seed):
    x = _with_a_massive_token(seed)
    a = np.abs(x)
    massive = a.max(axis=1) >= 100.0 * np.median(a)
    assert massive.tolist() == [True] + [False] * 18
    np.testing.assert_array_equal(metrics.massive_tokens(jnp.asarray(x)), massive)
    without = float(metrics.centered_average_cosine(jnp.asarray(x), centre="mean_without_massive"))
    assert without == pytest.approx(_pair_loop_centered(x, x[~massive].mean(axis=0)), abs=1e-12)
    median = float(metrics.centered_average_cosine(jnp.asarray(x), centre="median"))
    assert median == pytest.approx(_pair_loop_centered(x, np.median(x, axis=0)), abs=1e-12)
    # The artefact these centres remove: the mean, dragged by the one token, adds a shared
    # direction to all the others, and the "centred" cosine exceeds the raw one.
    raw = float(metrics.average_cosine_similarity(jnp.asarray(x)))
    assert float(metrics.centered_average_cosine(jnp.asarray(x))) > raw > without


def test_the_massive_rule_reads_only_the_masked_tokens_and_falls_back_when_all_are_massive():
    x = _with_a_massive_token(7)
    x_BxLxD = np.concatenate([x, np.full((5, 8), 1e6)]).reshape(4, 6, 8)  # 5 masked-out giants
    mask_BxL = np.arange(24).reshape(4, 6) < 19
    got = metrics.centered_average_cosine(jnp.asarray(x_BxLxD), jnp.asarray(mask_BxL),
                                          centre="mean_without_massive")
    want = metrics.centered_average_cosine(jnp.asarray(x), centre="mean_without_massive")
    assert float(got) == pytest.approx(float(want), abs=1e-12)
    every = np.random.default_rng(8).normal(size=(6, 300))
    every[:, 0] = 1000.0  # each token massive: the centre falls back to the mean of all
    assert metrics.massive_tokens(jnp.asarray(every)).all()
    assert float(metrics.centered_average_cosine(jnp.asarray(every), centre=(
        "mean_without_massive"))) == float(metrics.centered_average_cosine(jnp.asarray(every)))
    with pytest.raises(ValueError, match="centre"):
        metrics.centered_average_cosine(jnp.asarray(x), centre="mode")
