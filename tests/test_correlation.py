"""metrics.correlation: exact permutation p-values (against itertools over scipy's ρ), Fisher-z
intervals (closed form, coverage, bounded), partial correlations (against the closed form and the
inverse correlation matrix)."""
import itertools
import math

import numpy as np
import pytest
from scipy import stats

from anisotropy_jax.metrics import correlation


def _brute_p(x, y, statistic):
    observed = abs(statistic(x, y))
    values = [abs(statistic(x, np.array(p))) for p in itertools.permutations(y)]
    return np.mean(np.array(values) >= observed - 1e-12)


@pytest.mark.parametrize("method", ["spearman", "pearson"])
def test_exact_permutation_p_equals_brute_force(method):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(6), rng.standard_normal(6)
    y = y + 0.8 * x
    fn = {"spearman": lambda a, b: stats.spearmanr(a, b).statistic,
          "pearson": lambda a, b: stats.pearsonr(a, b).statistic}[method]
    got = correlation.exact_permutation_p(x, y, method)
    assert got["rho"] == pytest.approx(fn(x, y), abs=1e-12)
    assert got["p"] == pytest.approx(_brute_p(x, y, fn), abs=1e-12)
    assert got["n"] == 6 and "exact" in got["p_method"]
    # Ties: average ranks, as scipy's Spearman ρ; tied orderings of the statistic all count.
    tied_x, tied_y = np.array([1.0, 1.0, 2.0, 3.0, 4.0]), np.array([2.0, 1.0, 3.0, 3.0, 4.0])
    assert correlation.exact_permutation_p(tied_x, tied_y, method)["p"] == pytest.approx(
        _brute_p(tied_x, tied_y, fn), abs=1e-12)


def test_exact_permutation_p_of_the_reviews_example_and_at_rho_one():
    # Spearman ρ = 0.929 at n = 7 (one adjacent pair swapped … twice): Σd² = 4, and 17 of the 5040
    # orderings have Σd² ≤ 4 (identity, 6 adjacent swaps, 10 pairs of disjoint adjacent swaps),
    # 17 more the mirror image: p = 34/5040 = 0.0067 (the review's value).
    x = np.arange(7.0)
    y = np.array([1.0, 0.0, 2.0, 3.0, 4.0, 6.0, 5.0])
    got = correlation.exact_permutation_p(x, y)
    assert got["rho"] == pytest.approx(0.9285714, abs=1e-7)
    assert got["p"] == pytest.approx(34 / 5040) and round(got["p"], 4) == 0.0067
    assert correlation.exact_permutation_p(x, -x)["p"] == pytest.approx(2 / math.factorial(7))
    # n = 10 enumerates all 10! orderings; ρ = 1 is reached by 2 of them.
    z = np.random.default_rng(1).standard_normal(10)
    assert correlation.exact_permutation_p(z, 3 * z + 1)["p"] == pytest.approx(
        2 / math.factorial(10))
    with pytest.raises(ValueError, match="n <= 10"):
        correlation.exact_permutation_p(np.arange(11.0), np.arange(11.0))
    with pytest.raises(ValueError, match="method"):
        correlation.exact_permutation_p(x, y, "kendall")
    with pytest.raises(ValueError, match="constant"):
        correlation.exact_permutation_p(x, np.ones(7))


def test_fisher_z_interval_closed_form_bounds_and_coverage():
    got = correlation.fisher_z_interval(0.5, 19)
    half = stats.norm.ppf(0.975) / 4.0  # 1/√(19 − 3)
    assert got["low"] == pytest.approx(math.tanh(math.atanh(0.5) - half))
    assert got["high"] == pytest.approx(math.tanh(math.atanh(0.5) + half))
    partial = correlation.fisher_z_interval(0.5, 19, num_covariates=7)
    assert partial["high"] - partial["low"] > got["high"] - got["low"]  # 1/√9: wider
    edge = correlation.fisher_z_interval(-0.99, 5)
    assert -1.0 < edge["low"] < edge["high"] < 1.0
    with pytest.raises(ValueError, match="n - 3"):
        correlation.fisher_z_interval(0.5, 4, num_covariates=1)
    # Coverage for bivariate normal samples of n = 20, ρ = 0.6: 95% within 5σ of Monte Carlo.
    rng = np.random.default_rng(2)
    trials, hits = 4000, 0
    for _ in range(trials):
        a = rng.standard_normal(20)
        b = 0.6 * a + 0.8 * rng.standard_normal(20)
        ci = correlation.fisher_z_interval(np.corrcoef(a, b)[0, 1], 20)
        hits += ci["low"] <= 0.6 <= ci["high"]
    assert abs(hits / trials - 0.95) < 5 * math.sqrt(0.95 * 0.05 / trials), hits / trials


def test_mean_correlation_interval_averages_in_z_and_stays_inside_minus_one_one():
    rhos = np.array([[-0.9, 0.1], [-0.99, 0.2], [-0.5, 0.3]])  # 3 seeds × 2 checkpoints
    got = correlation.mean_correlation_interval(rhos, axis=0)
    z = np.arctanh(rhos)
    want = correlation.t_interval(z, axis=0)
    np.testing.assert_allclose(got["mean"], np.tanh(want["mean"]))
    np.testing.assert_allclose(got["low"], np.tanh(want["low"]))
    np.testing.assert_allclose(got["high"], np.tanh(want["high"]))
    assert np.all(got["low"] > -1) and np.all(got["high"] < 1)
    # A Student-t interval on ρ itself passes −1 here; the z interval cannot.
    assert correlation.t_interval(rhos[:, 0])["low"] < -1 < got["low"][0]
    ones = correlation.mean_correlation_interval([-1.0, -1.0, -0.9])
    assert np.isfinite(ones["mean_z"]) and -1 < ones["mean"] < -0.9
    assert np.isnan(correlation.mean_correlation_interval([np.nan, 0.1, 0.2])["mean"])


def test_partial_correlation_equals_the_closed_forms():
    rng = np.random.default_rng(3)
    n = 30
    z1, z2 = rng.standard_normal(n), rng.standard_normal(n)
    x = z1 + 0.5 * z2 + rng.standard_normal(n)
    y = z1 - 0.3 * z2 + 0.5 * x + rng.standard_normal(n)
    # One covariate: (r_xy − r_xz r_yz) / √((1 − r_xz²)(1 − r_yz²)).
    r = np.corrcoef([x, y, z1])
    want = (r[0, 1] - r[0, 2] * r[1, 2]) / math.sqrt((1 - r[0, 2] ** 2) * (1 - r[1, 2] ** 2))
    got = correlation.partial_correlation(x, y, z1)
    assert got["rho"] == pytest.approx(want, abs=1e-12)
    assert got["df"] == n - 3 and got["num_covariates"] == 1
    t = want * math.sqrt((n - 3) / (1 - want ** 2))
    assert got["p"] == pytest.approx(2 * stats.t.sf(abs(t), n - 3))
    # Two covariates: −P_xy / √(P_xx P_yy) with P the inverse correlation matrix.
    inverse = np.linalg.inv(np.corrcoef([x, y, z1, z2]))
    want = -inverse[0, 1] / math.sqrt(inverse[0, 0] * inverse[1, 1])
    got = correlation.partial_correlation(x, y, np.stack([z1, z2], axis=1))
    assert got["rho"] == pytest.approx(want, abs=1e-12) and got["df"] == n - 4
    # A redundant covariate column (a copy) does not count twice.
    assert correlation.partial_correlation(x, y, np.stack([z1, z1], 1))["num_covariates"] == 1
    # y explained exactly by the covariates: no partial correlation (not rounding noise's ρ).
    explained = correlation.partial_correlation(x, 2 * z1 - z2 + 1, np.stack([z1, z2], 1))
    assert math.isnan(explained["rho"]) and explained["explained"] == ("y",)
    assert got["explained"] == ()
    with pytest.raises(ValueError, match="n - 2"):
        correlation.partial_correlation(x[:4], y[:4], np.stack([z1, z2], 1)[:4])


def test_t_quantile_and_cdf_equal_scipy_stats_and_the_tables():
    for df in (1, 2, 3, 4, 9, 10, 29, 200, 999):
        for p in (0.001, 0.025, 0.3, 0.5, 0.95, 0.975, 0.995, 0.999):
            assert correlation.t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-12,
                                                                  abs=1e-12)
        for p in (1e-6, 1 - 1e-6):
            assert correlation.t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-9)
        for t in (-30.0, -2.0, -0.3, 0.0, 0.1, 1.5, 50.0):
            assert correlation.t_cdf(t, df) == pytest.approx(stats.t.cdf(t, df), abs=1e-13)
    # the printed tables: t_{0.975} at 1, 2, 4 degrees of freedom
    assert [round(correlation.t_quantile(0.975, df), 3) for df in (1, 2, 4)] == [12.706, 4.303,
                                                                                 2.776]
    with pytest.raises(ValueError, match="integer"):
        correlation.t_cdf(0.0, 2.5)
    with pytest.raises(ValueError, match="p:"):
        correlation.t_quantile(1.0, 3)
