"""The outlier accounts' rules (studies/report/verdicts_outliers.py) on made-up grids whose answer
is known: each account holds where its prediction is built in and does not where the opposite
is; no claim where the positive control fails; the Welch interval against scipy's."""
import numpy as np
import pytest
from scipy import stats

from anisotropy_jax.studies.report import verdicts_outliers as V
from anisotropy_jax.studies.report.verdict import (FAILS, HOLDS, NOT_MEASURED, NOT_TESTABLE,
                                                    PARTLY)

STEPS = [0, 1, 2, 4, 8, 16]
SEEDS = 5


def _runs(seed0, **last):
    """Five runs: every metric rises linearly over the checkpoints from its step-0 value to
    `last[metric]` (± a seed jitter), so sink rate and max/median rise together."""
    rng = np.random.default_rng(seed0)
    start = {"cross_sequence_cosine": 0.1, "abs_cos_qk": 0.1, "kurtosis": 3.0,
             "massive_top_ratio": 5.0, "sink_rate": 0.0}
    runs = []
    for _ in range(SEEDS):
        series = {}
        for metric, first in start.items():
            end = last.get(metric, first) * (1 + 0.02 * rng.standard_normal())
            series[metric] = list(np.linspace(first, end, len(STEPS)))
        runs.append({"steps": STEPS, "series": series})
    return runs


OUTLIERS = dict(cross_sequence_cosine=0.6, abs_cos_qk=0.5, kurtosis=50.0, massive_top_ratio=400.0,
                sink_rate=0.8)
CLEAN = dict(cross_sequence_cosine=0.3, abs_cos_qk=0.3, kurtosis=4.0, massive_top_ratio=20.0,
             sink_rate=0.1)


def _holding_grid():
    """Every account's prediction built in: Adam's arms have the outliers, the rotation-free
    optimisers, SGD and the single/no-gain arms less anisotropy; post-LN: a flat sink rate."""
    by_arm = {"adamw": _runs(0, **OUTLIERS), "muon": _runs(1, **CLEAN),
              "adamw_rotated": _runs(2, **CLEAN), "sgd": _runs(3, **CLEAN),
              "single_gain": _runs(4, **CLEAN), "no_gain": _runs(5, **CLEAN),
              "post_ln": _runs(6, **OUTLIERS)}
    for run in by_arm["post_ln"]:  # the sink rate falls while max/median rises: ρ = −1
        run["series"]["sink_rate"] = list(np.linspace(0.9, 0.5, len(STEPS)))
    return {"shakespeare": by_arm, "bigram_backcopy": by_arm}


def test_welch_interval_equals_scipys():
    rng = np.random.default_rng(7)
    a, b = rng.normal(1.0, 0.3, 5), rng.normal(0.4, 0.9, 6)
    got = V.welch_interval(a, b)
    want = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert got["diff"] == pytest.approx(a.mean() - b.mean())
    assert (got["low"], got["high"]) == pytest.approx((want.low, want.high), rel=1e-12)


def test_every_account_holds_where_its_prediction_is_built_in():
    verdicts = V.all_verdicts(_holding_grid())
    assert {k: v["verdict"] for k, v in verdicts.items()} == dict.fromkeys(V.ACCOUNTS, HOLDS)
    assert verdicts["godey"]["sensitivity"]["control max/median ≥ 300"] == HOLDS


def test_the_opposite_world_does_not_hold():
    by_arm = {arm: _runs(i, **OUTLIERS) for i, arm in enumerate(
        ("adamw", "muon", "adamw_rotated", "sgd", "single_gain", "no_gain", "post_ln"))}
    for run in by_arm["muon"] + by_arm["adamw_rotated"] + by_arm["single_gain"]:
        for metric in ("kurtosis", "massive_top_ratio", "cross_sequence_cosine"):
            run["series"][metric][-1] *= 1.5  # more outliers and anisotropy than Adam's
    for run in by_arm["no_gain"]:
        run["series"]["cross_sequence_cosine"][-1] *= 1.5
    for run in by_arm["muon"]:  # no rise under Muon
        run["series"]["cross_sequence_cosine"][-1] = run["series"]["cross_sequence_cosine"][0]
    grid = {"bigram_backcopy": by_arm}
    assert V.machina_mercer(grid).verdict == FAILS
    assert V.elhage_osp(grid).verdict == FAILS
    assert V.guo_sgd(grid).verdict == FAILS  # SGD keeps the massive activations and sinks
    assert V.godey(grid).verdict == PARTLY  # three optimisers of four
    assert V.spike_sparse_sink(grid).verdict == PARTLY  # coupled after post-LN as well


def test_no_claim_without_the_positive_control_or_the_arms():
    grid = _holding_grid()
    for run in grid["shakespeare"]["adamw"]:
        run["series"]["massive_top_ratio"] = list(np.linspace(5.0, 50.0, len(STEPS)))  # < 100
    verdicts = V.all_verdicts({"shakespeare": grid["shakespeare"]})
    assert verdicts.pop("guo_sgd")["verdict"] == NOT_MEASURED  # a bigram_backcopy claim
    for key, verdict in verdicts.items():
        assert verdict["verdict"] == NOT_TESTABLE, key
        assert "control not reached" in verdict["numbers"][0]
        assert verdict["sensitivity"]["control max/median ≥ 30"] == HOLDS, key
    assert V.godey(None).verdict == NOT_MEASURED
    assert V.godey({"shakespeare": {"adamw": grid["bigram_backcopy"]["adamw"]}}).verdict == \
        NOT_MEASURED
