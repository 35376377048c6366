"""The sensitivity entry of every verdict (`Verdict.sensitivity`, REPORT.md's "sensitivity"
column): each claim's rule recomputed under other choices of its constants. Every claim has one;
made-up results just past a threshold flip under the stricter alternative and results far from
every threshold are robust; the committed REPORT.md states what the verdict functions compute
from the committed raw results."""
import pathlib
import re

import numpy as np
import pytest

from anisotropy_jax.metrics.correlation import t_interval
from anisotropy_jax.studies.report import report
from anisotropy_jax.studies.report import verdicts as V
from anisotropy_jax.studies.report.verdict import sensitivity_entry
from tests.test_verdicts import (FLAT_AGREEMENT, RISING_AGREEMENT, SEED_NOISE, _curves, _depth,
                                 _modality, _pretrained, _pretrained_embeddings, _shares, _sweep)

BUNDLE = pathlib.Path(report.REPOSITORY) / "docs" / "results" / "report"
REPORT_MD = pathlib.Path(report.REPOSITORY) / "docs" / "REPORT.md"


@pytest.fixture(scope="module")
def committed():
    """The verdicts computed from the committed raw results of docs/REPORT.md."""
    return V.all_verdicts(*report.load_bundle(BUNDLE))


def test_every_claim_has_alternatives_and_an_entry(committed):
    assert set(V.ALTERNATIVES) == set(V.CLAIMS)
    assert all(len(alternatives) >= 2 for alternatives in V.ALTERNATIVES.values())
    for v in V.all_verdicts({}, {"sweep": "not run"}):  # nothing measured: "–" everywhere
        assert (v.sensitivity, v.sensitivity_entry) == ({}, "–"), v.key
    assert [v.key for v in committed] == list(V.CLAIMS)
    for v in committed:
        if v.verdict == V.NOT_MEASURED:
            assert v.sensitivity_entry == "–", v.key
        else:
            assert list(v.sensitivity) == list(V.ALTERNATIVES[v.key]), v.key
            assert v.sensitivity_entry.startswith(("robust (", "flips under ")), v.key


def test_the_entry_names_each_flip_and_what_it_flips_to():
    assert sensitivity_entry(V.HOLDS, {"a": V.HOLDS, "b": V.HOLDS}) == "robust (a, b)"
    assert sensitivity_entry(V.HOLDS, {"a": V.PARTLY, "b": V.HOLDS, "c": V.FAILS}) == (
        "flips under a (→ partly); c (→ does not hold); the same under b")
    assert sensitivity_entry(V.FAILS, {"a": V.FAILS, "late": V.NOT_MEASURED}) == (
        "robust (a); not recomputable from these results under late")
    assert sensitivity_entry(V.NOT_MEASURED, {"a": V.HOLDS}) == "–"


def _flips(v, alternative, to):
    assert v.sensitivity[alternative] == to, (v.key, v.sensitivity)
    assert v.sensitivity_entry.startswith("flips under ") and f"{alternative} (→ {to})" in (
        v.sensitivity_entry)


def _robust(v):
    assert set(v.sensitivity.values()) == {v.verdict}, (v.key, v.sensitivity)
    assert v.sensitivity_entry.startswith("robust (")


def test_godey_1_margin_and_share_of_the_states():
    near = V.godey_1({"models": {"vit": _modality([0.1, 0.17, 0.17, 0.17, 0.2], [0.05] * 5)}})
    assert near.verdict == V.PARTLY
    _flips(near, "margin ≥ 0.2", V.FAILS)
    half = _modality([0.1, 0.9, 0.9, 0.1, 0.1, 0.2], [0.05] * 6)  # 2 of 4 states
    _flips(V.godey_1({"models": {"vit": half}}), "at ≥ 3/4 of the states", V.FAILS)
    _robust(V.godey_1({"models": {"vit": _modality([0.1, 0.9, 0.9, 0.9, 0.2], [0.05] * 5)}}))


def test_godey_2_share_removed_and_number_of_networks():
    low, average = [0.05] * 5, [0.1, 0.4, 0.5, 0.6, 0.2]
    near = _pretrained(average, [0.5, 0.55, 0.6, 0.55, 0.5], low, [None] * 5)
    v = V.godey_2({"a": near, "b": near})
    assert v.verdict == V.HOLDS
    _flips(v, "removes ≥ 75%", V.FAILS)
    _flips(v, "≥ 3 networks", V.NO_TEST)
    far = _pretrained(average, [0.95] * 5, low, [None] * 5)
    _robust(V.godey_2({"a": far, "b": far, "c": far}))


def test_godey_3a_and_3b_operating_range_and_interval_level():
    h = [0.99, 0.98, 0.9, 0.3]
    categorical = _sweep((h, RISING_AGREEMENT), (h, RISING_AGREEMENT), (h, FLAT_AGREEMENT))
    _robust(V.godey_3b(categorical))
    _robust(V.godey_3a(_sweep((h, RISING_AGREEMENT), (h, RISING_AGREEMENT),
                              ([0.99, 0.98, 0.95, 0.5], FLAT_AGREEMENT))))
    # at the operating point the gap is 1.3 s over 5 seeds: its 95% interval lies above 0 (half
    # width 0.98 s), its 99% interval does not (1.63 s)
    s = 1e-3
    near = _sweep((h, RISING_AGREEMENT), (h, RISING_AGREEMENT), (h, FLAT_AGREEMENT))
    biased = near["runs"]["inputs=biased"]["metrics"]["attention_query_agreement"]["per_seed"]
    matched = near["runs"]["inputs=norm_matched"]["metrics"]["attention_query_agreement"]
    for seed, z in enumerate(SEED_NOISE[:, 0]):
        matched["per_seed"][seed][2] = biased[seed][2] - (1.3 * s + s * z)
    v = V.godey_3b(near)
    assert v.verdict == V.HOLDS
    _flips(v, "99% intervals", V.PARTLY)  # it still holds at the largest s
    assert v.sensitivity["90% intervals"] == V.HOLDS
    # a range that also takes in s = 4 (input cosine 0.05), where the agreement does not rise
    flat_early = _sweep((h, [0.04, 0.04, 0.3, 0.9]), (h, RISING_AGREEMENT), (h, FLAT_AGREEMENT))
    _flips(V.godey_3b(flat_early), "input cosine 0.05–0.8", V.PARTLY)


def test_godey_4a_and_4c_start_of_the_trend():
    rng = np.random.default_rng(0)
    noise = 0.01 * rng.normal(size=(5, 6))  # steps 0, 16, 64, 100, 1000, 4000
    late_fall = 0.3 + np.array([0.0, 0.6, 0.1, 0.1, 0.4, 0.3]) + noise
    steady = 0.3 + np.array([0.0, 0.05, 0.1, 0.15, 0.4, 0.6]) + noise
    for fn in (V.godey_4a, V.godey_4c):
        v = fn({"clm": _curves(late_fall)})
        assert v.verdict == V.HOLDS
        _flips(v, "start at step ≥ 500", V.FAILS)
        _robust(fn({"clm": _curves(steady), "mlm": _curves(steady)}))


def test_godey_4b_mean_deficit_head_cut_and_interval_level():
    near = V.godey_4b({"clm": _shares(0.1, entropy=0.94)})  # mean 1 − H/ln L 0.06
    assert near.verdict == V.HOLDS
    _flips(near, "mean 1 − H/ln L ≥ 0.1", V.NO_TEST)
    assert near.sensitivity["a head's share defined from 1 − H ≥ 0.05"] == V.HOLDS
    cut = V.godey_4b({"clm": _shares(0.1, entropy=0.97), "mlm": _shares(0.1)})  # heads 0.03
    assert cut.verdict == V.PARTLY  # clm's attention is uniform (mean deficit 0.03)
    _flips(cut, "mean 1 − H/ln L ≥ 0.025", V.HOLDS)
    assert cut.sensitivity["a head's share defined from 1 − H ≥ 0.05"] == V.PARTLY
    _robust(V.godey_4b({"clm": _shares(0.1), "mlm": _shares(0.2)}))


def test_mm_a_isotropy_threshold():
    def pythia(value):
        emb = {"input_centred": value, "output_centred": value}
        return {"p": _pretrained_embeddings("gpt_neox", True, emb)}
    near = V.mm_a(pythia(0.92))
    assert near.verdict == V.HOLDS
    _flips(near, "I(W) ≥ 0.95", V.FAILS)
    _robust(V.mm_a(pythia(0.99)))


def _gain(per_seed):
    """An embedding study of one width whose d at its last checkpoint is `per_seed` (5 seeds),
    its recorded interval the 95% one."""
    q = t_interval(per_seed)
    cell = {k: [[0.0, float(q[k])]] for k in ("mean", "low", "high")}
    return {"widths": [32], "vocab_size": 8192, "seeds": [0, 1, 2, 3, 4],
            "val_loss": [[[9.05, 4.0]] * 5],
            "gain_direction": {"centered": {**cell, "per_seed": [[[0.0, d] for d in per_seed]],
                                            "positive": [[0, 5]], "n": 5}}}


def test_mm_b_interval_level():
    s = 1e-3
    near = V.mm_b(None, "", _gain(1.3 * s + s * SEED_NOISE[:, 0]))
    assert near.verdict == V.HOLDS
    _flips(near, "99% intervals", V.NOT_TESTABLE)
    _robust(V.mm_b(None, "", _gain(0.05 + s * SEED_NOISE[:, 0])))


def test_depth_rank_and_cosine_cuts():
    near_rank = V.depth_a(_depth(1.4, 0.9))
    assert near_rank.verdict == V.HOLDS
    _flips(near_rank, "effective rank ≤ 1.25", V.FAILS)
    _robust(V.depth_a(_depth(1.01, 0.9)))
    near_cosine = V.depth_b(_depth(1.01, 0.55))
    assert near_cosine.verdict == V.HOLDS
    _flips(near_cosine, "average cosine ≥ 0.75", V.FAILS)
    _robust(V.depth_b(_depth(1.01, 0.95)))
    # a stack not collapsed at the default cut: not measured, whatever a looser cut would say
    assert V.depth_b(_depth(1.8, 0.9)).sensitivity_entry == "–"


def _column(table: str, name: str) -> list[str]:
    rows = [r for r in table.splitlines() if r.startswith("| ")]
    header = [c.strip() for c in rows[0].strip("|").split(" | ")]
    at = header.index(name)
    return [re.split(r"(?<!\\) \| ", r.strip("| "))[at] for r in rows[2:]]


def test_the_committed_report_states_the_computed_entries(committed):
    text = REPORT_MD.read_text()
    table = text.split("<!-- table: claims docs/results/report -->\n")[1].split(
        "<!-- end table -->")[0]
    entries = [v.sensitivity_entry for v in committed]
    assert _column(table, "sensitivity") == [e.replace("|", "\\|") for e in entries]
    assert report.CLAIMS_INTRO in text.split("<!-- table: claims")[0]
    for v in committed:  # each claim's section says it too
        section = text.split(f"### {v.name}: {v.claim}\n")[1].split("\n### ")[0]
        assert f"{report.SENSITIVITY_LABEL} {v.sensitivity_entry}" in section, v.key
