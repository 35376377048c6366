"""The extreme-token claims (studies/extreme/claims.py): every verdict branch of the
pre-registered thresholds and the restated rules (docs/EXTREME.md) on hand-made results, with
negative controls (cases that must not hold), and docs/REPORT.md's section "Extreme tokens" bound
to the committed results (doc_tables kind `extreme_claims`)."""
import copy

import pytest

from anisotropy_jax import doc_tables
from anisotropy_jax.studies.extreme import claims, rules

REPORT = doc_tables.ROOT / "docs" / "REPORT.md"
RESULTS = "docs/results/extreme/report"


def _run(sink_rate, pc=(0.1, 0.1, 0.1, 0.1), pc_wo=None, cos=(0.3,) * 4, cos_wo=None,
         massive=(0, 0, 0, 0), carried=0.9, heads=2, control=0.1, unit=None, unit_wo=None):
    """One forward's summary: 3 blocks, 4 states; every head of a block has the block's rate,
    the carried share `carried` (key 0) and `control` (the random control key)."""
    att = {"sink_rate": list(sink_rate),
           "head_sink_rate": [[r] * heads for r in sink_rate],
           "head_query_carried": [[carried] * heads for _ in sink_rate],
           "head_control_carried": [[control] * heads for _ in sink_rate],
           "head_shared": [[1.0] * heads for _ in sink_rate],
           "head_excess": [[2.0] * heads for _ in sink_rate]}
    states = {"top_pc_share": list(pc), "top_pc_share_without_first": list(pc_wo or pc),
              "top_pc_share_unit": list(unit or pc),
              "top_pc_share_unit_without_first": list(unit_wo or unit or pc_wo or pc),
              "first_token_norm_ratio": [1.0, 80.0, 120.0, 90.0],
              "average_cosine": list(cos), "average_cosine_without_first": list(cos_wo or cos),
              "massive_count": list(massive), "massive_top_ratio": [10.0] * len(pc),
              "massive_top": [5.0] * len(pc)}
    return {"attention": att, "states": states}


def _entry(trained, seeds=(0.0, 0.0, 0.0)):
    untrained = [_run(seeds), _run(seeds)]
    return {"trained": trained, "untrained": {"per_seed": untrained,
                                              "max": {"attention": {"sink_rate": list(seeds)}}}}


def _model(natural, repeated=None, causal=True, repeated_bos=None):
    """A model's results; with `repeated_bos`, the four first-token kinds (`repeated` is then the
    repeated id without a BOS, and natural text has the same sinks with and without it)."""
    inputs = {"natural": _entry(natural)}
    if repeated is not None:
        inputs["repeated"] = _entry(repeated)
    if repeated_bos is not None:
        inputs.update({"natural_bos": _entry(natural), "natural_no_bos": _entry(natural),
                       "repeated_bos": _entry(repeated_bos),
                       "repeated_no_bos": _entry(repeated)})
        inputs["natural_no_bos"]["same_tokens_as"] = "natural"
    return {"model": {"causal": causal}, "inputs": inputs}


SINKS = _run((0.1, 0.9, 0.8))


def test_sink_blocks_need_the_threshold_and_the_untrained_ceiling():
    assert claims.sink_blocks(_entry(SINKS)) == [2, 3]
    assert claims.sink_blocks(_entry(SINKS, seeds=(0.0, 0.95, 0.0))) == [3]
    assert claims.sink_blocks(_entry(_run((0.5, 0.5, 0.5)))) == []


NONE = _run((0.0, 0.0, 0.0))


def test_first_token_claim_needs_sinks_with_a_bos_and_none_without():
    smol = _model(SINKS, NONE, repeated_bos=SINKS)
    verdict, numbers = claims.claim_first_token({claims.ROTARY: smol})
    assert verdict == "holds", numbers
    assert "tokenizer: no BOS" in numbers and "with BOS 2, without 0" in numbers
    # negative controls: sinks on the repeated id without a BOS, or none with it, must not hold
    assert claims.claim_first_token({claims.ROTARY: _model(SINKS, SINKS, repeated_bos=SINKS)}
                                    )[0] == "does not hold"
    assert claims.claim_first_token({claims.ROTARY: _model(SINKS, NONE, repeated_bos=NONE)}
                                    )[0] == "does not hold"
    both = {claims.ROTARY: smol, claims.GEMMA3: _model(SINKS, SINKS, repeated_bos=SINKS)}
    assert claims.claim_first_token(both)[0] == "partly"
    # an encoder, or a causal model without the first-token kinds, is not tested
    assert claims.claim_first_token({"all-MiniLM-L6-v2": _model(SINKS, NONE, causal=False)}
                                    )[0] == "not measured"


def _sinks_only(carried, control, other):
    run = _run((0.9, 0.9, 0.1), carried=carried, control=control)
    run["attention"]["head_query_carried"][2] = [other, other]  # block 3: not sink heads
    return _model(run)


@pytest.mark.parametrize("carried, verdict", [  # each head's share of carried queries
    ((0.9, 0.8), "holds"), ((0.4, 0.2), "does not hold"), ((0.9, 0.2), "partly")])
def test_claim_b_pools_sink_heads_per_model(carried, verdict):
    models = {name: _sinks_only(c, 0.0, 0.0)
              for name, c in zip(("all-MiniLM-L6-v2", claims.ROTARY), carried)}
    got, numbers = claims.claim_b(models)
    assert got == verdict, numbers
    assert claims.claim_b({claims.ROTARY: _model(_run((0.1, 0.2, 0.2)))})[0] == (
        "not testable with these models")


def test_claim_b_counts_a_head_at_half_its_queries_as_carried():
    heads = claims._sink_head_counts(_run((0.9, 0.9, 0.0), carried=0.5))
    assert heads == (4, 4, 4.0, 8.0)
    assert claims._sink_head_counts(_run((0.9, 0.9, 0.0), carried=0.49))[1] == 0


def test_claim_b_controls_must_stay_below_the_sink_heads():
    assert claims.claim_b({claims.ROTARY: _sinks_only(1.0, 0.0, 0.0)})[0] == "holds"
    # negative controls: a random key carried as often, or key 0 in non-sink heads as often
    verdict, numbers = claims.claim_b({claims.ROTARY: _sinks_only(1.0, 0.9, 0.0)})
    assert verdict == "partly" and "random key, same heads 0/4 (0.00)" not in numbers
    assert "random key, same heads 4/4 (1.00)" in numbers
    verdict, numbers = claims.claim_b({claims.ROTARY: _sinks_only(1.0, 0.0, 0.9)})
    assert verdict == "partly" and "key 0, non-sink heads 2/2 (1.00)" in numbers
    # results without the control key (older runs) keep the rule on p and the other control
    old = _sinks_only(1.0, 0.0, 0.0)
    del old["inputs"]["natural"]["trained"]["attention"]["head_control_carried"]
    assert claims.claim_b({claims.ROTARY: old})[0] == "holds"


def test_claim_c_markers_and_agreement():
    jump = _run((0.1, 0.9, 0.8), pc=(0.1, 0.12, 0.5, 0.55), massive=(0, 0, 0, 3))
    assert claims.pc_jump(jump["states"])[0] == 2 and claims.first_massive(jump["states"]) == 3
    c1, c2 = claims.claim_c({claims.ROTARY: _model(jump)})
    assert c1[0] == "holds" and c2[0] == "holds"  # sink block 2, jump 2, massive 3 (±1)
    far = copy.deepcopy(jump)
    far["attention"]["sink_rate"] = [0.9, 0.1, 0.1]
    far["states"]["top_pc_share"] = [0.1, 0.1, 0.1, 0.6]
    c1, _ = claims.claim_c({claims.ROTARY: _model(far), "DINOv2-S": _model(jump)})
    assert c1[0] == "partly"
    assert claims.claim_c({"DINOv2-S": _model(far)})[0][0] == "does not hold"
    flat = _run((0.1, 0.9, 0.8), pc=(0.1, 0.15, 0.2, 0.25))  # rises of 0.05: no jump
    assert claims.pc_jump(flat["states"])[0] is None
    assert claims.claim_c({"DINOv2-S": _model(flat)})[0][0] == "not testable with these models"


def test_claim_d_collapse_and_kept_cosine():
    collapse = dict(pc=(0.1, 0.6, 0.6, 0.6), pc_wo=(0.1, 0.2, 0.6, 0.6))
    kept = _run(SINKS["attention"]["sink_rate"], **collapse, cos_wo=(0.3, 0.28, 0.3, 0.3))
    lost = _run(SINKS["attention"]["sink_rate"], **collapse, cos_wo=(0.3, 0.1, 0.3, 0.3))
    assert claims.claim_d({"DINOv2-S": _model(kept)})[0] == "holds"
    assert claims.claim_d({"DINOv2-S": _model(lost)})[0] == "does not hold"
    assert claims.claim_d({"DINOv2-S": _model(kept), claims.ROTARY: _model(lost)})[0] == "partly"
    assert claims.claim_d({"DINOv2-S": _model(SINKS)})[0] == "does not hold"  # no collapse
    assert "first row's norm / the others' 80–120×" in claims.claim_d({"DINOv2-S": _model(kept)})[1]
    # (d′): the same collapse on the rows, none on the unit rows (the norm made it): must not hold
    normed = _run(SINKS["attention"]["sink_rate"], **collapse, unit=(0.1, 0.3, 0.3, 0.3),
                  unit_wo=(0.1, 0.28, 0.3, 0.3))
    assert claims.claim_d({"DINOv2-S": _model(normed)})[0] == "holds"
    assert claims.claim_d({"DINOv2-S": _model(normed)}, "top_pc_share_unit")[0] == "does not hold"
    small = _run(SINKS["attention"]["sink_rate"], pc=(0.1, 0.15, 0.1, 0.1),
                 pc_wo=(0.1, 0.01, 0.1, 0.1))  # below PC_PRESENT: not a collapse
    assert claims._collapses(small["states"]) == []


def _with_ratio(run, ratio):
    out = copy.deepcopy(run)
    out["states"]["massive_top_ratio"] = [ratio] * len(out["states"]["massive_top_ratio"])
    out["states"]["massive_top"] = [ratio / 2] * len(out["states"]["massive_top"])  # same order
    return out


def test_claim_e_compares_gemma_with_smollm2():
    quiet = _with_ratio(_run((0.1, 0.2, 0.9), cos=(0.3, 0.1, 0.1, 0.1)), 20.0)  # 1 sink block
    loud = _with_ratio(_run((0.9, 0.9, 0.9), cos=(0.3, 0.5, 0.5, 0.5)), 500.0)
    assert claims.claim_e({claims.GEMMA3: _model(quiet), claims.ROTARY: _model(loud)})[0] == (
        "holds")
    assert claims.claim_e({claims.GEMMA3: _model(loud), claims.ROTARY: _model(quiet)})[0] == (
        "does not hold")
    mixed = _with_ratio(quiet, 900.0)  # fewer sinks, lower cosine, larger activations
    verdict, numbers = claims.claim_e({claims.GEMMA3: _model(mixed),
                                       claims.ROTARY: _model(loud)})
    assert verdict == "partly" and "lower on 2 of 3" in numbers
    # a smaller ratio with a larger absolute activation is not "smaller massive activations"
    big = copy.deepcopy(quiet)
    big["states"]["massive_top"] = [5.0, 4.6e4, 1e3, 1e3]
    verdict, numbers = claims.claim_e({claims.GEMMA3: _model(big), claims.ROTARY: _model(loud)})
    assert "lower on 2 of 3" in numbers and "largest |activation| Gemma-3 / SmolLM2 = 184.0" in (
        numbers)
    assert claims.claim_e({claims.ROTARY: _model(loud)})[0] == "not measured"
    # the mean cosine leaves out state 0 (the embeddings)
    assert claims._anisotropy(quiet) == pytest.approx(0.1)


def test_rows_name_every_claim_with_its_rule():
    models = {claims.ROTARY: _model(SINKS, NONE, repeated_bos=SINKS),
              claims.GEMMA3: _model(SINKS, NONE, repeated_bos=SINKS)}
    rows = claims.rows(models)
    assert [r[0][:3] for r in rows] == ["(a)", "(b)", "(c1", "(c2", "(d)", "(d′", "(e)"]
    assert rows[0][1] == "holds" and len(rules.RULES) == len(rows)
    assert claims.rows({claims.ROTARY: models[claims.ROTARY]})[-1][1] == "not measured"
    assert claims.short("my-model") == "my-model"


def test_report_section_is_bound_to_the_committed_results():
    text = REPORT.read_text()
    section = text[text.index("## Extreme tokens\n"):]
    bound = [(kind, path) for kind, path, _ in doc_tables.embedded(section)]
    assert ("extreme_claims", RESULTS) in bound
    for kind, path, written in doc_tables.embedded(section):
        assert written == doc_tables.render(kind, path), f"{kind} {path}: run doc_tables --update"
    models = claims.load(doc_tables.ROOT / RESULTS)
    # every model of the study but Qwen2.5-Coder-1.5B, not run (docs/results/extreme/README.md)
    from anisotropy_jax.configs.extreme import EXTREME_MODELS, QWEN25_CODER
    assert set(models) == set(EXTREME_MODELS) - {QWEN25_CODER["1.5b"]}, sorted(models)
    for model in models.values():
        assert all(len(e["untrained"]["per_seed"]) >= 5 for e in model["inputs"].values())


def test_dimension_cells_skip_undefined_states_and_the_embeddings_for_the_peak():
    from anisotropy_jax.studies.extreme import report
    assert report._dimension_cells([50.0, 3.0, None, 7.5, 6.0]) == "50.0 → 7.5 (state 3) → 6.0"
    assert report._dimension_cells([None, None, 2.0]) == "– → 2.0 (state 2) → 2.0"
    assert report._dimension_cells([None, None]) == "–"
