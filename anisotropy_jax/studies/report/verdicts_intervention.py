"""The verdict on Godey 3 inside trained networks (docs/EXTREME.md, "Godey 3 inside trained
networks"), from the intervention results of the extreme-token study (`--config=extreme:
intervention`; `studies.extreme.intervention`): does the residual stream's common component make
the attention that reads it sharp (3s) and categorical (3c)?

Per model and block ℓ, the residual stream entering block ℓ (its `resid_pre`, the input of its
attention sublayer, before any pre-norm) is intervened on, and block ℓ's own attention is measured
per sequence against the unmodified forward (Δ = intervened − unmodified): normalised entropy
H/ln n (n the query's visible keys), the largest weight, and the row cosine (the mean cosine
between the attention rows of distinct queries of one sequence: the query agreement). The
treatment removes the common component μ (the mean over the tokens of the batch, without
position 0 where DECIDING_CENTRE says so) from every token, then rescales every token to its own
original norm; the control removes r instead, ‖r‖ = ‖μ‖, r along a random direction, likewise
renormalised, for several directions (the control is their distribution). The two differ in the
direction removed only: the same change per token before the renormalisation, the same norms
after it.

Rules (the thresholds are named constants; every one is the `*_rule`'s parameter, its default the
pre-registered value):
  a layer is SHARPENED by the common component (3s) if, over the sequences, the paired
    difference d(b) = Δ_treatment(b) − Δ_control(b) (the control: the mean over the directions)
    has its CONFIDENCE t-interval above 0 and a mean ≥ MIN_EFFECT for H/ln n, and below 0 with a
    mean ≤ −MIN_EFFECT for the largest weight, and the treatment's mean Δ lies beyond every
    direction's own mean Δ (above the largest for H/ln n, below the smallest for the weight);
  a layer is made CATEGORICAL (3c) if the same holds for the row cosine, downwards (removing the
    common component makes the queries agree less);
  OPPOSITE layers are those that pass the mirrored rule (removing the component sharpens, or
    makes the queries agree more), counted beside;
  a model holds if at least LAYER_SHARE of its blocks pass; the claim holds if every model
    measured holds, partly if some do, does not hold if none; fewer than MIN_SEQUENCES sequences
    make a model not testable.
The sequences share one batch mean and one set of directions, so they are not independent
replicates of the intervention, only of the inputs: the interval is over inputs.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from anisotropy_jax.metrics.correlation import t_interval
from anisotropy_jax.studies.report.verdict import (CONFIDENCE, CONFIDENCE_ALTERNATIVES, FAILS,
                                                   HOLDS, NOT_MEASURED, NOT_TESTABLE, PARTLY,
                                                   g as _g)

LAYER_SHARE = 0.5          # a model holds if at least this share of its blocks pass
MIN_EFFECT = 0.005         # |mean paired difference| at least this (H/ln n, weight, row cosine)
MIN_SEQUENCES = 5          # fewer sequences: no interval worth deciding on
DECIDING_CENTRE = "without_first"   # μ: the mean over the tokens at positions ≥ 1
DECIDING_NORM = "fixed_norm"        # every token rescaled to its original norm
TREATMENT = "remove_mean"
# The claim's two parts: name → (metric, sign of the treatment's change that Godey predicts for
# each metric: removing the common component raises H/ln n, lowers the weight / the agreement).
PARTS = {"3s": (("entropy", +1), ("max_weight", -1)), "3c": (("row_cosine", -1),)}
PART_NAMES = {"3s": "Godey 3s (trained): the common component sharpens attention",
              "3c": "Godey 3c (trained): the common component makes attention categorical"}
ALTERNATIVES = {"μ with position 0": {"centre": "with_first"},
                "no renormalisation": {"norm": "raw"},
                "at ≥ 1/4 of the layers": {"layer_share": 0.25},
                "at ≥ 3/4 of the layers": {"layer_share": 0.75},
                "effect ≥ 0": {"min_effect": 0.0}, "effect ≥ 0.02": {"min_effect": 0.02},
                **CONFIDENCE_ALTERNATIVES}


def arm(op: str, centre: str, norm: str) -> str:
    """The results' key of one intervention: 'remove_mean/without_first/fixed_norm'."""
    return f"{op}/{centre}/{norm}"


def layer_test(layer: Mapping[str, Any], part: str, centre: str = DECIDING_CENTRE,
               norm: str = DECIDING_NORM, min_effect: float = MIN_EFFECT,
               confidence: float = CONFIDENCE) -> dict[str, Any]:
    """One block's test of `part`: {"passes", "opposite", metric: {"mean", "low", "high",
    "treatment", "control_min", "control_max"}} from its results entry."""
    treated = layer["arms"][arm(TREATMENT, centre, norm)]
    control = layer["random"][f"{centre}/{norm}"]
    out: dict[str, Any] = {}
    passes = opposite = True
    for metric, sign in PARTS[part]:
        t = np.asarray(treated[metric], np.float64)
        d = t - np.asarray(control["per_sequence"][metric], np.float64)
        each = np.asarray(control["per_direction"][metric], np.float64)
        ci = t_interval(d, confidence=confidence)
        lo, hi, mean = float(ci["low"]), float(ci["high"]), float(ci["mean"])
        out[metric] = {"mean": mean, "low": lo, "high": hi, "treatment": float(t.mean()),
                       "control_min": float(each.min()), "control_max": float(each.max())}
        beyond_up = t.mean() > each.max()
        beyond_down = t.mean() < each.min()
        up = lo > 0 and mean >= min_effect and beyond_up
        down = hi < 0 and mean <= -min_effect and beyond_down
        passes &= bool(up if sign > 0 else down)
        opposite &= bool(down if sign > 0 else up)
    out.update(passes=passes, opposite=opposite)
    return out


def model_test(model: Mapping[str, Any], part: str, layer_share: float = LAYER_SHARE,
               **constants: Any) -> dict[str, Any]:
    """{"holds": bool | None (None: not testable), "passing", "opposite": [blocks], "layers":
    per block `layer_test`} of one model's results entry."""
    if model["num_sequences"] < MIN_SEQUENCES:
        return {"holds": None, "passing": [], "opposite": [], "layers": []}
    tests = [layer_test(layer, part, **constants) for layer in model["layers"]]
    passing = [layer["layer"] for layer, t in zip(model["layers"], tests) if t["passes"]]
    opposite = [layer["layer"] for layer, t in zip(model["layers"], tests) if t["opposite"]]
    return {"holds": len(passing) >= layer_share * len(tests), "passing": passing,
            "opposite": opposite, "layers": tests}


def part_rule(models: Mapping[str, Mapping[str, Any]] | None, part: str,
              layer_share: float = LAYER_SHARE, **constants: Any) -> str:
    """The verdict label of `part` over every model of {name: results entry}."""
    if not models:
        return NOT_MEASURED
    found = [model_test(m, part, layer_share, **constants)["holds"] for m in models.values()]
    oks = [ok for ok in found if ok is not None]
    if not oks:
        return NOT_TESTABLE
    return HOLDS if all(oks) else PARTLY if any(oks) else FAILS


def sensitivity(models: Mapping[str, Mapping[str, Any]], part: str) -> dict[str, str]:
    """{alternative: the verdict of `part` under it} (ALTERNATIVES)."""
    out = {}
    for label, alternative in ALTERNATIVES.items():
        out[label] = part_rule(models, part, **alternative)
    return out


def criterion(part: str) -> str:
    """The printed rule of `part`."""
    what = ("H/ln n rises and the largest weight falls" if part == "3s"
            else "the row cosine (query agreement) falls")
    return (f"per block ℓ, the residual stream entering it has its common component μ (mean over "
            f"the batch's tokens at positions ≥ 1) removed from every token, each token rescaled "
            f"to its original norm; control: a random direction of norm ‖μ‖ removed the same way "
            f"(several directions). A block passes if {what} by more than with the control: the "
            f"{CONFIDENCE:.0%} t-interval over sequences of the paired difference excludes 0 on "
            f"the predicted side, |mean| ≥ {MIN_EFFECT}, and the treatment's mean lies beyond "
            f"every direction's; a model holds if ≥ {LAYER_SHARE:.0%} of its blocks pass; holds "
            f"if every model does, partly if some, does not hold if none")


def summary_line(name: str, model: Mapping[str, Any], part: str) -> str:
    """The numbers of one model: passing and opposite blocks, the range of the paired
    differences over blocks."""
    test = model_test(model, part)
    if test["holds"] is None:
        return f"{name}: {model['num_sequences']} sequences (< {MIN_SEQUENCES}): not testable"
    parts = []
    for metric, _ in PARTS[part]:
        means = [t[metric]["mean"] for t in test["layers"]]
        parts.append(f"{metric} difference over blocks {_g(min(means))} to {_g(max(means))}")
    n = len(test["layers"])
    return (f"{name}: {len(test['passing'])} of {n} blocks pass ({_blocks(test['passing'])}), "
            f"opposite in {len(test['opposite'])} ({_blocks(test['opposite'])}); "
            + "; ".join(parts))


def _blocks(blocks: list[int]) -> str:
    return ", ".join(str(b) for b in blocks) if blocks else "none"


def verdicts(models: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[str, dict[str, str]]]:
    """{part: (verdict, sensitivity)} over every model."""
    return {part: (part_rule(models, part), sensitivity(models, part)) for part in PARTS}


def _layer_cells(model: Mapping[str, Any]) -> list[str]:
    """Per block: the paired differences (treatment − control) with their intervals, and
    whether the block passes 3s / 3c (✓), the opposite rule (↺), or neither (·)."""
    sharp, categorical = model_test(model, "3s"), model_test(model, "3c")
    rows = []
    for layer, s, c in zip(model["layers"], sharp["layers"], categorical["layers"]):
        def mark(t):
            return "✓" if t["passes"] else "↺" if t["opposite"] else "·"

        cells = [f"{_g(t['mean'])} [{_g(t['low'])}, {_g(t['high'])}]" for t in
                 (s["entropy"], s["max_weight"], c["row_cosine"])]
        rows.append(f"| {layer['layer']} | {cells[0]} | {cells[1]} | {mark(s)} | {cells[2]} | "
                    f"{mark(c)} |")
    return rows


def dose_line(name: str, model: Mapping[str, Any], centre: str = DECIDING_CENTRE,
              norm: str = DECIDING_NORM) -> str:
    """The rescaling arms and the own-mean arm of one model: in how many blocks the common
    component scaled by 0.5 gives a higher H/ln n than scaled by 2 (Godey's direction), and the
    range over blocks of each arm's mean ΔH/ln n."""
    def means(op):
        return np.asarray([np.mean(layer["arms"][arm(op, centre, norm)]["entropy"])
                           for layer in model["layers"]])

    half, double, own, removed = (means(op) for op in ("scale_0.5", "scale_2", "own_mean",
                                                       TREATMENT))
    span = "; ".join(f"{label} {_g(v.min())} to {_g(v.max())}" for label, v in
                     (("×0.5", half), ("×2", double), ("own mean", own), ("removed", removed)))
    return (f"{name}: ΔH/ln n(×0.5) > ΔH/ln n(×2) in {int(np.sum(half > double))} of "
            f"{len(half)} blocks; ΔH/ln n over blocks: {span}")


def table(folder: Any) -> str:
    """The verdicts of 3s and 3c over every intervention results.json under `folder`, then per
    model the blocks' paired differences (the doc table kind `intervention_claims`)."""
    from anisotropy_jax.studies.extreme import claims
    from anisotropy_jax.studies.report.verdict import sensitivity_entry

    models = {claims.short(n): m for n, m in claims.load(folder).items()}
    lines = ["| claim | verdict | sensitivity | per model |", "|---|---|---|---|"]
    for part, (label, alternatives) in verdicts(models).items():
        numbers = "; ".join(summary_line(n, m, part) for n, m in models.items())
        lines.append(f"| {PART_NAMES[part]} | **{label}** | "
                     f"{sensitivity_entry(label, alternatives)} | {numbers} |")
    lines += ["", "Shown beside the rule, not decided on (μ over positions ≥ 1, fixed norm, the mean "
              "over sequences of ΔH/ln n):", ""] + [f"- {dose_line(n, m)}" for n, m in models.items()]
    for name, model in models.items():
        lines += ["", f"{name}, per block (paired difference treatment − control, mean "
                  f"[{CONFIDENCE:.0%} t-interval over {model['num_sequences']} sequences]; ✓ "
                  f"passes, ↺ the opposite rule passes, · neither):", "",
                  "| block | Δ H/ln n | Δ max weight | 3s | Δ row cosine | 3c |",
                  "|---|---|---|---|---|---|"] + _layer_cells(model)
    return "\n".join(lines) + "\n"
