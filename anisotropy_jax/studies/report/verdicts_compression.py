"""Li et al.'s compression phase (NeurIPS 2025), fixed before the runs: their account explains a
late fall of RankMe (with a rise of α-ReQ) by cross-entropy under skewed token frequencies with
d ≪ |V|. The byte models of the normalisation grid have |V| = 256 (Bigram-Backcopy: 64 task
tokens) below d, so the account predicts no compression phase for them; the BPE models of the
embeddings study (|V| = 8,192 above d) are the control that must show one.

The input is two lists of runs, one per seed, each {"steps": [S], "series": {"rankme_last",
"alpha_req_last": [S values]}}: RankMe and α-ReQ of the last block's output (the final hidden
state, as it enters the final norm) at each analysed checkpoint. The seeds are the independent
units; intervals are 95% Student-t over seeds.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from anisotropy_jax.studies.report.verdict import (FAILS, HOLDS, NOT_MEASURED, NOT_TESTABLE,
                                                    PARTLY, Verdict, g)
from anisotropy_jax.studies.report.verdicts_outliers import t_interval

# The late part of training where the phase is looked for: checkpoints at step ≥ LATE_FRACTION ×
# the last step (log-spaced checkpoints: the early collapse and expansion come before it).
LATE_FRACTION = 0.1
MIN_LATE_CHECKPOINTS = 3
# A run compresses when its last RankMe is below the largest of its late checkpoints by at least
# this share of that largest value.
COMPRESSION_DROP = 0.10
SENSITIVITY = {"drop": (0.05, 0.20), "late_fraction": (0.05, 0.25)}
RANK_SERIES, ALPHA_SERIES = "rankme_last", "alpha_req_last"

CRITERION = (
    f"Li et al.'s compression phase: per seed, the relative fall of the last block's RankMe from "
    f"its largest value over the checkpoints at step ≥ {LATE_FRACTION:g} × the last step (≥ "
    f"{MIN_LATE_CHECKPOINTS} of them) to the last checkpoint, (max − last)/max. The BPE control "
    f"(embeddings study, |V| > d) must compress: 95% t-interval over seeds above "
    f"{COMPRESSION_DROP:g}, else no claim (not testable). Then the prediction for the byte models "
    f"(|V| ≤ 256 < d) holds if their interval lies below {COMPRESSION_DROP:g} (no compression "
    f"phase), does not hold if it lies above, partly otherwise; α-ReQ's change over the same "
    f"span is shown beside it (compression: α rises)")


def late_fall(run: Mapping[str, Any], series: str = RANK_SERIES,
              late_fraction: float = LATE_FRACTION) -> tuple[float, float]:
    """(relative fall of `series` from its late maximum to the last checkpoint, the change of
    α-ReQ from that maximum's checkpoint to the last); NaNs with too few late checkpoints."""
    steps = np.asarray(run["steps"], np.float64)
    late = steps >= late_fraction * steps[-1]
    if late.sum() < MIN_LATE_CHECKPOINTS:
        return math.nan, math.nan
    rank = np.asarray(run["series"][series], np.float64)[late]
    alpha = np.asarray(run["series"][ALPHA_SERIES], np.float64)[late]
    peak = int(np.nanargmax(rank))
    return float((rank[peak] - rank[-1]) / rank[peak]), float(alpha[-1] - alpha[peak])


def _falls(runs: Sequence[Mapping[str, Any]], late_fraction: float) -> tuple[dict, dict]:
    pairs = np.array([late_fall(r, late_fraction=late_fraction) for r in runs], np.float64)
    return t_interval(pairs[:, 0]), t_interval(pairs[:, 1])


def _text(name: str, runs, fall: Mapping[str, float], alpha: Mapping[str, float]) -> str:
    return (f"{name} ({len(runs)} seeds): RankMe fall {g(fall['mean'])} [{g(fall['low'])}, "
            f"{g(fall['high'])}], α-ReQ change {g(alpha['mean'])} [{g(alpha['low'])}, "
            f"{g(alpha['high'])}]")


def compression_phase(byte_runs: Sequence[Mapping[str, Any]] | None,
                      bpe_runs: Sequence[Mapping[str, Any]] | None,
                      drop: float = COMPRESSION_DROP,
                      late_fraction: float = LATE_FRACTION) -> Verdict:
    """The prediction's verdict (CRITERION) at the threshold `drop` and the span `late_fraction`."""
    missing = [name for name, runs in (("byte models", byte_runs), ("BPE control", bpe_runs))
               if not runs or any(RANK_SERIES not in r["series"] for r in runs)]
    if missing:
        return Verdict("li_compression", CRITERION, NOT_MEASURED,
                       (f"no {RANK_SERIES} series for the {' and the '.join(missing)}",))
    control, control_alpha = _falls(bpe_runs, late_fraction)
    byte, byte_alpha = _falls(byte_runs, late_fraction)
    numbers = (_text("BPE control", bpe_runs, control, control_alpha),
               _text("byte models", byte_runs, byte, byte_alpha))
    if not (np.isfinite(control["low"]) and control["low"] > drop):
        return Verdict("li_compression", CRITERION, NOT_TESTABLE,
                       (f"the BPE control does not compress (interval not above {drop:g})",
                        *numbers))
    if np.isfinite(byte["high"]) and byte["high"] < drop:
        status = HOLDS
    elif np.isfinite(byte["low"]) and byte["low"] > drop:
        status = FAILS
    else:
        status = PARTLY
    return Verdict("li_compression", CRITERION, status, numbers)


def sensitivity(byte_runs, bpe_runs) -> dict[str, str]:
    """{choice: verdict} under each other threshold and span of SENSITIVITY."""
    out = {f"fall ≥ {d:g}": compression_phase(byte_runs, bpe_runs, drop=d).verdict
           for d in SENSITIVITY["drop"]}
    out.update({f"late span from {f:g} × last step": compression_phase(
        byte_runs, bpe_runs, late_fraction=f).verdict for f in SENSITIVITY["late_fraction"]})
    return out
