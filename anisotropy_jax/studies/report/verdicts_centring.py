"""The verdict on Godey 2 (drift tracks anisotropy) from the pretrained study's results.json:
whether centring removes most of what training added to the average cosine, decided with the
centre that leaves the massive tokens out (see GODEY_2_SHARE). Its sensitivity entry
(GODEY_2_ALTERNATIVES) recomputes it with the plain mean's and the per-dimension median's centring,
half and one and a half times DRIFT_SHARE, a quarter and three quarters of the states, and one and
three networks; the 100× massive-token cut is the pretrained study's, recorded in the share it
wrote, and cannot be moved here."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from anisotropy_jax.studies.report.verdict import (NO_TEST, Verdict, all_or_some, g as _g,
                                                   not_measured as _not_measured, precision_note,
                                                   with_sensitivity)

DRIFT_SHARE = 0.5           # the share of the anisotropy centring must remove


def intermediate(labels: Sequence[str]) -> list[int]:
    """The states between the embedding output and the last state (a final norm's output, or
    the last layer): the 'intermediate layers' of the claims."""
    return list(range(1, len(labels) - 1))


def _seed_rows(doc: Mapping[str, Any], metric: str, inner: list[int]) -> np.ndarray:
    return np.asarray([[np.nan if v is None else v for v in run] for run in
                       doc["untrained_seeds"]["metrics"][metric]], np.float64)[:, inner]


def _trained_row(doc: Mapping[str, Any], metric: str, inner: list[int]) -> np.ndarray:
    return np.asarray([np.nan if v is None else v for v in doc["metrics"]["trained"][metric]],
                      np.float64)[inner]


def _span(values: np.ndarray) -> str:
    """'min–max' of the finite values; a share is undefined where there is no anisotropy."""
    finite = values[np.isfinite(values)]
    return (f"{_g(finite.min())}–{_g(finite.max())}" if finite.size
            else "undefined (average cosine below 0.01)")


# Godey 2 is decided with the centre that leaves the massive tokens out of the mean (a rule fixed
# before the runs that decide it): one token carrying up to 13,820x the median activation drags the
# plain mean, and subtracting that mean adds a shared direction to every other token. The plain
# mean's and the per-dimension median's shares are its sensitivity entry.
GODEY_2_SHARE = "centering_removed_share_without_massive"
GODEY_2_SENSITIVITY = {"plain mean": "centering_removed_share",
                       "per-dimension median": "centering_removed_share_median"}
GODEY_2_MODELS = 2          # Godey 2 is decided on at least this many trained networks
STATE_SHARE = 0.5           # a model passes at at least this share of its raised states
GODEY_2_ALTERNATIVES = {
    **{f"centred by the {label}": {"share_key": key} for label, key in GODEY_2_SENSITIVITY.items()},
    "removes ≥ 25%": {"drift_share": 0.25}, "removes ≥ 75%": {"drift_share": 0.75},
    "at ≥ 1/4 of the states": {"state_share": 0.25},
    "at ≥ 3/4 of the states": {"state_share": 0.75},
    "≥ 1 network": {"min_models": 1}, "≥ 3 networks": {"min_models": 3}}


def _godey_2_model(name: str, doc: Mapping[str, Any], share_key: str = GODEY_2_SHARE,
                   drift_share: float = DRIFT_SHARE, state_share: float = STATE_SHARE
                   ) -> tuple[bool | None, str]:
    """(passes, or None when training raised the anisotropy nowhere; the numbers' text)."""
    inner = intermediate(doc["model"]["state_labels"])
    cos = _trained_row(doc, "average_cosine", inner)
    raised = cos > np.max(_seed_rows(doc, "average_cosine", inner), axis=0)
    rho = doc["correlations"]["trained"]["drift_norm_vs_average_cosine"]
    # no p: the states of one network are not independent samples
    tail = f"; ρ(drift, cosine) = {_g(rho['spearman'])} over {rho['n']} states of one network"
    if not raised.any():
        return None, (f"{name}: training raised the average cosine above the untrained seeds "
                      f"at none of {len(inner)} intermediate states{tail}")
    share = _trained_row(doc, share_key, inner)[raised]
    removed = int(np.sum(share >= drift_share))
    others = "; ".join(
        f"{label}: {int(np.sum(_trained_row(doc, key, inner)[raised] >= DRIFT_SHARE))} of "
        f"{int(raised.sum())} (share {_span(_trained_row(doc, key, inner)[raised])})"
        for label, key in GODEY_2_SENSITIVITY.items())
    untrained = _seed_rows(doc, share_key, inner)
    return removed >= raised.sum() * state_share, (
        f"{name}: centring without the massive tokens removes ≥ {drift_share:.0%} at {removed} "
        f"of the {int(raised.sum())} intermediate states where training raised the anisotropy "
        f"(share {_span(share)}; untrained {_span(untrained)}, {untrained.shape[0]} seeds); "
        f"sensitivity, the same count centred by the {others}{tail}"
        + precision_note(share, drift_share))


def godey_2(pretrained: Mapping[str, Mapping[str, Any]] | None, reason: str = "") -> Verdict:
    """`godey_2_rule` with its sensitivity entry (GODEY_2_ALTERNATIVES)."""
    return with_sensitivity(godey_2_rule, GODEY_2_ALTERNATIVES, pretrained, reason)


def godey_2_rule(pretrained: Mapping[str, Mapping[str, Any]] | None, reason: str = "",
                 share_key: str = GODEY_2_SHARE, drift_share: float = DRIFT_SHARE,
                 state_share: float = STATE_SHARE, min_models: int = GODEY_2_MODELS) -> Verdict:
    """{model: pretrained results.json}: where training raised the anisotropy above every
    untrained seed, does centring (removing the drift) remove most of it?"""
    crit = ("the average cosine of equal-norm vectors is a function of their drift, so ρ(drift, "
            "cosine) is not the test (shown beside it, without a p: the states of one network are "
            "not independent samples). The centre is the mean of the tokens that are not massive "
            "(max |h| ≥ 100× the state's median |h|), whose pull on the plain mean adds a shared "
            "direction to every other token; a model passes if, at at least half of the "
            "intermediate states where training raised the average cosine above every one of "
            "≥ 2 untrained re-initialisations, centring removes at least "
            f"{DRIFT_SHARE:.0%} of it ((average − centred average cosine)/average). Holds if "
            f"every such model passes and there are ≥ {GODEY_2_MODELS}; partly if some pass; "
            "does not hold if none does; a model whose training raised the anisotropy nowhere "
            f"cannot test the claim, and fewer than {GODEY_2_MODELS} models that can leave it "
            "not testable")
    found = {n: d for n, d in (pretrained or {}).items()
             if {GODEY_2_SHARE, share_key} <= set(d["metrics"].get("trained", {}))
             and len((d.get("untrained_seeds") or {}).get("seeds", [])) >= 2}
    if not found:
        return _not_measured("godey_2", crit, reason or "no pretrained model with the massive-"
                             "token-free centring and ≥ 2 untrained seeds")
    decided = [_godey_2_model(name, doc, share_key, drift_share, state_share)
               for name, doc in found.items()]
    oks = [ok for ok, _ in decided if ok is not None]
    verdict = NO_TEST if len(oks) < min_models else all_or_some(oks)
    return Verdict("godey_2", crit, verdict, tuple(text for _, text in decided),
                   f"text models {', '.join(found)} on natural text, hidden states per layer")


