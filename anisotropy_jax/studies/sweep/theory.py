"""Closed forms of the untrained-block experiment (docs/SCIENCE.md, "Closed forms, derived"),
their comparison with a sweep, the per-metric trends along s, and the results-contract summary."""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from anisotropy_jax.config import BlockConfig, SweepConfig

def summarize(per_seed: Mapping[str, np.ndarray]) -> dict[str, dict[str, list]]:
    """{name: {"mean": [per s], "std": [per s], "per_seed": [[per s] per seed]}} (results
    contract). std is the sample standard deviation over seeds (ddof=1), 0 with one seed."""
    out = {}
    for name, values in per_seed.items():
        values = np.asarray(values, np.float64)
        std = values.std(axis=0, ddof=1) if values.shape[0] > 1 else np.zeros(values.shape[1])
        out[name] = {"mean": values.mean(axis=0).tolist(), "std": std.tolist(),
                     "per_seed": values.tolist()}
    return out


def kernel_variance(block: BlockConfig) -> float:
    """σ_w² of the D → D kernels (q, k, v, out) under the configured init."""
    if block.init == "bert":
        return block.init_std ** 2
    return 1.0 / block.d_model  # lecun: 1/fan_in; xavier: 2/(fan_in + fan_out) = 1/D for D → D


def closed_forms(config: SweepConfig, bias_norms: Any) -> dict[str, dict[str, Any]]:
    """docs/SCIENCE.md closed forms evaluated on the grid: {metric: {"formula", "predicted" [per s]}}.

    F1 input cosine s²/(s² + d); F2 query norm σ_w √(d·Dh) √(1 + s²/d); F3 attention entropy at
    s = 0, ln L − ½ v (L−1)/L with logit variance v = (σ_w² d)² / τ² (sample variance over L keys);
    F4 attention-output cross-sequence cosine s²/(s² + d/L) (assumes near-uniform attention);
    post-LN output norm √d. F2–F4 assume the plain softmax attention with zero linear biases;
    F3 and F4 also a non-causal block. The norm-matched control (inputs='norm_matched') has no
    common direction: its F1 and F4 are 0 at every s (F2, F3 and the output norm are unchanged).
    """
    block = config.block
    s = np.asarray(bias_norms, np.float64)
    d, dh, seq_len = block.d_model, block.d_head, config.seq_len
    var_w = kernel_variance(block)
    biased = config.inputs == "biased"
    forms: dict[str, dict[str, Any]] = {
        "input_cosine": {"formula": "F1: s^2/(s^2+d)", "predicted": s ** 2 / (s ** 2 + d)}
        if biased else {"formula": "F1, control (no common direction): 0",
                        "predicted": np.zeros_like(s)},
    }
    if block.attention == "softmax":
        # Pre-LN feeds LN(x) ≈ (z + s·u)/√(1 + s²/d) to the projections: its norm stays ≈ √d.
        growth = np.ones_like(s) if block.norm_position == "pre" else np.sqrt(1 + s ** 2 / d)
        forms["query_norm"] = {"formula": "F2 (pre-LN: LN(x) has norm sqrt(d)): "
                               "sigma_w*sqrt(d*d_head)" if block.norm_position == "pre" else
                               "F2: sigma_w*sqrt(d*d_head)*sqrt(1+s^2/d)",
                               "predicted": math.sqrt(var_w * d * dh) * growth}
    if block.attention == "softmax" and not block.causal:  # F3, F4: every query sees all L keys
        v = (var_w * d) ** 2 / block.logit_temperature ** 2
        entropy0 = math.log(seq_len) - 0.5 * v * (seq_len - 1) / seq_len
        forms["attention_entropy"] = {
            "formula": "F3 (s=0 only): ln L - (sigma_w^2 d / tau)^2 (L-1)/(2L)",
            "predicted": np.where(s == 0, entropy0, np.nan)}
        forms["attention_output_cross_sequence_cosine"] = {
            "formula": "F4 (near-uniform attention): s^2/(s^2+d/L)",
            "predicted": s ** 2 / (s ** 2 + d / seq_len)} if biased else {
            "formula": "F4, control (no common direction): 0", "predicted": np.zeros_like(s)}
    if block.norm_position == "post":
        forms["output_norm"] = {"formula": "post-LN: sqrt(d)",
                                "predicted": np.full_like(s, math.sqrt(d))}
    return forms


def compare_with_closed_forms(config: SweepConfig, bias_norms: Any,
                              per_seed: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """For each closed form: predicted, measured mean over seeds, and the largest |deviation|
    (absolute and relative) over the s where a prediction exists."""
    out = {}
    for name, form in closed_forms(config, bias_norms).items():
        if name not in per_seed:
            continue
        predicted = np.asarray(form["predicted"], np.float64)
        measured = np.asarray(per_seed[name], np.float64).mean(axis=0)
        where = np.isfinite(predicted)
        dev = np.abs(measured - predicted)[where]
        big = np.abs(predicted[where]) >= 0.1  # relative deviations only where they mean something
        rel = dev[big] / np.abs(predicted[where][big])
        worst = int(np.flatnonzero(where)[np.argmax(dev)]) if dev.size else None
        out[name] = {"formula": form["formula"], "predicted": predicted.tolist(),
                     "measured": measured.tolist(),
                     "max_abs_deviation": float(dev.max()) if dev.size else None,
                     "max_rel_deviation": float(rel.max()) if rel.size else None,
                     "worst_s": float(np.asarray(bias_norms)[worst]) if worst is not None
                     else None}
    return out


TREND_METRICS = ("attention_entropy_normalized", "attention_max", "attention_query_agreement",
                 "attention_query_key_information", "output_cosine",
                 "output_cross_sequence_cosine", "mean_query_key_abs_cosine")


def trends(bias_norms: Any, per_seed: Mapping[str, np.ndarray],
           names: tuple[str, ...] = TREND_METRICS) -> dict[str, dict[str, Any]]:
    """How each metric's mean over seeds moves from the smallest to the largest s: its first and
    last values, "rises" | "falls" | "flat" (|change| < 1e-3), and the fraction of consecutive
    steps of s that move in that direction (1.0 = monotone). docs/SCIENCE.md F5 predicts that the
    normalised entropy falls with post-LN and rises with pre-LN."""
    order = np.argsort(np.asarray(bias_norms, np.float64), kind="stable")
    out = {}
    for name in names:
        if name not in per_seed:
            continue
        mean = np.asarray(per_seed[name], np.float64).mean(axis=0)[order]
        change = mean[-1] - mean[0]
        direction = "flat" if abs(change) < 1e-3 else ("rises" if change > 0 else "falls")
        steps = np.diff(mean)
        if direction == "flat" or steps.size == 0:
            fraction = 1.0
        else:
            fraction = float(np.mean(np.sign(steps) == np.sign(change)))
        out[name] = {"first": float(mean[0]), "last": float(mean[-1]), "direction": direction,
                     "fraction_of_steps_in_direction": fraction}
    return out
