"""Godey 4a and 4c from the training study's seeds summaries: whether a quantity rises during
training, read as the change from the first checkpoint after the early transient to the last,
with a t-interval over seeds (the seeds are the independent units).

The sensitivity entry recomputes each verdict from an earlier and a later start of that window
(TREND_ALTERNATIVES) and with 90% and 99% intervals; the numbers show, beside the decided change,
the change from later starts (SENSITIVITY_STARTS).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from anisotropy_jax.studies.report.verdict import (CONFIDENCE, CONFIDENCE_ALTERNATIVES, NO_TEST,
                                                   Verdict, all_or_some, g, interval,
                                                   not_measured, with_sensitivity)
from anisotropy_jax.studies.report.verdicts_key_term import objective_learning, training_scope

# Godey 4a and 4c are decided on the trend after the early transient (a rule fixed before the GPU
# runs): the change from the first checkpoint at step ≥ TRANSIENT_END_STEP to the last. The CPU
# runs showed a transient peaking near step 16 whose first → last change says nothing about where
# training goes.
TRANSIENT_END_STEP = 100


# Shown beside 4a's and 4c's change: the same change from later window starts (not decided on:
# the rule's start stays TRANSIENT_END_STEP).
SENSITIVITY_STARTS = (256, 512, 1000)
# The sensitivity entry of 4a and 4c: the verdict from a window starting at half and five times
# TRANSIENT_END_STEP, and at the intervals' other levels.
TREND_ALTERNATIVES = {"start at step ≥ 50": {"from_step": 50},
                      "start at step ≥ 500": {"from_step": 500}, **CONFIDENCE_ALTERNATIVES}


def trend_after_transient(doc: Mapping[str, Any], quantity: str,
                          from_step: int = TRANSIENT_END_STEP,
                          confidence: float = CONFIDENCE) -> dict[str, Any] | None:
    """The per-seed change of `quantity` (a seeds summary's `quantities[...]["per_seed"]`, seeds ×
    checkpoints) from the first checkpoint at step ≥ `from_step` to the last, with its
    t-interval over seeds; the transient's peak (the largest seed mean before that checkpoint, and
    its step) and the seed-mean curve. None when the quantity is absent or no checkpoint at step ≥
    `from_step` comes before the last one."""
    from anisotropy_jax.metrics.correlation import t_interval

    q = doc["quantities"].get(quantity)
    steps = [int(s) for s in doc["steps"]]
    start = next((i for i, s in enumerate(steps) if s >= from_step), None)
    if q is None or "per_seed" not in q or start is None or start >= len(steps) - 1:
        return None
    values = np.asarray(q["per_seed"], np.float64)
    curve = values.mean(axis=0)
    peak = int(np.argmax(curve[:start])) if start > 0 else 0
    return {"from_step": steps[start], "to_step": steps[-1], "steps": steps, "curve": curve,
            "peak_step": steps[peak], "peak": float(curve[peak]),
            **t_interval(values[:, -1] - values[:, start], confidence=confidence)}


def _seeded_change(key: str, crit: str, training: Mapping[str, Mapping[str, Any]] | None,
                   quantity: str, label: str, reason: str, from_step: int = TRANSIENT_END_STEP,
                   confidence: float = CONFIDENCE) -> Verdict:
    """HOLDS when, for every objective, `trend_after_transient` of `quantity` has a t-interval
    over seeds above 0; PARTLY when for some; FAILS when for none. An objective whose models did
    not learn (`objective_learning`) is not testable: it counts as not holding, and when no
    objective learned the verdict is NO_TEST."""
    if not training:
        return not_measured(key, crit, reason or "no training run")
    oks, numbers, untrained = [], [], 0
    for objective, doc in training.items():
        note = objective_learning(objective, doc)["note"]
        if note:
            numbers.append(f"{objective} ({len(doc['seeds'])} seeds): not testable, {note}")
            untrained += 1
            continue
        trend = trend_after_transient(doc, quantity, from_step, confidence)
        if trend is None:
            numbers.append(f"{objective}: {label} has no checkpoint at step ≥ "
                           f"{from_step} before the last (steps {doc['steps'][0]} … "
                           f"{doc['steps'][-1]}): not available")
            continue
        oks.append(bool(trend["low"] > 0))
        curve = ", ".join(f"{s}: {g(v)}" for s, v in zip(trend["steps"], trend["curve"]))
        numbers.append(f"{objective} ({len(doc['seeds'])} seeds): {label} change from step "
                       f"{trend['from_step']} to {trend['to_step']} "
                       f"{interval(float(trend['mean']), float(trend['low']), float(trend['high']))}; "
                       f"the transient peaks at {g(trend['peak'])} (step {trend['peak_step']}); "
                       f"seed-mean curve {curve}" + _later_starts(doc, quantity, trend))
    if not oks:
        if untrained:
            return Verdict(key, crit, NO_TEST, tuple(numbers), training_scope(training))
        return not_measured(key, crit, "; ".join(numbers))
    return Verdict(key, crit, all_or_some(oks + [False] * untrained), tuple(numbers),
                   training_scope(training))


def _later_starts(doc: Mapping[str, Any], quantity: str, trend: Mapping[str, Any]) -> str:
    """'; from a later start: step 256: …, 512: …' (the starts with a checkpoint before the last)."""
    cells, seen = [], {trend["from_step"]}
    for start in SENSITIVITY_STARTS:
        t = trend_after_transient(doc, quantity, start)
        if t is not None and t["from_step"] not in seen:
            seen.add(t["from_step"])
            cells.append(f"step {t['from_step']}: "
                         f"{interval(float(t['mean']), float(t['low']), float(t['high']))}")
    return f"; from a later start (sensitivity) {', '.join(cells)}" if cells else ""


_TREND_RULE = (f"the change from the first checkpoint at step ≥ {TRANSIENT_END_STEP} (after the "
               f"early transient) to the last has a 95% t-interval over seeds above 0: holds if "
               f"for every trained objective, partly if for some, does not hold if for none; the "
               f"transient's peak, the whole seed-mean curve and the change from later starts "
               f"({', '.join(map(str, SENSITIVITY_STARTS))}; not decided on) are shown")


def godey_4a_rule(training: Mapping[str, Mapping[str, Any]] | None, reason: str = "",
                  from_step: int = TRANSIENT_END_STEP, confidence: float = CONFIDENCE) -> Verdict:
    crit = "|cos(q̄, k̄)| (mean over heads) rises during training: " + _TREND_RULE
    return _seeded_change("godey_4a", crit, training, "heads_mean/abs_mean_query_key_cosine",
                          "|cos(q̄, k̄)|", reason, from_step, confidence)


def godey_4c_rule(training: Mapping[str, Mapping[str, Any]] | None, reason: str = "",
                  from_step: int = TRANSIENT_END_STEP, confidence: float = CONFIDENCE) -> Verdict:
    crit = "the intermediate layers' cross-sequence cosine rises during training: " + _TREND_RULE
    return _seeded_change("godey_4c", crit, training, "intermediate_cross_sequence_cosine",
                          "intermediate cross-sequence cosine", reason, from_step, confidence)


def godey_4a(training: Mapping[str, Mapping[str, Any]] | None, reason: str = "") -> Verdict:
    """`godey_4a_rule` with its sensitivity entry (TREND_ALTERNATIVES)."""
    return with_sensitivity(godey_4a_rule, TREND_ALTERNATIVES, training, reason)


def godey_4c(training: Mapping[str, Mapping[str, Any]] | None, reason: str = "") -> Verdict:
    """`godey_4c_rule` with its sensitivity entry (TREND_ALTERNATIVES)."""
    return with_sensitivity(godey_4c_rule, TREND_ALTERNATIVES, training, reason)
