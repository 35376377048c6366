"""Godey 3a and 3b from the bias sweep's results.json, decided at the operating points real models
have and separated from the norm effect by the controls (docs/SWEEP.md, "The controls").

Operating points: the s where the biased inputs' average cosine lies in 0.1–0.6, the range
measured in SmolLM2 and DINOv2 (`studies.sweep.controls.INPUT_COSINE_RANGE`). Every comparison is
paired seed by seed (the runs of one sweep share weights, z and u), with a 95% Student-t interval
over the seeds' differences; the largest s is reported beside the operating points. The
sensitivity entry recomputes each verdict over a wider and a narrower range of input cosines and
with 90% and 99% intervals (SWEEP_ALTERNATIVES).

  biased        x = z + s·u              shared direction and norm growth
  norm_matched  x = z·√(1 + s²/d)        norm growth only
  fixed_norm    x = (z + s·u)/√(1 + s²/d)  shared direction only
  per_sequence  x = z + s·u_b            a direction per sequence: no cross-sequence anisotropy
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from anisotropy_jax.configs.report import PRE_LN_PREFIX
from anisotropy_jax.configs.sweep import upgrade_recorded
from anisotropy_jax.metrics.correlation import t_interval
from anisotropy_jax.studies.report.verdict import (CONFIDENCE, CONFIDENCE_ALTERNATIVES, FAILS,
                                                   HOLDS, PARTLY, Verdict, g, interval,
                                                   not_measured, with_sensitivity)
from anisotropy_jax.studies.sweep.controls import INPUT_COSINE_RANGE, operating_points

ENTROPY, AGREEMENT = "attention_entropy_normalized", "attention_query_agreement"
# The sensitivity entry of 3a and 3b: the operating points' range of input cosines widened and
# narrowed, and the intervals' level.
SWEEP_ALTERNATIVES = {"input cosine 0.05–0.8": {"cosine_range": (0.05, 0.8)},
                      "input cosine 0.2–0.5": {"cosine_range": (0.2, 0.5)},
                      **CONFIDENCE_ALTERNATIVES}


def _runs(sweep: Mapping[str, Any], pre_ln: bool) -> dict[str, Mapping[str, Any]]:
    """{inputs kind: run} of the post-LN (first) or the pre-LN sweep."""
    return {r["inputs"]: r for label, r in sweep.get("runs", {}).items()
            if label.startswith(PRE_LN_PREFIX) == pre_ln}


def _per_seed(run: Mapping[str, Any], metric: str) -> np.ndarray:
    return np.asarray(run["metrics"][metric]["per_seed"], np.float64)  # (seeds, s)


def _change(run: Mapping[str, Any], metric: str, i: int, confidence: float = CONFIDENCE
            ) -> tuple[float, float, float]:
    """Per-seed metric at s_i minus at s = 0 (index 0): mean and t-interval over seeds."""
    values = _per_seed(run, metric)
    q = t_interval(values[:, i] - values[:, 0], confidence=confidence)
    return float(q["mean"]), float(q["low"]), float(q["high"])


def _gap(a: Mapping[str, Any], b: Mapping[str, Any], metric: str, i: int,
         confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """Run a minus run b at s_i, paired over seeds."""
    q = t_interval(_per_seed(a, metric)[:, i] - _per_seed(b, metric)[:, i], confidence=confidence)
    return float(q["mean"]), float(q["low"]), float(q["high"])


def _points(sweep: Mapping[str, Any], biased: Mapping[str, Any],
            cosine_range: tuple[float, float] = INPUT_COSINE_RANGE) -> list[int]:
    """The operating points' indices: from the sweep's "controls" summary where it used
    `cosine_range`, else recomputed from the biased run's per-seed input cosine."""
    entry = sweep.get("controls", {}).get(biased["label"], {})
    if tuple(entry.get("input_cosine_range", INPUT_COSINE_RANGE)) == tuple(cosine_range):
        return [int(i) for i in entry.get("operating_points", [])]
    return operating_points(biased["bias_norms"], _per_seed(biased, "input_cosine"), cosine_range)


def _scope(biased: Mapping[str, Any]) -> str:
    c = upgrade_recorded(biased["sweep_config"])  # results.json of any form
    b = c["model"]
    return (f"one untrained {b['norm_position']}-LN block, d = {b['d_model']}, {b['num_heads']} "
            f"heads, init {b['init']} (σ = {b.get('init_std', 0.02)}), Gaussian inputs, "
            f"L = {c['seq_len']}, {_per_seed(biased, ENTROPY).shape[0]} seeds")


def _checked(key: str, crit: str, sweep: Mapping[str, Any] | None, needs: tuple[str, ...],
             reason: str, cosine_range: tuple[float, float] = INPUT_COSINE_RANGE
             ) -> tuple[dict[str, Mapping[str, Any]], list[int]] | Verdict:
    runs = {} if sweep is None else _runs(sweep, pre_ln=False)
    missing = [k for k in needs if k not in runs]
    if missing:
        return not_measured(key, crit, reason or f"the sweep has no {', '.join(missing)} run")
    if upgrade_recorded(runs["biased"]["sweep_config"])["model"]["norm_position"] != "post":
        return not_measured(key, crit, "the sweep's first block is not post-LN")
    if _per_seed(runs["biased"], ENTROPY).shape[0] < 2:
        return not_measured(key, crit, "one seed: no interval over seeds")
    points = _points(sweep, runs["biased"], cosine_range)
    if not points:
        return not_measured(key, crit, "no s of the grid has an input cosine in "
                            f"{cosine_range[0]:g}–{cosine_range[1]:g}")
    return runs, points


def _s(run: Mapping[str, Any], i: int) -> str:
    return f"s = {g(run['bias_norms'][i])} (input cosine {g(run['metrics']['input_cosine']['mean'][i])})"


def godey_3a(sweep: Mapping[str, Any] | None, reason: str = "") -> Verdict:
    """`godey_3a_rule` with its sensitivity entry (SWEEP_ALTERNATIVES)."""
    return with_sensitivity(godey_3a_rule, SWEEP_ALTERNATIVES, sweep, reason)


def godey_3a_rule(sweep: Mapping[str, Any] | None, reason: str = "",
                  cosine_range: tuple[float, float] = INPUT_COSINE_RANGE,
                  confidence: float = CONFIDENCE) -> Verdict:
    crit = ("holds if, at every operating point (input cosine 0.1–0.6), the shared direction "
            "alone sharpens attention: the fixed-norm inputs' H/ln L is below its s = 0 value "
            "(95% t-interval over seeds of the paired change below 0); partly if only the biased "
            "inputs sharpen it there (then the norm growth does: the norm-matched control shows "
            "it); does not hold if the biased inputs do not")
    found = _checked("godey_3a", crit, sweep, ("biased", "fixed_norm", "norm_matched"), reason,
                     cosine_range)
    if isinstance(found, Verdict):
        return found
    runs, points = found
    biased_oks, direction_oks, numbers = [], [], []
    for i in points + [len(runs["biased"]["bias_norms"]) - 1]:
        changes = {k: _change(runs[k], ENTROPY, i, confidence)
                   for k in ("biased", "fixed_norm", "norm_matched")}
        if i in points:
            biased_oks.append(changes["biased"][2] < 0)
            direction_oks.append(changes["fixed_norm"][2] < 0)
        numbers.append(f"{_s(runs['biased'], i)}{'' if i in points else ' (largest s)'}: "
                       "change of H/ln L from s = 0: "
                       + ", ".join(f"{k} {interval(*c)}" for k, c in changes.items()))
    pre = _runs(sweep, pre_ln=True).get("biased")
    if pre is not None and _per_seed(pre, ENTROPY).shape[0] >= 2:
        for i in _points(sweep, pre):
            numbers.append(f"pre-LN block, {_s(pre, i)}: biased change of H/ln L "
                           f"{interval(*_change(pre, ENTROPY, i))} (> 0: the bias flattens)")
    verdict = (HOLDS if all(direction_oks) else PARTLY if all(biased_oks) else FAILS)
    return Verdict("godey_3a", crit, verdict, tuple(numbers), _scope(runs["biased"]))


def godey_3b(sweep: Mapping[str, Any] | None, reason: str = "") -> Verdict:
    """`godey_3b_rule` with its sensitivity entry (SWEEP_ALTERNATIVES)."""
    return with_sensitivity(godey_3b_rule, SWEEP_ALTERNATIVES, sweep, reason)


def godey_3b_rule(sweep: Mapping[str, Any] | None, reason: str = "",
                  cosine_range: tuple[float, float] = INPUT_COSINE_RANGE,
                  confidence: float = CONFIDENCE) -> Verdict:
    crit = ("holds if, at every operating point (input cosine 0.1–0.6), the biased inputs' query "
            "agreement exceeds the norm-matched control's (paired 95% t-interval over seeds above "
            "0), i.e. categorical attention comes from the shared direction, not from the norm; "
            "partly if that holds at the largest s only; the fixed-norm control (direction "
            "without the norm) and the per-sequence bias (categorical within a sequence, no "
            "cross-sequence anisotropy) are shown beside it")
    found = _checked("godey_3b", crit, sweep, ("biased", "norm_matched"), reason, cosine_range)
    if isinstance(found, Verdict):
        return found
    runs, points = found
    last = len(runs["biased"]["bias_norms"]) - 1
    oks, numbers = {}, []
    for i in points + [last]:
        gap = _gap(runs["biased"], runs["norm_matched"], AGREEMENT, i, confidence)
        oks[i] = gap[1] > 0
        cells = [f"biased − norm-matched {interval(*gap)}"]
        for kind in ("fixed_norm", "per_sequence"):
            if kind in runs:
                other = _gap(runs[kind], runs["biased"], AGREEMENT, i, confidence)
                cells.append(f"{kind.replace('_', '-')} − biased {interval(*other)}")
        numbers.append(f"{_s(runs['biased'], i)}{'' if i in points else ' (largest s)'}: "
                       "query agreement " + ", ".join(cells))
    at_points = all(oks[i] for i in points)
    verdict = HOLDS if at_points else PARTLY if oks[last] else FAILS
    return Verdict("godey_3b", crit, verdict, tuple(numbers), _scope(runs["biased"]))
