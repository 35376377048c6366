"""Statistics over independent units: Spearman's exact p at |ρ| = 1, Student-t intervals over
seeds (closed form and coverage), and the aggregation of several seeds' analyses."""
import itertools
import math

import numpy as np
import pytest
from scipy import stats

from anisotropy_jax.config import ConfigError
from anisotropy_jax.metrics import correlation
from anisotropy_jax.studies.train import seeds


def test_spearman_exact_p_at_rho_one_equals_the_permutation_count():
    x = np.array([0.3, 0.1, 0.9, 0.5, 0.7])
    got = correlation.spearman(x, 2 * x + 1)
    # Brute force: the share of the 5! orderings of y whose |ρ| reaches the observed 1.
    rhos = [stats.spearmanr(x, np.array(p)).statistic for p in itertools.permutations(x)]
    want = np.mean(np.abs(rhos) >= 1 - 1e-12)
    assert got["rho"] == pytest.approx(1.0) and got["p"] == pytest.approx(want)
    assert want == pytest.approx(2 / math.factorial(5))
    assert got["p_method"] == correlation.EXACT_P_METHOD
    assert correlation.spearman(x, -x)["p"] == pytest.approx(2 / 120)
    # Below |ρ| = 1, or with ties, scipy's approximation is kept and labelled.
    y = np.array([0.2, 0.1, 0.5, 0.9, 0.7])
    got = correlation.spearman(x, y)
    assert got["p"] == pytest.approx(stats.spearmanr(x, y).pvalue)
    assert got["p_method"] == correlation.SCIPY_P_METHOD
    tied = correlation.spearman([1, 1, 2, 3], [1, 1, 2, 3])
    assert tied["p_method"] == correlation.SCIPY_P_METHOD
    assert correlation.drift_anisotropy_correlation(x, x)["spearman_p"] == pytest.approx(2 / 120)


def test_t_interval_closed_form_and_coverage():
    got = correlation.t_interval([1.0, 2.0, 3.0])
    half = stats.t.ppf(0.975, 2) * 1.0 / math.sqrt(3)  # s = 1
    assert (got["mean"], got["low"], got["high"], got["n"]) == pytest.approx(
        (2.0, 2.0 - half, 2.0 + half, 3))
    # Coverage of the true mean for normal samples of 3: 95% within Monte-Carlo error (5σ).
    draws = np.random.default_rng(0).normal(1.5, 2.0, size=(3, 20000))
    ci = correlation.t_interval(draws, axis=0)
    coverage = np.mean((ci["low"] <= 1.5) & (1.5 <= ci["high"]))
    assert abs(coverage - 0.95) < 5 * math.sqrt(0.95 * 0.05 / 20000), coverage
    with pytest.raises(ValueError, match="at least 2"):
        correlation.t_interval([1.0])
    test = correlation.one_sample_t_test([1.0, 2.0, 3.0])
    assert test["t"] == pytest.approx(2.0 / (1.0 / math.sqrt(3)))


def _run(seed, offset, steps=(0, 1, 4)):
    s = len(steps)
    growth = np.arange(s, dtype=float)[:, None, None] * np.ones((s, 2, 3))
    heads = {"attention_entropy_normalized": 1.0 - 0.1 * growth - offset,
             "key_term_std": growth + offset,
             "mean_query_key_cosine": -(0.1 * growth + offset)}
    return {"config": {"train": {"seed": seed}}, "steps": list(steps), "heads": heads,
            "layers": {"cross_sequence_cosine": np.full((s, 4), 0.5 + offset)},
            "embeddings": {"input_centered": np.full(s, 0.9), "output_centered": np.full(s, 0.8)},
            "correlation": {"units": "heads", "n": 6,
                            "key_term_std": {"rho": [np.nan, -1.0, -0.5 - offset], "p": [1] * 3}},
            "training": {"val_loss": [[st, 5.0 - st - offset] for st in steps]}}


def test_aggregate_over_seeds():
    offsets = [0.0, 0.1, 0.3]
    summary = seeds.aggregate([_run(i, o) for i, o in enumerate(offsets)])
    assert summary["seeds"] == [0, 1, 2] and summary["steps"] == [0, 1, 4]
    q = summary["quantities"]
    want = correlation.t_interval(np.array(offsets)[:, None] + np.arange(3.0)[None], axis=0)
    for key in ("mean", "low", "high"):
        np.testing.assert_allclose(q["heads_mean/key_term_std"][key], want[key])
    np.testing.assert_allclose(q["heads_mean/abs_mean_query_key_cosine"]["mean"],
                               np.mean(offsets) + 0.1 * np.arange(3))  # |cos|, not cos
    np.testing.assert_allclose(q["intermediate_cross_sequence_cosine"]["mean"],
                               0.5 + np.mean(offsets))
    np.testing.assert_allclose(q["val_loss"]["mean"], 5.0 - np.array([0, 1, 4]) - np.mean(offsets))
    # The change first → last is the same (+2) in every seed: zero spread, interval collapses.
    change = summary["changes_first_to_last"]["heads_mean/key_term_std"]
    assert change["mean"] == pytest.approx(2.0) and change["high"] == pytest.approx(2.0)
    assert "spearman_across_heads/key_term_std" not in summary["changes_first_to_last"]  # NaN
    table = seeds.format_table(summary)
    assert "| heads_mean/key_term_std | 0.133 [" in table and "3 seeds" in table
    with pytest.raises(ValueError, match="seed 1 has checkpoints"):
        seeds.aggregate([_run(0, 0.0), _run(1, 0.0, steps=(0, 2, 4))])
    with pytest.raises(ValueError, match="at least 2"):
        seeds.aggregate([_run(0, 0.0)])


def test_a_summary_whose_seeds_stay_at_ln_v_says_not_testable():
    """The rule of studies.training.learned over seeds: a recorded final validation loss at
    ln 256 (random bytes: nothing to learn) in one seed makes the summary "not testable", named
    first in what the seeds study prints; seeds that learned print the table alone."""
    from anisotropy_jax.studies.training import learned

    def run(seed, final):
        doc = _run(seed, 0.0)
        doc["config"]["train"]["objective"] = "clm"
        doc["training"]["val_loss"] = [[0, 5.6], [1, 5.58], [4, final]]
        return doc

    stuck = seeds.aggregate([run(0, 2.5), run(1, math.log(256))])
    assert not stuck["learning"]["learned"]
    assert stuck["learning"]["final_loss"] == pytest.approx([2.5, math.log(256)])
    note = stuck["learning"]["note"]
    assert note.startswith("the model did not learn: final validation loss seed 1: 5.55 is not "
                           "below 4.99 nats = (1 − 0.1)·ln 256"), note
    printed = seeds.format_summary(stuck)
    assert printed.splitlines()[0] == f"not testable: {note}"
    assert printed.endswith(seeds.format_table(stuck))
    fine = seeds.aggregate([run(0, 2.5), run(1, 2.6)])
    assert fine["learning"]["learned"] and fine["learning"]["note"] == ""
    assert seeds.format_summary(fine) == seeds.format_table(fine)
    # The threshold itself does not pass; no recorded loss does not either.
    edge = learned.threshold(257)
    assert not learned.check([edge], 257)["learned"] and learned.check([edge - 1e-9], 257)["learned"]
    assert not learned.check([], 256)["learned"] and "none recorded" in learned.check([], 256)["note"]
    assert not learned.check([float("nan")], 256)["learned"]
    assert learned.threshold(256) == pytest.approx(0.9 * math.log(256))


def _intervention_run(seed, rng, steps=(0, 2, 8)):
    """A seed's results.json with the intervention's deltas and the correlations of the new
    analysis (random per-head values: the aggregation must follow them exactly)."""
    s = len(steps)
    heads = {f"delta_{stat}_{removal}": rng.normal(size=(s, 2, 3))
             for stat in ("entropy", "agreement", "max")
             for removal in ("key_term", "control", "shared_control")}
    corr = {"units": "heads", "n": 6,
            "key_term_std": {"rho": rng.uniform(-0.99, 0.99, s), "p": [1] * s},
            "partial_key_term_given_logit_spread": {"rho": rng.uniform(-0.99, 0.99, s),
                                                    "p": [1] * s, "df": 2}}
    return {"config": {"train": {"seed": seed}}, "steps": list(steps), "heads": heads,
            "layers": {"cross_sequence_cosine": np.full((s, 4), 0.5)},
            "embeddings": {"input_centered": np.full(s, 0.9), "output_centered": np.full(s, 0.8)},
            "correlation": corr, "training": {"val_loss": [[st, 1.0] for st in steps]}}


def test_aggregate_gives_intervention_contrasts_and_fisher_z_intervals_for_correlations():
    rng = np.random.default_rng(0)
    runs = [_intervention_run(i, rng) for i in range(5)]
    summary = seeds.aggregate(runs)
    q, changes = summary["quantities"], summary["changes_first_to_last"]
    assert "Fisher" in summary["correlation_interval"]
    for stat in ("entropy", "agreement", "max"):
        for control in ("control", "shared_control"):
            # Per seed and checkpoint: the mean over the 6 heads of Δ key term − Δ control.
            per_seed = np.array([[np.mean(r["heads"][f"delta_{stat}_key_term"][i]
                                          - r["heads"][f"delta_{stat}_{control}"][i])
                                  for i in range(3)] for r in runs])
            got = q[f"heads_mean/delta_{stat}_key_term_minus_{control}"]
            np.testing.assert_allclose(got["per_seed"], per_seed, rtol=1e-12)
            want = correlation.t_interval(per_seed, axis=0)
            for key in ("mean", "low", "high"):
                np.testing.assert_allclose(got[key], want[key], rtol=1e-12)
            assert got["interval"] == "student_t"
        assert f"heads_mean/delta_{stat}_control" in q
    for name, key in (("spearman_across_heads/key_term_std", "key_term_std"),
                      ("partial_within_layers/key_term_given_logit_spread",
                       "partial_key_term_given_logit_spread")):
        rhos = np.array([r["correlation"][key]["rho"] for r in runs])  # (5 seeds, 3 steps)
        z = np.arctanh(rhos)
        ci = correlation.t_interval(z, axis=0)
        got = q[name]
        assert got["interval"] == "fisher_z"
        np.testing.assert_allclose(got["mean"], np.tanh(ci["mean"]), rtol=1e-12)
        np.testing.assert_allclose(got["low"], np.tanh(ci["low"]), rtol=1e-12)
        np.testing.assert_allclose(got["high"], np.tanh(ci["high"]), rtol=1e-12)
        assert np.all(got["low"] > -1) and np.all(got["high"] < 1)
        change = changes[name]  # the change of z, first → last, tested over seeds
        assert change["scale"] == "fisher_z"
        np.testing.assert_allclose(change["per_seed"], z[:, -1] - z[:, 0], rtol=1e-12)
    table = seeds.format_table(summary)
    assert "| partial_within_layers/key_term_given_logit_spread |" in table and "(Δz)" in table


def test_deficit_shares_average_the_defined_heads_and_keep_the_per_head_arrays():
    rng = np.random.default_rng(1)
    runs = [_intervention_run(i, rng) for i in range(3)]
    for run in runs:
        shares = rng.uniform(-0.2, 1.0, size=(2, 3, 2, 3))
        shares[0, 0] = np.nan  # step 0: uniform attention, every head undefined
        shares[:, 1, 0, :2] = np.nan  # two heads undefined at step 2
        run["heads"].update(entropy_deficit_share_key_term=shares[0],
                            entropy_deficit_share_matched_control=shares[1],
                            attention_entropy_normalized=rng.uniform(0.5, 1.0, (3, 2, 3)))
    summary = seeds.aggregate(runs)
    q = summary["quantities"]
    for i, run in enumerate(runs):
        diff = (run["heads"]["entropy_deficit_share_key_term"]
                - run["heads"]["entropy_deficit_share_matched_control"]).reshape(3, -1)
        want = [np.nan, np.mean(diff[1, 2:]), np.mean(diff[2])]
        np.testing.assert_allclose(
            q["heads_mean/entropy_deficit_share_key_term_minus_matched_control"]["per_seed"][i],
            want, rtol=1e-12)
        np.testing.assert_allclose(
            q["heads_fraction/entropy_deficit_share_undefined"]["per_seed"][i], [1, 2 / 6, 0])
    per_head = summary["per_head"]
    assert set(per_head) == {"entropy_deficit_share_key_term", "attention_entropy_normalized",
                             "entropy_deficit_share_matched_control"}
    assert per_head["entropy_deficit_share_key_term"].shape == (3, 3, 2, 3)  # seeds, S, layers, H
    np.testing.assert_array_equal(per_head["attention_entropy_normalized"][1],
                                  runs[1]["heads"]["attention_entropy_normalized"])


def test_the_committed_seeded_results_still_aggregate():
    import json
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent / "docs" / "results" / "train"
    for objective in ("clm_small", "mlm_small"):
        docs = [json.loads(p.read_text()) for p in sorted((root / objective).glob(
            "seed_*/results.json"))]
        assert len(docs) >= 3, objective
        summary = seeds.aggregate(docs)
        committed = json.loads((root / objective / "results.json").read_text())
        # The Student-t quantities are unchanged; the correlations now have Fisher-z intervals.
        for name, value in committed["quantities"].items():
            np.testing.assert_allclose(summary["quantities"][name]["per_seed"],
                                       value["per_seed"], rtol=1e-12, err_msg=name)
            if not name.startswith("spearman"):
                np.testing.assert_allclose(summary["quantities"][name]["low"], value["low"],
                                           rtol=1e-9, err_msg=name)
        rho = summary["quantities"]["spearman_across_heads/key_term_std"]
        assert np.all(rho["low"][1:] >= -1) and np.all(rho["high"][1:] <= 1)


@pytest.mark.parametrize("bad", [["0"], ["0", "0"], ["-1", "2"], ["a", "b"]])
def test_parse_seeds_names_the_flag(bad):
    with pytest.raises(ConfigError, match="^seeds: "):
        seeds.parse_seeds(bad)


def test_the_seed_figure_clips_each_interval_to_its_metric_range():
    from anisotropy_jax.plotting import dynamics as plots

    assert plots.metric_range("spearman_across_heads/key_term_std") == (-1.0, 1.0)
    assert plots.metric_range("heads_mean/attention_entropy_normalized") == (0.0, 1.0)
    assert plots.metric_range("intermediate_cross_sequence_cosine") == (-1.0, 1.0)
    assert plots.metric_range("heads_mean/key_term_std") == (0.0, np.inf)
    assert plots.metric_range("val_loss") == (0.0, np.inf)
    assert plots.metric_range("partial_within_layers/key_term_given_logit_spread") == (-1.0, 1.0)
    assert plots.metric_range("heads_mean/delta_entropy_key_term") == (-np.inf, np.inf)
    assert plots.metric_range("heads_mean/delta_max_key_term_minus_control") == (-np.inf, np.inf)
    assert plots.metric_range("heads_mean/key_term_var") == (0.0, np.inf)
    assert plots.metric_range("heads_mean/key_query_covariance") == (-np.inf, np.inf)
    steps = [0, 1, 4]
    wide = {"per_seed": [[0.9, 0.5, -0.9], [1.0, 0.6, -1.0]], "mean": [0.95, 0.55, -0.95],
            "low": [0.2, -0.4, -3.1], "high": [1.7, 1.5, 0.8]}
    summary = {"steps": steps, "seeds": [0, 1], "quantities": {
        "spearman_across_heads/key_term_std": wide,
        "heads_mean/key_term_std": dict(wide, low=[-0.5, 0.1, 0.2], high=[0.4, 0.9, 9.0])}}
    fig = plots.seeds_figure(summary)
    for ax, (low, high) in zip(fig.axes, ((-1.0, 1.0), (0.0, np.inf))):
        (band,) = ax.collections
        y = band.get_paths()[0].vertices[:, 1]
        assert y.min() >= low and y.max() <= high, (low, high, y)
    band_y = fig.axes[0].collections[0].get_paths()[0].vertices[:, 1]
    assert band_y.max() == 1.0 and band_y.min() == -1.0  # clipped, not dropped


def test_the_seeds_table_prints_no_nan_and_says_why_a_value_is_undefined():
    rng = np.random.default_rng(2)
    runs = [_intervention_run(i, rng) for i in range(3)]
    for run in runs:
        shares = rng.uniform(0.0, 1.0, size=(2, 3, 2, 3))
        shares[:, 0] = np.nan  # step 0: uniform attention, no head has a deficit to share
        run["heads"].update(entropy_deficit_share_key_term=shares[0],
                            entropy_deficit_share_matched_control=shares[1])
        run["correlation"]["partial_query_specific_given_logit_spread"] = {
            "rho": [np.nan] * 3, "p": [np.nan] * 3, "df": 2}  # undefined at every step
    summary = seeds.aggregate(runs)
    table = seeds.format_table(summary)
    assert "nan" not in table.lower() and "n/a" not in table
    row = next(line for line in table.splitlines()
               if line.startswith("| heads_mean/entropy_deficit_share_key_term |"))
    assert row.split(" | ")[1] == seeds.UNDEFINED and row.split(" | ")[3] == seeds.UNDEFINED
    note = next(line for line in table.splitlines() if "entropy_deficit_share_key_term (step 0)"
                in line)
    assert note.startswith(seeds.UNDEFINED) and "no head has an entropy deficit" in note
    assert "| partial_within_layers/query_specific_given_logit_spread |" not in table
    assert ("Not shown: partial_within_layers/query_specific_given_logit_spread, undefined at "
            "every checkpoint") in table
    assert "the t-test over seeds is undefined" in table  # a change the same in every seed
    changes = summary["changes_first_to_last"]
    defined = {name: q for name, q in summary["quantities"].items()
               if name in changes and np.isfinite(changes[name]["t_test_over_seeds"]["p"])}
    clean = seeds.format_table({**summary, "quantities": defined})  # nothing undefined: no notes
    assert seeds.UNDEFINED not in clean and clean.count("\n") == len(defined) + 1


def test_a_training_report_marks_an_undefined_correlation_and_says_why():
    from anisotropy_jax.studies.train import report

    doc = {"steps": [0, 10], "correlation": {"n": 6, "key_term_std": {"rho": [0.5, -0.25]},
                                             "partial_key_term_given_logit_spread":
                                                 {"rho": ["nan", 0.1]}}}
    text = report.format_report(doc)
    assert "nan" not in text and f"0:{report.UNDEFINED} 10:+0.10" in text
    assert text.splitlines()[-1] == report.UNDEFINED_NOTE
    doc["correlation"]["partial_key_term_given_logit_spread"]["rho"] = [0.2, 0.1]
    assert report.UNDEFINED_NOTE not in report.format_report(doc)
