"""The sensitivity entries of the verdicts that docs/REPORT.md states outside its generated claims
table: Godey 2 on the two-network run with the massive-token-free centring (doc_tables kind
`godey_2`), and the extreme-token claims (studies/extreme/sensitivity.py). Every extreme row
has alternatives and an entry; made-up results just past a threshold flip under the alternative
that moves it and results far from every threshold are robust (negative controls); the committed
results give the flips the review found (the marker and the massive cut of (c), the controls of
(b), the size measure of (e)), recomputed from the raw results."""
import copy

import pytest

from anisotropy_jax import doc_tables, results
from anisotropy_jax.studies.report import verdicts
from anisotropy_jax.studies.extreme import claims, sensitivity
from anisotropy_jax.studies.extreme.rules import CLAIMS
from tests.test_extreme_report import NONE, SINKS, _model, _run, _sinks_only

RESULTS = doc_tables.ROOT / "docs" / "results" / "extreme" / "report"


@pytest.fixture(scope="module")
def committed():
    models = claims.load(RESULTS)
    return models, {claim: (verdict, entry) for claim, verdict, entry, _ in
                    sensitivity.rows(models)}


def _entry_of(models, key):
    row = next(r for r in sensitivity.rows(models) if sensitivity.row_key(r[0]) == key)
    return row[1], row[2]


def test_every_row_has_alternatives_and_an_entry(committed):
    assert [sensitivity.row_key(c) for c in CLAIMS] == list(sensitivity.ALTERNATIVES)
    assert all(len(alts) >= 2 for alts in sensitivity.ALTERNATIVES.values())
    _, entries = committed
    assert list(entries) == list(CLAIMS)
    for claim, (verdict, entry) in entries.items():
        if verdict == "not measured":
            assert entry == "–", claim
        else:
            assert entry.startswith(("robust (", "flips under ")), (claim, entry)


def test_the_entry_has_the_reports_wording():
    from anisotropy_jax.studies.report.verdict import sensitivity_entry
    for verdict, alternatives in [("holds", {"a": "holds", "b": "holds"}),
                                  ("holds", {"a": "partly", "b": "holds", "c": "does not hold"}),
                                  ("partly", {"a": "partly", "late": "not measured"}),
                                  ("partly", {"a": "holds", "late": "not measured"}),
                                  ("not measured", {"a": "holds"}), ("holds", {})]:
        assert sensitivity.entry(verdict, alternatives) == sensitivity_entry(
            verdict, alternatives), (verdict, alternatives)


def _with_massive(run, values, ratios):
    """`run` with its stored top activations: one per state (|a|, ratio to the median)."""
    out = copy.deepcopy(run)
    out["massive"] = {"top_values": [[v] for v in values], "top_ratio": [[r] for r in ratios]}
    out["states"]["massive_count"] = [int(v > 100 and r > 1000) for v, r in zip(values, ratios)]
    return out


def test_the_massive_cut_and_the_marker_move_the_first_massive_state():
    # sink block 1; an 837x activation at state 1 and a 13,820x one at state 3 (SmolLM2's shape)
    run = _with_massive(_run((0.9, 0.9, 0.9), pc=(0.01, 0.6, 0.01, 0.95)),
                        [5.0, 300.0, 400.0, 2e4], [10.0, 837.0, 900.0, 13820.0])
    assert claims.first_massive(run["states"]) == 3
    assert claims.first_massive_at(run["massive"], 1000.0) == 3
    assert claims.first_massive_at(run["massive"], 800.0) == 1
    assert claims.first_massive_at(run["massive"], 2e4) is None
    assert claims.pc_jump(run["states"]) == (3, pytest.approx(0.94))
    assert claims.pc_jump(run["states"], first_rise=0.5)[0] == 1
    models = {claims.ROTARY: _model(run)}
    verdict, entry = _entry_of(models, "(c2)")
    assert verdict == "does not hold"
    assert "massive at 800× (→ holds)" in entry and "within ±2 layers (→ holds)" in entry
    verdict, entry = _entry_of(models, "(c1)")
    assert verdict == "does not hold" and "L_pc the first rise ≥ 0.5 (→ holds)" in entry
    # negative control: the markers all at the first sink block, far from every cut: robust
    early = _with_massive(_run((0.9, 0.9, 0.9), pc=(0.1, 0.95, 0.95, 0.95)),
                          [5.0, 5e4, 5e4, 5e4], [10.0, 2e4, 2e4, 2e4])
    for key in ("(c1)", "(c2)"):
        verdict, entry = _entry_of({claims.ROTARY: _model(early)}, key)
        assert verdict == "holds" and entry.startswith("robust ("), (key, entry)


def test_first_massive_at_the_study_cut_is_the_studys_count(committed):
    models, _ = committed
    for name, model in models.items():
        for kind, entry in model["inputs"].items():
            trained = entry["trained"]
            assert claims.first_massive_at(trained["massive"], 1000.0) == claims.first_massive(
                trained["states"]), (name, kind)


def test_the_controls_and_the_first_token_thresholds():
    close = {claims.ROTARY: _sinks_only(1.0, 0.0, 0.8)}  # key 0 carried in non-sink heads
    verdict, entry = _entry_of(close, "(b)")
    assert verdict == "partly"
    assert "no control decided on (the pre-registered rule) (→ holds)" in entry
    assert _entry_of({claims.ROTARY: _sinks_only(1.0, 0.0, 0.0)}, "(b)")[1].startswith("robust")
    # one sink block with the BOS: "≥ 3 sink blocks" flips it; three are robust to it
    one = _run((0.9, 0.1, 0.1))
    verdict, entry = _entry_of({claims.ROTARY: _model(SINKS, NONE, repeated_bos=one)}, "(a)")
    assert verdict == "holds" and "≥ 3 sink blocks with the BOS (→ does not hold)" in entry
    three = _run((0.9, 0.9, 0.9))
    verdict, entry = _entry_of({claims.ROTARY: _model(SINKS, NONE, repeated_bos=three)}, "(a)")
    assert verdict == "holds" and entry.startswith("robust ("), entry


def test_committed_flips_are_the_ones_the_review_found(committed):
    models, entries = committed
    by_key = {sensitivity.row_key(c): v for c, v in entries.items()}
    smol = models[claims.ROTARY]["inputs"]["natural"]["trained"]
    assert claims.first_massive(smol["states"]) == 12
    assert claims.first_massive_at(smol["massive"], 800.0) == 3
    assert claims.pc_jump(smol["states"])[0] == 12
    assert claims.pc_jump(smol["states"], first_rise=0.5)[0] == 3
    assert "massive at 800× (→ holds)" in by_key["(c2)"][1]
    assert "L_pc the first rise ≥ 0.5 (→ holds)" in by_key["(c1)"][1]
    assert "no control decided on (the pre-registered rule) (→ holds)" in by_key["(b)"][1]
    assert by_key["(e)"][0] == "does not hold"
    assert "size by the top/median ratio alone (the pre-registered rule) (→ partly)" in (
        by_key["(e)"][1])
    assert by_key["(d)"] == ("holds", by_key["(d)"][1]) and by_key["(d)"][1].startswith("robust")
    # the reruns: (a) both ways, the random key of (b), the unit rows of (d′)
    # (a): robust on SmolLM2 and Gemma-3; Qwen2.5-Coder-0.5B's one sink block with the BOS (rate
    # 0.54) makes it flip under a 0.7 rate and under >= 3 blocks
    assert by_key["(a)"][0] == "holds"
    assert by_key["(a)"][1].startswith("flips under sink blocks at rate > 0.7 (→ partly); "
                                       "≥ 3 sink blocks with the BOS (→ partly)")
    without_qwen = {n: m for n, m in models.items() if not n.startswith("Qwen")}
    assert _entry_of(without_qwen, "(a)")[1].startswith("robust (")
    numbers = {sensitivity.row_key(r[0]): r[3] for r in sensitivity.rows(models)}
    assert "repeated id with BOS 19, without 0" in numbers["(a)"]
    assert "Qwen2.5-Coder-0.5B (tokenizer: no BOS): sink blocks of 24, repeated id with BOS 1, " \
        "without 0" in numbers["(a)"]
    assert "random key, same heads 4/218 (0.02)" in numbers["(b)"]
    assert by_key["(d′)"][0] == "does not hold"
    assert "collapsed at ≤ 0.75× (→ holds)" in by_key["(d′)"][1]


def test_godey_2_on_three_networks_flips_with_the_centre():
    folder = doc_tables.ROOT / "docs" / "results" / "pretrained" / "godey2_centring"
    docs = {p.parent.name: results.read_results(p) for p in sorted(folder.glob("*/results.json"))}
    assert sorted(docs) == ["gemma3", "qwen2.5-coder-0.5b", "smollm2"]
    v = verdicts.godey_2(docs)
    assert v.verdict == verdicts.PARTLY
    assert v.sensitivity["centred by the per-dimension median"] == verdicts.HOLDS
    assert v.sensitivity["centred by the plain mean"] == verdicts.PARTLY
    assert v.sensitivity_entry.startswith("flips under centred by the per-dimension median")
    # negative control: SmolLM2 alone cannot decide it (fewer than 2 networks)
    assert verdicts.godey_2({"smollm2": docs["smollm2"]}).verdict == verdicts.NO_TEST
    report = (doc_tables.ROOT / "docs" / "REPORT.md").read_text()
    assert ("godey_2", "docs/results/pretrained/godey2_centring") in [
        (kind, path) for kind, path, _ in doc_tables.embedded(report)]


def test_a_later_run_adds_what_the_first_lacks_and_changes_nothing_it_has():
    from anisotropy_jax.studies.extreme.loading import add_missing
    first = {"natural": {"trained": {"states": {"top_pc_share": [0.9]}},
                         "untrained": {"per_seed": [{"states": {"top_pc_share": [0.1]}}]}}}
    later = {"natural": {"trained": {"states": {"top_pc_share": [0.5], "unit": [0.2]}},
                         "untrained": {"per_seed": [{"states": {"top_pc_share": [0.3],
                                                                "unit": [0.4]}}]}},
             "repeated_bos": {"trained": {}}}
    add_missing(first, later)
    assert first["natural"]["trained"]["states"] == {"top_pc_share": [0.9], "unit": [0.2]}
    assert first["natural"]["untrained"]["per_seed"][0]["states"] == {"top_pc_share": [0.1],
                                                                      "unit": [0.4]}
    assert "repeated_bos" in first
