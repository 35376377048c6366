"""Li et al.'s compression-phase prediction (studies/report/verdicts_compression.py) on made-up
runs whose answer is known: holds where only the BPE control's RankMe falls late, does not hold
where the byte models' falls too, no claim where the control does not fall; and the same runs read
from a grid's and an embeddings study's results folders (studies/report/compression.py)."""
import math

import numpy as np
import pytest

from anisotropy_jax import results
from anisotropy_jax.studies.report import compression, verdicts_compression as C
from anisotropy_jax.studies.report.verdict import FAILS, HOLDS, NOT_MEASURED, NOT_TESTABLE

STEPS = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000]


def _runs(fall, seed, n=5):
    """RankMe collapses early (steps ≤ 64, before the late span), rises to a peak at 256, then
    falls by `fall` of it by the last step (± jitter); α-ReQ mirrors it."""
    rng = np.random.default_rng(seed)
    runs = []
    for _ in range(n):
        f = fall + 0.01 * rng.standard_normal()
        rank = [60, 59, 50, 30, 12, 8, 9, 10, 20, 40, 40 * (1 - f / 2), 40 * (1 - f)]
        alpha = [0.5] * 10 + [0.5 + f, 0.5 + 2 * f]
        runs.append({"steps": STEPS, "series": {"rankme_last": rank, "alpha_req_last": alpha}})
    return runs


def test_the_prediction_holds_only_where_it_is_built_in():
    bpe, byte = _runs(0.4, 0), _runs(0.0, 1)
    assert C.late_fall(bpe[0])[0] > 0.35  # the early collapse (60 → 8) is not the phase
    assert C.compression_phase(byte, bpe).verdict == HOLDS
    assert C.compression_phase(_runs(0.4, 2), bpe).verdict == FAILS
    no_control = C.compression_phase(byte, _runs(0.0, 3))
    assert no_control.verdict == NOT_TESTABLE and "does not compress" in no_control.numbers[0]
    assert C.compression_phase(byte, None).verdict == NOT_MEASURED
    sens = C.sensitivity(byte, bpe)
    assert set(sens.values()) == {HOLDS} and len(sens) == 4


def _folders(tmp_path, byte, bpe, widths=(128, 256)):
    """A grid results folder (results.json "runs", both byte datasets) and an embeddings one
    (results.json "last_block", (W, S, C)) holding the made-up runs; at the second width the
    control does not compress."""
    half = len(byte) // 2
    runs = {"shakespeare": {"softmax": byte[half:]}, "bigram_backcopy": {"softmax": byte[:half]}}
    grid, emb = tmp_path / "normalizations", tmp_path / "embeddings"
    flat = _runs(0.0, 9, n=len(bpe))
    block = {name: [[r["series"][f"{name}_last"] for r in width_runs]
                    for width_runs in (bpe, flat)] for name in ("rankme", "alpha_req")}
    results.write_json(grid / "results.json", {"runs": runs})
    results.write_json(emb / "results.json", {"widths": list(widths), "seeds": list(range(len(bpe))),
                                              "steps": STEPS, "last_block": block})
    return grid, emb


def test_the_verdict_from_a_grid_folder_and_an_embeddings_folder(tmp_path):
    bpe, byte = _runs(0.4, 0), _runs(0.0, 1, n=6)
    grid, emb = _folders(tmp_path, byte, bpe)
    assert compression.byte_runs(grid) == [
        {"steps": STEPS, "series": r["series"]} for r in byte]  # datasets in name order, seeds in order
    assert compression.bpe_runs(emb)[2]["series"] == bpe[2]["series"]  # the smallest width
    assert compression.verdict(grid, emb).verdict == HOLDS
    assert compression.verdict(grid, emb, width=256).verdict == NOT_TESTABLE
    assert compression.by_width(grid, emb) == {128: HOLDS, 256: NOT_TESTABLE}
    table = compression.table(tmp_path)
    assert "| **holds** |" in table and "d = 256: not testable" in table and "robust" in table
    with pytest.raises(ValueError, match="widths"):
        compression.bpe_runs(emb, width=64)
    # A grid still running (grid_run.json per seed, no results.json); a NaN read back as "nan".
    run_dir = tmp_path / "running" / "shakespeare" / "softmax" / "seed_0"
    results.write_json(run_dir / "grid_run.json", {**byte[0], "seed": 0})
    assert compression.byte_runs(tmp_path / "running")[0]["series"] == byte[0]["series"]
    nan = {**byte[0], "series": {**byte[0]["series"], "alpha_req_last": [math.nan] * len(STEPS)}}
    results.write_json(run_dir / "grid_run.json", nan)
    assert all(map(math.isnan, compression.byte_runs(tmp_path / "running")[0]["series"]
                   ["alpha_req_last"]))
    # Runs that predate the series: not measured.
    older = {"runs": {"shakespeare": {"softmax": [{"steps": STEPS, "series": {"val_loss": []}}]}}}
    results.write_json(grid / "results.json", older)
    assert compression.byte_runs(grid) is None
    assert compression.verdict(grid, emb).verdict == NOT_MEASURED
    assert "**not measured**" in compression.table(tmp_path)
