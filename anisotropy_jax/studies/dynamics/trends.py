"""Across checkpoints: the Spearman correlation of attention entropy with |q̄·k̄/√Dh| and the
expected trends of docs/SCIENCE.md ("The training-dynamics experiment"), each with its numbers.
Host-side numpy (scipy for the rank correlation)."""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np


def spearman_entropy_vs_qk(entropy_SxNxH: np.ndarray, qk_dot_SxNxH: np.ndarray) -> dict[str, Any]:
    """Spearman ρ of the normalised entropy with |q̄·k̄/√Dh| over checkpoints.

    `pooled`: over every (checkpoint, layer, head) point; `per_head` (layers, H): over the
    checkpoints of each head; `per_head_median`. NaN where a series is constant (scipy's
    convention, kept). Needs ≥ 3 checkpoints.
    """
    from scipy import stats  # optional heavy dependency, only needed here

    entropy = np.asarray(entropy_SxNxH, np.float64)
    qk = np.abs(np.asarray(qk_dot_SxNxH, np.float64))
    if entropy.shape[0] < 3:
        raise ValueError(f"a correlation over checkpoints needs >= 3 checkpoints, "
                         f"got {entropy.shape[0]}")
    pooled = stats.spearmanr(entropy.reshape(-1), qk.reshape(-1))
    per_head = np.full(entropy.shape[1:], np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant series → NaN, reported as such
        for idx in np.ndindex(*entropy.shape[1:]):
            per_head[idx] = stats.spearmanr(entropy[(slice(None),) + idx],
                                            qk[(slice(None),) + idx]).statistic
    finite = per_head[np.isfinite(per_head)]
    return {"pooled": float(pooled.statistic), "pooled_p": float(pooled.pvalue),
            "n_pooled": int(entropy.size), "per_head": per_head,
            "per_head_median": float(np.median(finite)) if finite.size else float("nan"),
            "per_head_fraction_negative": float(np.mean(finite < 0)) if finite.size else
            float("nan")}


def _head_trends(heads: dict, objective: str) -> dict[str, Any]:
    """Growth of ‖q̄‖, ‖k̄‖, |cos(q̄, k̄)|, the signs of the cosines, the fall of the entropy."""
    first, last = 0, -1

    def head_mean(name, index, fn=lambda x: x):
        return float(np.mean(fn(heads[name][index])))

    out = {}
    for name in ("mean_query_norm", "mean_key_norm"):
        a, b = head_mean(name, first), head_mean(name, last)
        out[f"{name}_grows"] = {"first": a, "last": b, "holds": b > a}
    a, b = head_mean("mean_query_key_cosine", first, np.abs), head_mean(
        "mean_query_key_cosine", last, np.abs)
    out["abs_cosine_grows_from_zero"] = {"first": a, "last": b, "holds": b > a}
    cos_last = heads["mean_query_key_cosine"][last]
    positive, negative = int(np.sum(cos_last > 0)), int(np.sum(cos_last < 0))
    signs = {"positive_heads": positive, "negative_heads": negative,
             "holds": positive > 0 and negative > 0}
    if objective == "clm":
        signs["mostly_negative"] = negative > positive
    out["both_signs_across_heads"] = signs
    a, b = head_mean("attention_entropy_normalized", first), head_mean(
        "attention_entropy_normalized", last)
    out["entropy_falls"] = {"first": a, "last": b, "holds": b < a}
    return out


def expected_trends(steps: np.ndarray, heads: dict, layers: dict, correlation: dict,
                    objective: str) -> dict[str, Any]:
    """docs/SCIENCE.md's expected trends, each with the numbers at the first and last checkpoint
    and whether it holds in this run (`holds` is a plain comparison, no significance test, except
    the correlation: ρ < 0 and p < 0.05)."""
    first, last = 0, -1
    num_layers = heads["mean_query_norm"].shape[1]
    out = _head_trends(heads, objective)
    out["entropy_anticorrelates_with_abs_qk"] = {
        "spearman_pooled": correlation["pooled"], "p": correlation["pooled_p"],
        "per_head_median": correlation["per_head_median"],
        "holds": correlation["pooled"] < 0 and correlation["pooled_p"] < 0.05}
    inter = slice(1, num_layers)  # outputs of blocks 0 .. n-2: neither the input nor the last
    if num_layers >= 2:
        cross = layers["cross_sequence_cosine"]
        a, b = float(np.mean(cross[first, inter])), float(np.mean(cross[last, inter]))
        out["intermediate_anisotropy_rises"] = {
            "first": a, "last": b, "max_over_steps": float(np.max(np.mean(cross[:, inter], 1))),
            "per_layer_first": cross[first].tolist(), "per_layer_last": cross[last].tolist(),
            "holds": b > a}
    out["steps"] = [int(steps[0]), int(steps[-1])]
    return out
