"""The controls beside the biased inputs (docs/SWEEP.md, "The controls"): paired differences
over seeds, the exact identities each control obeys, and the operating points where the input
cosine is that of real models. results.json's "controls" is `summary(runs)`.

The runs of one comparison share weights, z and u seed by seed (`grid.init_seeds`), so a control
minus the biased run is a paired difference: its interval is over the per-seed differences.

Identities (zero linear biases, as at init; `identity`): logits are bilinear in the attention
input a, and an argmax is unchanged by a positive factor on a row of logits.
  * norm-matched, attention sees x (post-LN, no LN): a = z·c, every logit is its s = 0 value × c²:
    the query agreement is its s = 0 value. Pre-LN: LN(z·c) = LN(z) up to LN's eps: every
    attention statistic is its s = 0 value.
  * fixed-norm, attention sees x: a = (z + s·u)/c, every logit is the biased one / c²: the query
    agreement is the biased run's (the entropy is not: it rises towards ln L). Pre-LN:
    LN((z + s·u)/c) = LN(z + s·u): every attention statistic is the biased run's.
  * per-sequence: attention mixes tokens of one sequence only, and each sequence sees a biased
    input of its own direction: in distribution, every attention statistic is the biased run's
    (its paired difference has mean 0; no identity seed by seed).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from anisotropy_jax.metrics.correlation import t_quantile

# The average input cosine measured in real models (SmolLM2 and DINOv2; docs/SCIENCE.md, "Review
# of the verdicts"): the operating points are the s where the biased inputs' cosine lies here.
INPUT_COSINE_RANGE = (0.1, 0.6)
# The statistics compared with the biased run (paired differences over seeds).
COMPARED_METRICS = ("attention_entropy_normalized", "attention_max",
                    "attention_query_agreement", "attention_query_key_information")
ATTENTION_IDENTITY_METRICS = ("attention_entropy_normalized", "attention_query_agreement")


def paired_difference(a_SxC: Any, b_SxC: Any, confidence: float = 0.95) -> dict[str, list]:
    """Per s, the mean of a − b over seeds and its Student-t interval over the per-seed
    differences; NaN bounds with one seed (undefined, not 0)."""
    diff = np.asarray(a_SxC, np.float64) - np.asarray(b_SxC, np.float64)
    n, mean = diff.shape[0], diff.mean(axis=0)
    half = (t_quantile(0.5 + confidence / 2, n - 1) * diff.std(axis=0, ddof=1) / math.sqrt(n)
            if n > 1 else np.full(mean.shape, np.nan))
    return {"mean": mean.tolist(), "low": (mean - half).tolist(), "high": (mean + half).tolist(),
            "n": int(n)}


def operating_points(bias_norms: Any, input_cosine_SxC: Any,
                     bounds: tuple[float, float] = INPUT_COSINE_RANGE) -> list[int]:
    """Indices of the s where the mean input cosine over seeds lies in `bounds` (inclusive)."""
    mean = np.asarray(input_cosine_SxC, np.float64).mean(axis=0)
    return [i for i in range(len(bias_norms)) if bounds[0] <= mean[i] <= bounds[1]]


def identity(kind: str, norm_position: str, per_seed: Mapping[str, np.ndarray],
             biased: Mapping[str, np.ndarray]) -> dict[str, Any] | None:
    """The exact identity of a control (module docstring): {"statement", "metrics",
    "max_abs_deviation" {metric: max over seeds and s}}, or None where there is none."""
    sees_x = norm_position != "pre"
    if kind == "norm_matched":
        names = ("attention_query_agreement",) if sees_x else ATTENTION_IDENTITY_METRICS
        want = {n: np.repeat(per_seed[n][:, :1], per_seed[n].shape[1], 1) for n in names}
        statement = "equal to their s = 0 values, seed by seed"
    elif kind == "fixed_norm":
        names = ("attention_query_agreement",) if sees_x else ATTENTION_IDENTITY_METRICS
        want = {n: biased[n] for n in names}
        statement = "equal to the biased run's, seed by seed"
    else:
        return None
    return {"statement": f"{', '.join(names)} {statement}", "metrics": list(names),
            "max_abs_deviation": {n: float(np.max(np.abs(np.asarray(per_seed[n], np.float64)
                                                         - np.asarray(want[n], np.float64))))
                                  for n in names}}


def _group_key(config: Any) -> Any:
    """Runs that differ only in `inputs` share weights, seeds and grid: one group."""
    return config.replace(inputs="biased")


def summary(runs: Mapping[str, Any]) -> dict[str, Any]:
    """results.json "controls": {label of a biased run: {"norm_position", "input_cosine_range",
    "operating_points" (indices), "operating_bias_norms", "runs": {label of a control of the same
    block, seeds and grid: {"inputs", "minus_biased" {metric: paired_difference},
    "identity"}}}}. `runs` are `grid.SweepResult`s by label; runs without a biased partner are
    left out."""
    biased = {_group_key(r.config): (label, r) for label, r in runs.items()
              if r.config.inputs == "biased"}
    out: dict[str, Any] = {}
    for label, result in runs.items():
        key = _group_key(result.config)
        if result.config.inputs == "biased" or key not in biased:
            continue
        base_label, base = biased[key]
        entry = out.get(base_label)
        if entry is None:
            points = operating_points(base.bias_norms, base.per_seed["input_cosine"])
            entry = out[base_label] = {
                "norm_position": base.config.model.norm_position,
                "input_cosine_range": list(INPUT_COSINE_RANGE),
                "operating_points": points,
                "operating_bias_norms": [float(base.bias_norms[i]) for i in points],
                "runs": {}}
        entry["runs"][label] = {
            "inputs": result.config.inputs,
            "minus_biased": {n: paired_difference(result.per_seed[n], base.per_seed[n])
                             for n in COMPARED_METRICS if n in result.per_seed},
            "identity": identity(result.config.inputs, result.config.model.norm_position,
                                 result.per_seed, base.per_seed)}
    return out
