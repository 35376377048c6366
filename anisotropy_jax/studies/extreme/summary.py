"""Per-layer numbers of the extreme-token study from the per-forward statistics of
`layers.to_host`: `run_summary` (one set of weights), `input_summary` (the trained weights beside
the untrained seeds' values, mean, min and max). NaN becomes None (JSON).

Per attention layer (block i = state i's producer; "attention"):
  sink_rate         Gu et al.: share of (sequence, head) pairs with α_0 > ε
  free_sink_rate    the same of the position-free score max_k α_k
  free_sink_first   share of (sequence, head) pairs whose most-attended key is key 0
  sink_score        mean α_0;  noop_score mean α_0 ‖v_0‖ / mean ‖v‖;  output_ratio mean
                    ‖Σ A v‖ / Σ A ‖v‖
  excess, shared, query_specific   mean over heads of the first key's logit excess and its split
  shared_share_sink_heads          Σ shared / Σ excess over the sink heads (a head whose α_0 > ε
                    in more than half of the sequences); None without sink heads
  carried_sink_heads               share of the sink heads whose excess is carried by the
                    shared term query by query: shared_i ≥ excess_i / 2 > 0 for at least
                    CARRIED_MAJORITY of the head's counted queries; None without sink heads
  sink_heads        number of sink heads
  head_sink_rate, head_excess, head_shared, head_query_specific, head_query_positive,
  head_query_carried   (H,) per head
  head_control_carried (H,) head_query_carried for the control key (a random key other than
                    key 0, `layers` control_query_carried)
Per hidden state ("states"):
  massive_top, massive_top_ratio, massive_top_token, massive_top_dim   the largest |activation|
                    (signed), its ratio to its sequence's median |activation|, its coordinates
  median            mean over sequences of the median |activation|
  massive_count, relative_count   activations over 100 and 1,000× the median / over 1,000× alone
  kurtosis, inf_norm              means over sequences (Bondarenko et al.)
  average_cosine, cc_top_share, cc_top_dims, standardized_cosine   CC_d (Timkey & van Schijndel)
  top_pc_share, top_pc_share_without_first, average_cosine_without_first
  first_token_norm_ratio, top_pc_share_unit, top_pc_share_unit_without_first   the first row's
                    norm over the others', and the top-PC shares of the unit rows
  twonn_dimension, gride_dimension   intrinsic dimension of the batch's measured tokens but each
                    sequence's first (TwoNN; GRIDE (8, 16); identical points counted once)
The per-state names are those of `metrics.LAYER_METRICS` where the quantity is one of them.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

SINK_HEAD_MAJORITY = 0.5  # a sink head: α_0 > ε in more than this share of the sequences
CARRIED_MAJORITY = 0.5  # a carried sink head: this share of its queries carried (layers.CARRIED)


def _value(x: Any) -> Any:
    """A JSON value: arrays become lists, NaN None, integers int."""
    a = np.asarray(x)
    if a.ndim > 0:
        return [_value(v) for v in a]
    if np.issubdtype(a.dtype, np.integer) or a.dtype == bool:
        return int(a)
    return None if not math.isfinite(float(a)) else float(a)


def _rate(scores: np.ndarray, epsilon: float, axis=None) -> np.ndarray:
    """Share of the non-NaN scores above ε (`metrics.sinks.sink_rate`)."""
    valid = ~np.isnan(scores)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sum(valid & (scores > epsilon), axis=axis) / np.sum(valid, axis=axis)


def attention_summary(block: dict[str, np.ndarray], epsilon: float) -> dict[str, Any]:
    """The per-layer numbers of one block's statistics (module docstring)."""
    head_rate = _rate(block["sink_score"], epsilon, axis=0)
    sink_heads = head_rate > SINK_HEAD_MAJORITY
    excess = float(np.sum(block["excess"][sink_heads]))
    with np.errstate(invalid="ignore"):
        return {
            "sink_rate": _rate(block["sink_score"], epsilon),
            "free_sink_rate": _rate(block["free_sink_score"], epsilon),
            "free_sink_first": np.mean(block["free_sink_key"] == 0),
            "sink_score": np.nanmean(block["sink_score"]),
            "noop_score": np.nanmean(block["noop_score"]),
            "output_ratio": np.nanmean(block["output_ratio"]),
            "excess": np.nanmean(block["excess"]), "shared": np.nanmean(block["shared"]),
            "query_specific": np.nanmean(block["query_specific"]),
            "shared_share_sink_heads": (float(np.sum(block["shared"][sink_heads])) / excess
                                        if sink_heads.any() and excess != 0 else math.nan),
            "carried_sink_heads": (np.mean(block["query_carried"][sink_heads] >= CARRIED_MAJORITY)
                                   if sink_heads.any() else math.nan),
            "sink_heads": int(np.sum(sink_heads)),
            "head_sink_rate": head_rate, "head_excess": block["excess"],
            "head_shared": block["shared"], "head_query_specific": block["query_specific"],
            "head_query_positive": block["query_positive"],
            "head_query_carried": block["query_carried"],
            "head_control_carried": block["control_query_carried"]}


def state_summary(state: dict[str, np.ndarray]) -> dict[str, Any]:
    """The per-state numbers of one hidden state's statistics (module docstring)."""
    return {"massive_top": state["top_values"][0], "massive_top_ratio": state["top_ratio"][0],
            "massive_top_token": state["top_token"][0], "massive_top_dim": state["top_dim"][0],
            "median": np.nanmean(state["median"]),
            "massive_count": np.sum(state["massive_count"]),
            "relative_count": np.sum(state["relative_count"]),
            "kurtosis": np.nanmean(state["kurtosis"]), "inf_norm": np.mean(state["inf_norm"]),
            **{key: state[key] for key in ("average_cosine", "cc_top_share", "cc_top_dims",
                                           "standardized_cosine", "top_pc_share",
                                           "top_pc_share_without_first",
                                           "average_cosine_without_first",
                                           "first_token_norm_ratio", "top_pc_share_unit",
                                           "top_pc_share_unit_without_first",
                                           "twonn_dimension", "gride_dimension")}}


def _columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    return {key: [_value(row[key]) for row in rows] for key in rows[0]} if rows else {}


def run_summary(stats: dict[str, list[dict[str, np.ndarray]]], epsilon: float
                ) -> dict[str, dict[str, list[Any]]]:
    """{"attention": metric → per block, "states": metric → per state} of one forward."""
    return {"attention": _columns([attention_summary(b, epsilon) for b in stats["attention"]]),
            "states": _columns([state_summary(s) for s in stats["states"]])}


def _massive(stats: dict[str, list[dict[str, np.ndarray]]]) -> dict[str, list[Any]]:
    keys = ("top_values", "top_ratio", "top_batch", "top_token", "top_dim")
    return {key: [_value(s[key]) for s in stats["states"]] for key in keys}


def _spread(per_seed: list[dict[str, list[Any]]], reduce) -> dict[str, list[Any]]:
    """Per metric and layer, `reduce` over the seeds of the scalar metrics (None where a seed
    has none); per-head and dimension lists are left to "seeds"."""
    out = {}
    for key, first in per_seed[0].items():
        if first and isinstance(first[0], list):
            continue
        rows = np.array([[math.nan if v is None else v for v in run[key]] for run in per_seed],
                        np.float64)
        out[key] = _value(reduce(rows, axis=0))
    return out


def input_summary(raw: dict[str, Any], seeds: list[int], epsilon: float) -> dict[str, Any]:
    """results.json's entry of one input kind: "trained" (`run_summary` and "massive") and
    "untrained" ("seeds", each seed's `run_summary`; "mean", "min", "max" over them of every
    scalar metric, per part)."""
    out: dict[str, Any] = {}
    if "trained" in raw:
        out["trained"] = {**run_summary(raw["trained"], epsilon),
                          "massive": _massive(raw["trained"])}
    runs = [run_summary(raw[f"untrained_seed_{s}"], epsilon) for s in seeds]
    untrained: dict[str, Any] = {"seeds": seeds, "per_seed": runs}
    for name, reduce in (("mean", np.mean), ("min", np.min), ("max", np.max)):
        untrained[name] = {part: _spread([r[part] for r in runs], reduce)
                           for part in ("attention", "states")}
    out["untrained"] = untrained
    return out
