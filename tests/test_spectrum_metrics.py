"""RankMe and α-ReQ (metrics.rankme, metrics.alpha_req, and as layer metrics) against float64
numpy references written from the papers' definitions, on fresh random clouds and on planted
spectra whose RankMe and α are known in closed form."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from anisotropy_jax import metrics


def rankme_reference(x_NxD, eps=1e-7):
    """Garrido et al. 2023, eqs. 1-2: p_k = σ_k / ‖σ‖₁ + ε over the min(N, D) singular values."""
    s = np.linalg.svd(np.asarray(x_NxD, np.float64), compute_uv=False)
    p = s / s.sum() + eps
    return float(np.exp(-(p * np.log(p)).sum()))


def alpha_req_reference(x_NxD, first, last, floor=1e-6):
    """Agrawal et al. 2022: minus the least-squares slope of log λ_i on log i, λ the eigenvalues
    of the sample covariance (descending), over ranks first…last (1-based) above floor·λ₁."""
    x = np.asarray(x_NxD, np.float64)
    lam = np.sort(np.linalg.eigvalsh(np.cov(x, rowvar=False)))[::-1]
    ranks = np.arange(first, last + 1)
    keep = lam[ranks - 1] > floor * lam[0]
    slope, _ = np.polyfit(np.log(ranks[keep]), np.log(lam[ranks - 1][keep]), 1)
    return float(-slope)


def planted(n, d, spectrum, seed):
    """N points whose sample covariance has exactly the eigenvalues `spectrum` (D,): orthonormal
    directions orthogonal to the ones vector, scaled, in a random basis, plus an offset."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.normal(size=(n, d)) - 0.0)
    u -= u.mean(0)  # orthogonal to the ones vector: the columns are centred
    u, _ = np.linalg.qr(u)
    basis, _ = np.linalg.qr(rng.normal(size=(d, d)))
    x = u * np.sqrt(np.asarray(spectrum) * (n - 1)) @ basis.T
    return x + rng.normal(size=d)  # an offset: the covariance does not see it


# Both metrics as the studies compute them (`metrics.layer_metrics` of one (1, N, D) state), one
# compiled program per shape.
_BOTH = jax.jit(lambda x: metrics.layer_metrics(x[None], names=("rankme", "alpha_req")))


def test_both_match_the_references_on_fresh_random_clouds():
    rng = np.random.default_rng()  # fresh every run: the references are exact, any input will do
    # N > D (α over ranks 11-32); N − 1 < D (ranks 1-19: the sample's rank; min(N, D) singular
    # values for RankMe)
    for n, d in ((60, 32), (20, 64)):
        x = rng.normal(size=(n, d)) * np.linspace(3.0, 0.1, d) + rng.normal(size=d)
        got = _BOTH(jnp.asarray(x, jnp.float32))
        rank_me, alpha = float(got["rankme"]), float(got["alpha_req"])
        assert rank_me == pytest.approx(rankme_reference(x), rel=2e-4)
        first, last = metrics.alpha_req_ranks(n, d)
        assert alpha == pytest.approx(alpha_req_reference(x, first, last), rel=2e-3, abs=2e-3)
        # RankMe is the effective rank with ε: the ε is what separates them
        assert rank_me != pytest.approx(float(metrics.effective_rank(jnp.asarray(x))), rel=1e-6)
    assert metrics.alpha_req_ranks(20, 64) == (1, 19) and metrics.alpha_req_ranks(60, 32) == (11, 32)
    assert {"rankme", "alpha_req"} <= set(metrics.LAYER_METRICS)


def test_rankme_of_a_planted_spectrum():
    sigma = np.array([4.0, 2.0, 1.0, 1.0, 0.5, 0.0])  # one zero singular value
    rng = np.random.default_rng(2)
    u, _ = np.linalg.qr(rng.normal(size=(50, 6)))
    v, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    x = u * sigma @ v.T
    p = sigma / sigma.sum() + metrics.RANKME_EPS
    expected = np.exp(-(p * np.log(p)).sum())
    assert float(metrics.rankme(jnp.asarray(x, jnp.float32))) == pytest.approx(expected, rel=1e-4)
    assert 3.5 < expected < 4.5  # five non-zero values, unequal


def test_alpha_req_recovers_planted_power_laws_over_its_ranks_only():
    """Exact power laws of α = 0.8 and 1.7, and one that bends at rank 10 (α 0.2 before, 1.5
    after): the fit over ranks 11-100 finds 0.8, 1.7 and the tail's 1.5 (a fit from rank 1
    would not)."""
    n, d = 400, 128
    ranks = np.arange(1, d + 1)
    spectra = (ranks ** -0.8, ranks ** -1.7,
               np.where(ranks <= 10, 50 * 10.0 ** -0.2 * ranks ** -0.2, ranks ** -1.5))
    x = np.stack([planted(n, d, s, seed=3 + i) for i, s in enumerate(spectra)])
    assert metrics.alpha_req_ranks(n, d) == (11, 100)
    got = jax.jit(jax.vmap(metrics.alpha_req))(jnp.asarray(x, jnp.float32))
    np.testing.assert_allclose(got, [0.8, 1.7, 1.5], atol=2e-3)
    assert [alpha_req_reference(c, 11, 100) for c in x] == pytest.approx([0.8, 1.7, 1.5],
                                                                        abs=1e-9)
    assert abs(alpha_req_reference(x[2], 1, 100) - 1.5) > 0.5


def _host(x):
    """Both metrics as the training studies compute them: the float32 state on the host, its
    spectrum in float64 (`metrics.spectrum_metrics`)."""
    return metrics.spectrum_metrics(np.asarray(x, np.float32))


def test_the_host_spectra_match_the_jax_metrics_on_fresh_random_clouds():
    """Tolerances: RankMe within a relative 2e-5 and α-ReQ within 1e-4 of `metrics.rankme` /
    `metrics.alpha_req` (float32 throughout), and within 1e-6 of the float64 references (the
    float32 input is the only difference)."""
    rng = np.random.default_rng()
    for shape in ((60, 32), (20, 64), (4, 30, 48)):  # N > D, N − 1 < D, a (B, L, D) state
        d = shape[-1]
        x = (rng.normal(size=shape) * np.linspace(3.0, 0.1, d) + rng.normal(size=d)).astype(
            np.float32)
        points = x.reshape(-1, d)
        got, x32 = _host(x), jnp.asarray(x)
        assert got["rankme"] == pytest.approx(float(metrics.rankme(x32)), rel=2e-5)
        assert got["rankme"] == pytest.approx(rankme_reference(points), rel=1e-6)
        assert got["alpha_req"] == pytest.approx(float(metrics.alpha_req(x32)), rel=1e-4, abs=1e-4)
        first, last = metrics.alpha_req_ranks(*points.shape)
        assert got["alpha_req"] == pytest.approx(alpha_req_reference(points, first, last),
                                                 rel=1e-6, abs=1e-6)


def test_the_host_spectra_of_planted_spectra_and_of_degenerate_states():
    """RankMe of singular values (4, 2, 1, 1, 0.5, 0) in closed form; α-ReQ of exact power laws
    (0.8 and 1.7 over ranks 11-100); an all-zero state: RankMe 0, α-ReQ undefined; a state with
    a NaN: both NaN."""
    sigma = np.array([4.0, 2.0, 1.0, 1.0, 0.5, 0.0])
    rng = np.random.default_rng(2)
    u, _ = np.linalg.qr(rng.normal(size=(50, 6)))
    v, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    p = sigma / sigma.sum() + metrics.RANKME_EPS
    assert _host(u * sigma @ v.T)["rankme"] == pytest.approx(np.exp(-(p * np.log(p)).sum()),
                                                             rel=1e-6)
    ranks = np.arange(1, 129)
    for alpha, seed in ((0.8, 3), (1.7, 4)):
        assert _host(planted(400, 128, ranks ** -alpha, seed))["alpha_req"] == pytest.approx(
            alpha, abs=1e-5)
    zeros = _host(np.zeros((10, 8)))
    assert zeros["rankme"] == 0.0 and np.isnan(zeros["alpha_req"])
    bad = np.ones((10, 8))
    bad[3, 2] = np.nan
    assert all(np.isnan(v) for v in _host(bad).values())
