"""Li et al.'s compression-phase prediction (studies/report/verdicts_compression.py) on made-up
runs whose answer is known: holds where only the BPE control's RankMe falls late, does not hold
where the byte models' falls too, no claim where the control does not fall."""
import numpy as np

from anisotropy_jax.studies.report import verdicts_compression as C
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
