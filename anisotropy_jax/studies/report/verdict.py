"""What a verdict is: the claims, where each comes from, the verdict labels, and the helpers every
criterion shares (anisotropy_jax/studies/report/verdicts.py computes them).

A claim is labelled by its ORIGIN: stated in the paper (its abstract or conclusions say it; we
paraphrase), reconstructed (the protocol that tests it was rebuilt from secondary sources, not
quoted from the paper), or this project's own question. A verdict carries its SCOPE: what was
measured (models, modalities, synthetic or real inputs, sizes) and what the claim covers that
was not.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

HOLDS, PARTLY, FAILS = "holds", "partly", "does not hold"
NOT_TESTABLE, NOT_MEASURED = "not testable at this scale", "not measured"
NO_TEST = "not testable with these models"  # measured, but none of them can answer the claim
VERDICTS = (HOLDS, PARTLY, FAILS, NOT_TESTABLE, NO_TEST, NOT_MEASURED)

STATED = "stated in the paper (paraphrased)"
RECONSTRUCTED = ("reconstructed: the protocol was rebuilt from secondary sources, not quoted "
                 "from the paper")
OURS = "this project's question (not a claim of the papers)"

CLAIMS = {  # key: (row name, claim, origin)
    "godey_1": ("Godey 1", "anisotropy across modalities (vision, speech), not in CNNs", STATED),
    "godey_2": ("Godey 2", "drift correlates with anisotropy across layers, for some models",
                STATED),
    "godey_3a": ("Godey 3a", "a common bias sharpens attention in an untrained post-LN block",
                 RECONSTRUCTED),
    "godey_3b": ("Godey 3b", "that attention is categorical (same keys for all queries), "
                             "not a norm effect", RECONSTRUCTED),
    "godey_4a": ("Godey 4a", "mean query and mean key drift into alignment during training",
                 RECONSTRUCTED),
    "godey_4b": ("Godey 4b", "the key-dependent mean term is what sharpens attention",
                 RECONSTRUCTED),
    "godey_4c": ("Godey 4c", "intermediate-layer anisotropy rises with training", RECONSTRUCTED),
    "mm_a": ("Machina & Mercer a", "large Pythia models have isotropic embedding matrices",
             STATED),
    "mm_b": ("Machina & Mercer b", "the final LayerNorm is tuned for isotropy", STATED),
    "depth_a": ("Depth a", "untrained pure-attention stacks collapse to rank one with depth "
                           "(Dong, Cordonnier & Loukas 2021)", STATED),
    "depth_b": ("Depth b", "that rank collapse is anisotropy", OURS),
}


@dataclasses.dataclass(frozen=True)
class Verdict:
    key: str
    criterion: str
    verdict: str
    numbers: tuple[str, ...] = ()
    scope: str = ""
    # {alternative choice: the verdict of the same rule under it} (`with_sensitivity`); empty
    # where the claim was not measured
    sensitivity: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def sensitivity_entry(self) -> str:
        return sensitivity_entry(self.verdict, self.sensitivity)

    @property
    def name(self) -> str:
        return CLAIMS[self.key][0]

    @property
    def claim(self) -> str:
        return CLAIMS[self.key][1]

    @property
    def origin(self) -> str:
        return CLAIMS[self.key][2]


def g(x: float) -> str:
    """The printed precision of every number in the report: 3 significant digits."""
    return f"{x:.3g}"


def below_precision(a: float, b: float) -> bool:
    """Whether a and b print the same: a verdict decided by their difference says so."""
    return g(a) == g(b)


PRECISION_NOTE = "decided by a difference below the printed precision (3 significant digits)"


def precision_note(values: Sequence[float], thresholds: Sequence[float] | float) -> str:
    """PRECISION_NOTE (with a leading '; ') when any value prints like the threshold it was
    compared with, else ''."""
    limits = ([thresholds] * len(values) if isinstance(thresholds, (int, float))
              else list(thresholds))
    close = any(below_precision(float(v), float(t)) for v, t in zip(values, limits))
    return f"; {PRECISION_NOTE}" if close else ""


def interval(m: float, lo: float, hi: float) -> str:
    return f"{g(m)} [{g(lo)}, {g(hi)}]"


def not_measured(key: str, criterion: str, reason: str, scope: str = "") -> Verdict:
    return Verdict(key, criterion, NOT_MEASURED, (f"not measured: {reason}",), scope)


def all_or_some(oks: Sequence[bool]) -> str:
    """HOLDS when every unit passes, PARTLY when some do, FAILS when none does."""
    if oks and all(oks):
        return HOLDS
    return PARTLY if any(oks) else FAILS


CONFIDENCE = 0.95  # the level of every t-interval a verdict is decided on
# The alternative levels of a verdict decided on t-intervals (its sensitivity entry).
CONFIDENCE_ALTERNATIVES = {"90% intervals": {"confidence": 0.90},
                           "99% intervals": {"confidence": 0.99}}


def with_sensitivity(rule: Callable[..., Verdict], alternatives: Mapping[str, Mapping[str, Any]],
                     *args: Any) -> Verdict:
    """`rule(*args)` (its constants at their defaults) with its sensitivity: the verdict of
    `rule(*args, **alternative)` for each {label: alternative constants}. A claim not measured
    keeps an empty sensitivity (its entry: "–")."""
    v = rule(*args)
    if v.verdict == NOT_MEASURED:
        return v
    return dataclasses.replace(v, sensitivity={label: rule(*args, **alternative).verdict
                                               for label, alternative in alternatives.items()})


def sensitivity_entry(verdict: str, sensitivity: Mapping[str, str]) -> str:
    """"–" (not measured, or no alternative), "robust (A, B, …)" when every alternative gives
    the same verdict, else "flips under A (→ partly); …; the same under B, …". An alternative
    that the results cannot decide (its verdict "not measured", e.g. no checkpoint after a later
    start) is named apart ("not recomputable from these results under C") and counts as no
    flip."""
    if verdict == NOT_MEASURED or not sensitivity:
        return "–"
    flips = [f"{label} (→ {v})" for label, v in sensitivity.items()
             if v not in (verdict, NOT_MEASURED)]
    same = [label for label, v in sensitivity.items() if v == verdict]
    unknown = [label for label, v in sensitivity.items() if v == NOT_MEASURED]
    if flips:
        parts = ["flips under " + "; ".join(flips)] + (
            [f"the same under {', '.join(same)}"] if same else [])
    else:
        parts = [f"robust ({', '.join(same)})"] if same else []
    if unknown:
        parts.append(f"not recomputable from these results under {', '.join(unknown)}")
    return "; ".join(parts)
