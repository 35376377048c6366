"""Did a trained model learn anything? The one rule that every verdict needing a trained model
applies before it is decided (docs/TRAIN.md, "Not testable: a model that did not learn").

RULE: a verdict that needs a trained model is "not testable" (neither holds nor does not hold)
unless the run's final validation loss is below (1 − MARGIN)·ln V nats, where ln V is the loss
of the uniform prediction over the model's V outputs (the byte models: V = 256, 257 for the MLM
with its MASK id; the MLM's loss is over its masked positions, and so is this baseline). Over
several seeds every seed must pass; a seed without a finite final validation loss fails.

MARGIN = 0.1 (10 % of ln V: 0.55 nats for the byte models, 0.90 for a vocabulary of 8,192), fixed
before any run was judged by it, from what a model that learned nothing can reach:
  - an untrained model is not exactly at ln V: the committed runs start up to 0.20 nats (3.7 %)
    below it (the MLM at step 0, 5.35 against ln 257 = 5.55);
  - an MLM gets below ln V without learning anything about the text: on uniformly random bytes,
    copying the byte shown at the 10 % unchanged and 10 % replaced selected positions gives
    0.8·ln 256 + 0.2·3.45 = 5.13 nats, 7.6 % below ln 257.
A 5 % margin would pass both; every committed run that learned ends at least 45 % below ln V.
The rule catches a model that learned nothing, not one that learned little: the byte unigram
alone (3.33 nats on Shakespeare) passes it.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

MARGIN = 0.1
RULE = (f"a verdict that needs a trained model is not testable unless the final validation loss "
        f"is below (1 − {MARGIN:g})·ln V nats, ln V the loss of the uniform prediction over the "
        f"model's V outputs (the MLM's: over its masked positions), in every seed")


def uniform_loss(vocab_size: int) -> float:
    """ln V: the cross-entropy of the uniform prediction over V outputs (nats)."""
    return math.log(vocab_size)


def threshold(vocab_size: int) -> float:
    """(1 − MARGIN)·ln V: the final validation loss must be below this."""
    return (1.0 - MARGIN) * uniform_loss(vocab_size)


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def check(final_losses: Sequence[Any], vocab_size: int,
          labels: Sequence[str] | None = None) -> dict[str, Any]:
    """RULE on the final validation losses of one run or of each seed (`labels` names them,
    e.g. "seed 0"). Returns {"learned", "final_loss" (list; None where not finite), "vocab_size",
    "uniform_loss", "threshold", "margin", "rule", "note"}: "note" is '' when the model learned,
    else the line a verdict prints instead ("the model did not learn: …"). No loss at all fails
    too."""
    values = [_number(v) for v in final_losses]
    labels = list(labels) if labels is not None else [""] * len(values)
    limit, base = threshold(vocab_size), uniform_loss(vocab_size)
    failed = [(label, v) for label, v in zip(labels, values) if not v < limit]
    learned = bool(values) and not failed
    note = ""
    if not learned:
        cells = [f"{label + ': ' if label else ''}{v:.3g}" if math.isfinite(v) else
                 f"{label + ': ' if label else ''}none recorded" for label, v in failed]
        what = ", ".join(cells) if cells else "none recorded"
        note = (f"the model did not learn: final validation loss {what} is not below "
                f"{limit:.3g} nats = (1 − {MARGIN:g})·ln {vocab_size} (ln {vocab_size} = "
                f"{base:.3g}, the uniform prediction)")
    return {"learned": learned,
            "final_loss": [v if math.isfinite(v) else None for v in values],
            "vocab_size": int(vocab_size), "uniform_loss": base, "threshold": limit,
            "margin": MARGIN, "rule": RULE, "note": note}
