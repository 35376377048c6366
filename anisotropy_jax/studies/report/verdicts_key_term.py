"""Godey 4b, "the key-dependent mean term is what sharpens attention", decided on the per-head
arrays of the training study's seeds summary (`studies.train.seeds`, "per_head"): the share of
each head's entropy deficit that removing m recovers against the share that the variance-matched
control recovers (`metrics.intervention`, `metrics.matched_control`).

Why not the permutation controls: subtracting a permuted m adds about Var m to the logits while
removing m takes variance out, so "removing m raises entropy more than the permuted control" is
true whenever m contributes logit variance at all, even with uniform attention. The matched
control removes the same variance from the query-specific term instead.

Its sensitivity entry (KEY_TERM_ALTERNATIVES) recomputes it at half and twice MIN_MEAN_DEFICIT, with
a head's share undefined below a stricter entropy deficit (0.02, 0.05: the recorded shares are
already undefined below MIN_ENTROPY_DEFICIT, so the cut can only be raised), and with 90% and 99%
intervals.

Every training verdict (4a, 4b, 4c) first asks whether the objective's models learned at all
(`objective_learning`: the rule of `studies.training.learned`); one that did not is not testable.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from anisotropy_jax.metrics.correlation import mean_correlation_interval, t_interval
from anisotropy_jax.metrics.intervention import MATCH_QUALITY
from anisotropy_jax.metrics.matched_control import MIN_ENTROPY_DEFICIT
from anisotropy_jax.studies.report.verdict import (CONFIDENCE, CONFIDENCE_ALTERNATIVES, FAILS,
                                                   HOLDS, NO_TEST, PARTLY, Verdict, g,
                                                   interval as fmt_interval, not_measured,
                                                   with_sensitivity)
from anisotropy_jax.studies.train.seeds import learning as seeds_learning
from anisotropy_jax.studies.train.trends import partial_within_layers_one

# Attention counts as non-uniform for an objective when the mean over seeds and heads of the
# normalised entropy deficit 1 − H/ln L is at least this (a freshly initialised model: ~1e-4).
MIN_MEAN_DEFICIT = 0.05
KEY_TERM_ALTERNATIVES = {"mean 1 − H/ln L ≥ 0.025": {"min_mean_deficit": 0.025},
                         "mean 1 − H/ln L ≥ 0.1": {"min_mean_deficit": 0.1},
                         "a head's share defined from 1 − H ≥ 0.02": {"head_deficit": 0.02},
                         "a head's share defined from 1 − H ≥ 0.05": {"head_deficit": 0.05},
                         **CONFIDENCE_ALTERNATIVES}
SHARE_KEY_TERM, SHARE_CONTROL = ("entropy_deficit_share_key_term",
                                 "entropy_deficit_share_matched_control")
ENTROPY = "attention_entropy_normalized"
PARTIAL = "partial_within_layers/key_term_given_logit_spread"
CONTRAST = "heads_mean/delta_entropy_key_term_minus_shared_control"
CRITERION = (
    "causal, at the last checkpoint, per head: the share of the entropy deficit that removing "
    "m_j = q̄·(k_j − k̄)/√Dh from the logits recovers, (H without m − H)/(1 − H) in H/ln L, "
    "against the share recovered by the matched control: the query-specific term "
    "r_ij = (q_i − q̄)·(k_j − k̄)/√Dh times α_i, α_i (the root of smallest |α|) chosen per query "
    "so that the logit variance over its visible keys falls exactly as much as without m (where "
    "no α reaches that, the α of least variance; the fraction of such unmatched queries is "
    f"shown); a head's share is undefined where 1 − H < {MIN_ENTROPY_DEFICIT}. Per seed, the "
    "mean over the heads where both are defined of share(m) − share(control); holds if, for "
    "every trained objective, its 95% t-interval over the seeds (≥ 2 with a defined mean) is "
    "above 0 and attention is not uniform (mean over seeds and heads of 1 − H/ln L ≥ "
    f"{MIN_MEAN_DEFICIT}); does not hold if for no objective; partly otherwise; not testable if "
    "attention is uniform in every objective. Shown beside it: the within-layer partial "
    "correlation of entropy with the key term given the logit spread (Fisher-z interval over the "
    "seeds where it is defined, and why it is not) and the permutation control's difference in "
    "Δ H/ln L (it cannot fail: a permuted m adds variance)")


def key_term_share_test(share_key_term_RxN: Any, share_control_RxN: Any, entropy_RxN: Any,
                        min_mean_deficit: float = MIN_MEAN_DEFICIT,
                        head_deficit: float = MIN_ENTROPY_DEFICIT,
                        confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The rule of CRITERION for one objective from per-seed per-head arrays (R seeds, N heads)
    at one checkpoint: {"per_seed": (R,) mean over defined heads of share(m) − share(control)
    (NaN where no head is defined), "undefined_heads", "heads", "seeds_defined",
    "interval": t_interval over the defined seeds or None (< 2), "mean_deficit",
    "status": "holds" | "fails" | "uniform"}. A `head_deficit` above MIN_ENTROPY_DEFICIT leaves
    out the heads whose 1 − H/ln L is below it."""
    diff = (np.asarray(share_key_term_RxN, np.float64)
            - np.asarray(share_control_RxN, np.float64))
    if head_deficit > MIN_ENTROPY_DEFICIT:
        diff = np.where(1.0 - np.asarray(entropy_RxN, np.float64) < head_deficit, np.nan, diff)
    defined = np.isfinite(diff)
    count = defined.sum(axis=1)
    per_seed = np.where(count > 0, np.where(defined, diff, 0.0).sum(axis=1)
                        / np.maximum(count, 1), np.nan)
    finite = per_seed[np.isfinite(per_seed)]
    mean_deficit = float(np.mean(1.0 - np.asarray(entropy_RxN, np.float64)))
    ci = t_interval(finite, confidence=confidence) if finite.size >= 2 else None
    if ci is None or mean_deficit < min_mean_deficit:
        status = "uniform"
    else:
        status = "holds" if float(ci["low"]) > 0 else "fails"
    return {"per_seed": per_seed, "undefined_heads": int(diff.size - defined.sum()),
            "heads": int(diff.size), "seeds_defined": int(finite.size), "interval": ci,
            "mean_deficit": mean_deficit, "status": status}


def _at_last(per_head: Mapping[str, Any], name: str) -> np.ndarray:
    """(seeds, layers, H) of a per-head array (seeds, S, layers, H) at the last checkpoint."""
    return np.asarray(per_head[name], np.float64)[:, -1]


def _mean_interval(values_RxN: np.ndarray) -> str:
    """Mean over seeds of the per-seed mean over defined heads, with its t-interval."""
    flat = values_RxN.reshape(values_RxN.shape[0], -1)
    count = np.isfinite(flat).sum(axis=1)
    per_seed = np.where(np.isfinite(flat), flat, 0.0).sum(axis=1) / np.maximum(count, 1)
    per_seed = per_seed[count > 0]
    if per_seed.size < 2:
        return "undefined"
    ci = t_interval(per_seed)
    return fmt_interval(float(ci["mean"]), float(ci["low"]), float(ci["high"]))


def _partial_cell(doc: Mapping[str, Any]) -> str | None:
    """The within-layer partial correlation at the last checkpoint over the seeds where it is
    defined, and why it is undefined in the others (from the per-head arrays where present)."""
    q = doc["quantities"].get(PARTIAL)
    if q is None:
        return None
    rho = np.asarray(q["per_seed"], np.float64)[:, -1]
    ok = np.isfinite(rho)
    label = "partial ρ(entropy, key term | logit spread)"
    cell = (f"{label} {fmt_interval(*(float(v) for v in _fisher(rho[ok])))}" if ok.sum() >= 2
            else f"{label} defined in {int(ok.sum())} of {rho.size} seeds"
            + (f" ({g(float(rho[ok][0]))})" if ok.sum() == 1 else ""))
    if ok.all():
        return cell
    return cell + f"; undefined in {int((~ok).sum())} of {rho.size} seeds: " + _why_undefined(
        doc.get("per_head", {}), np.flatnonzero(~ok), doc["seeds"])


def _fisher(rho: np.ndarray) -> tuple[float, float, float]:
    ci = mean_correlation_interval(rho)
    return float(ci["mean"]), float(ci["low"]), float(ci["high"])


def _why_undefined(per_head: Mapping[str, Any], rows: np.ndarray, seeds: Any) -> str:
    """Which series the logit spread and the layers fix exactly in each undefined seed."""
    names = (ENTROPY, "key_term_var", "logit_var")
    if not all(n in per_head for n in names):
        return "the per-head arrays that would say why are not in these results"
    entropy, term, spread = (_at_last(per_head, n) for n in names)
    words = {"x": "entropy's ranks", "y": "the key term's ranks"}
    reasons = []
    for r in rows:
        explained = partial_within_layers_one(entropy[r], term[r], spread[r])["explained"]
        what = " and ".join(words[e] for e in explained) or "neither (a NaN input)"
        reasons.append(f"seed {seeds[r]}: {what} fixed by the logit spread's ranks and the layer")
    return "; ".join(reasons) + (" (a series the covariates fix exactly leaves no residual to "
                                 "correlate)" if reasons else "")


def _objective_numbers(doc: Mapping[str, Any], test: dict[str, Any]) -> str:
    heads = doc["per_head"]
    ci = test["interval"]
    difference = (fmt_interval(float(ci["mean"]), float(ci["low"]), float(ci["high"]))
                  if ci is not None else
                  f"undefined ({test['seeds_defined']} seeds with a defined head)")
    cells = [f"share of the entropy deficit recovered without m "
             f"{_mean_interval(_at_last(heads, SHARE_KEY_TERM))}",
             f"with the matched control {_mean_interval(_at_last(heads, SHARE_CONTROL))}",
             f"difference {difference}",
             f"{test['undefined_heads']} of {test['heads']} seed-heads undefined (1 − H/ln L < "
             f"{MIN_ENTROPY_DEFICIT})", f"mean 1 − H/ln L {g(test['mean_deficit'])}"]
    if all(n in heads for n in MATCH_QUALITY):
        unmatched, shortfall = (float(np.mean(_at_last(heads, n))) for n in MATCH_QUALITY)
        cells.append(f"control unmatched in {g(unmatched)} of the queries (variance it could "
                     f"not remove: {g(shortfall)} of the logit variance)")
    return ", ".join(cells)


def objective_learning(objective: str, doc: Mapping[str, Any]) -> dict[str, Any]:
    """Whether the models of one objective's seeds summary learned (`studies.train.seeds.learning`:
    every seed's final validation loss below the rule's threshold); "note" is '' when they did."""
    return seeds_learning(doc, (doc.get("scope") or {}).get("objective", objective))


def godey_4b(training: Mapping[str, Mapping[str, Any]] | None, reason: str = "") -> Verdict:
    """`godey_4b_rule` with its sensitivity entry (KEY_TERM_ALTERNATIVES)."""
    return with_sensitivity(godey_4b_rule, KEY_TERM_ALTERNATIVES, training, reason)


def godey_4b_rule(training: Mapping[str, Mapping[str, Any]] | None, reason: str = "",
                  min_mean_deficit: float = MIN_MEAN_DEFICIT,
                  head_deficit: float = MIN_ENTROPY_DEFICIT,
                  confidence: float = CONFIDENCE) -> Verdict:
    """CRITERION on {objective: seeds summary}; None (with the reason) when not run. An objective
    whose models did not learn (`objective_learning`) counts as uniform attention does: not
    testable, so never "holds". The constants: those of `key_term_share_test`."""
    if not training:
        return not_measured("godey_4b", CRITERION, reason or "no training run")
    statuses, numbers = [], []
    for objective, doc in training.items():
        head = f"{objective} ({len(doc['seeds'])} seeds, step {doc['steps'][-1]}): "
        note = objective_learning(objective, doc)["note"]
        if note:
            statuses.append("untrained")
            numbers.append(head + f"not testable, {note}")
            continue
        extra = [c for c in (_contrast_cell(doc), _partial_cell(doc)) if c]
        per_head = doc.get("per_head", {})
        if not all(n in per_head for n in (SHARE_KEY_TERM, SHARE_CONTROL, ENTROPY)):
            numbers.append(head + ", ".join(["no matched control in its analysis (results made "
                                             "before it)", *extra]))
            continue
        test = key_term_share_test(*(_at_last(per_head, n).reshape(len(doc["seeds"]), -1)
                                     for n in (SHARE_KEY_TERM, SHARE_CONTROL, ENTROPY)),
                                   min_mean_deficit, head_deficit, confidence)
        statuses.append(test["status"])
        numbers.append(head + ", ".join([_objective_numbers(doc, test), *extra]))
    if not statuses:
        return not_measured("godey_4b", CRITERION, "; ".join(numbers))
    if all(s in ("uniform", "untrained") for s in statuses):
        verdict = NO_TEST
    else:
        verdict = (HOLDS if all(s == "holds" for s in statuses)
                   else PARTLY if "holds" in statuses else FAILS)
    return Verdict("godey_4b", CRITERION, verdict, tuple(numbers), training_scope(training))


def _contrast_cell(doc: Mapping[str, Any]) -> str | None:
    q = doc["quantities"].get(CONTRAST)
    if q is None:
        return None
    mean, low, high = (float(np.ravel(q[k])[-1]) for k in ("mean", "low", "high"))
    return f"permutation control's Δ H/ln L difference (cannot fail) {fmt_interval(mean, low, high)}"


def training_scope(training: Mapping[str, Mapping[str, Any]]) -> str:
    """The models, training length, tokens seen and seeds each objective's verdict rests on (the
    `scope` a seeds summary records; older summaries recorded only the seeds and steps)."""
    parts = []
    for objective, doc in training.items():
        sc = doc.get("scope")
        if sc:
            parts.append(f"{objective}: d = {sc['d_model']}, {sc['num_layers']} layers, "
                         f"{sc['num_heads']} heads, L = {sc['seq_len']}, batch {sc['batch_size']}, "
                         f"{sc['steps']:,} steps ({sc['tokens_seen']:,} tokens seen), "
                         f"{sc['precision']} matmuls, {len(doc['seeds'])} seeds, on {sc['device']}")
        else:
            parts.append(f"{objective}: {len(doc['seeds'])} seeds, {doc['steps'][-1]} steps "
                         f"(model size not recorded)")
    return "byte-level models trained here from scratch (" + "; ".join(parts) + ")"
