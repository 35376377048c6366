"""The accounts' rows of the report (studies/report/outlier_accounts.py) from archives laid out
as the device calls write them, on the made-up grids of tests/test_verdicts_outliers.py: the
verdicts are the rules', the loss match is the Welch interval, a failed control reads "regime not
reached, no claim"; and the figure of a metric along training, one panel per arm."""
import json
import tarfile

import numpy as np
import pytest

from anisotropy_jax.plotting import outliers as outlier_plots
from anisotropy_jax.studies.report import outlier_accounts as A, verdicts_outliers as V
from anisotropy_jax.studies.report.verdict import HOLDS, NOT_MEASURED
from tests.test_figures import covering_legends
from tests.test_verdicts_outliers import CLEAN, _holding_grid, _runs


def _archive(folder, by_arm, dataset="bigram_backcopy"):
    """One <arm>.tgz per arm under folder/call1, each <arm>/<dataset>/softmax/seed_<s>/."""
    (folder / "call1").mkdir(parents=True)
    for arm, runs in by_arm.items():
        for seed, run in enumerate(runs):
            path = folder / "src" / arm / dataset / "softmax" / f"seed_{seed}"
            path.mkdir(parents=True)
            (path / "grid_run.json").write_text(json.dumps({**run, "seed": seed}))
        with tarfile.open(folder / "call1" / f"outliers_{arm}.tgz", "w:gz") as tar:
            tar.add(folder / "src" / arm, arcname=arm)


def _with_loss(by_arm):
    for i, runs in enumerate(by_arm.values()):
        for j, run in enumerate(runs):
            run["series"]["val_loss"] = [3.0] * (len(run["steps"]) - 1) + [2.8 + 0.01 * i + 0.001 * j]
    return by_arm


def test_rows_are_the_rules_verdicts_with_their_loss_match(tmp_path):
    by_arm = _with_loss(_holding_grid()["bigram_backcopy"])
    _archive(tmp_path, by_arm)
    rows = {r["account"]: r for r in A.rows(A.arms_from_folder(tmp_path))}
    assert [rows[V.ACCOUNT_CLAIMS[k][0]]["verdict"] for k in V.ACCOUNTS] == [HOLDS] * 5
    base, sgd = (np.array([r["series"]["val_loss"][-1] for r in by_arm[a]]) for a in ("adamw", "sgd"))
    d = V.welch_interval(base, sgd)
    assert f"adamw − sgd {V._text(d)}" in rows["Guo et al."]["loss"]
    assert d["diff"] == pytest.approx(-0.03)
    assert rows["Guo et al."]["sensitivity"].startswith("robust")
    assert rows["Li et al. (compression phase)"]["verdict"] == NOT_MEASURED
    assert "| **holds** |" in A.table(tmp_path)


def test_a_failed_control_is_no_claim(tmp_path):
    by_arm = _with_loss({"adamw": _runs(0, **CLEAN), "sgd": _runs(1, **CLEAN)})
    _archive(tmp_path, by_arm)
    rows = {r["account"]: r for r in A.rows(A.arms_from_folder(tmp_path))}
    assert rows["Guo et al."]["verdict"] == A.NO_CLAIM
    assert "control (adamw, 5 seeds" in rows["Guo et al."]["numbers"]
    assert rows["Godey et al."]["verdict"] == NOT_MEASURED  # muon and the others not run
    assert rows["Godey et al."]["sensitivity"] == "–"


def test_the_figure_has_one_panel_per_arm_and_a_line_per_seed():
    by_arm = _holding_grid()["bigram_backcopy"]
    by_arm["empty"] = [{"steps": [0, 1], "series": {}}]
    fig = outlier_plots.metric_by_step(by_arm, "massive_top_ratio", log_y=True, threshold=100)
    assert len(fig.axes) == len(by_arm)
    adamw = fig.axes[0]
    assert adamw.get_title() == "adamw" and len(adamw.lines) == 5 + 2  # seeds, mean, threshold
    mean = np.mean([r["series"]["massive_top_ratio"] for r in by_arm["adamw"]], axis=0)
    np.testing.assert_allclose(adamw.lines[5].get_ydata(), mean)
    assert fig.axes[-1].texts[0].get_text() == "no massive_top_ratio"
    assert covering_legends(fig) == []


def test_li_row_reads_the_bpe_control_beside_the_archives(tmp_path):
    """Li et al.'s row: the baseline arm's runs are the byte models (RankMe flat here), and
    FOLDER/embeddings/results.json the BPE control (a late fall of 0.4): the prediction holds."""
    from anisotropy_jax import results
    from tests.test_verdicts_compression import STEPS as BPE_STEPS, _runs as compression_runs

    by_arm = _with_loss(_holding_grid()["bigram_backcopy"])
    for j, run in enumerate(by_arm["adamw"]):
        run["series"] = {**run["series"], "rankme_last": [40.0 + 0.1 * j] * len(run["steps"]),
                         "alpha_req_last": [0.5] * len(run["steps"])}
    _archive(tmp_path, by_arm)
    bpe = compression_runs(0.4, 0)
    results.write_json(tmp_path / "embeddings" / "results.json", {
        "widths": [128], "seeds": list(range(len(bpe))), "steps": BPE_STEPS,
        "last_block": {name: [[r["series"][f"{name}_last"] for r in bpe]]
                       for name in ("rankme", "alpha_req")}})
    table = A.table(tmp_path)
    li = next(line for line in table.splitlines() if line.startswith("| Li et al."))
    assert "| **holds** |" in li and "BPE control (5 seeds)" in li and "robust" in li
