"""Closed forms of the untrained-block experiment (docs/SCIENCE.md, "Closed forms, derived"; the
controls' forms in docs/SWEEP.md, "The controls"), their comparison with a sweep, the
per-metric trends along s, and the results-contract summary."""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from anisotropy_jax.config import BlockConfig
from anisotropy_jax.configs.sweep import SweepConfig
from anisotropy_jax.metrics.correlation import t_quantile

# The share of confidence of the seed intervals in the results ("low", "high").
CONFIDENCE = 0.95
# F3(s) is a small-variance expansion: it is given where the key-dependent logit variance is at
# most this (softmax of Gaussian logits: H = ln L − v/2 up to O(e^v/L); about 2% of the deficit
# at L = 128).
F3_MAX_LOGIT_VARIANCE = 1.0


def summarize(per_seed: Mapping[str, np.ndarray]) -> dict[str, dict[str, list]]:
    """{name: {"mean", "std", "low", "high": [per s], "per_seed": [[per s] per seed]}} (results
    contract). std is the sample standard deviation over seeds (ddof = 1) and [low, high] the
    Student-t interval of the mean at CONFIDENCE; with one seed neither is defined: NaN (written
    "nan" in results.json, "undefined" in the docs tables), never 0."""
    out = {}
    for name, values in per_seed.items():
        values = np.asarray(values, np.float64)
        n, mean = values.shape[0], values.mean(axis=0)
        if n > 1:
            std = values.std(axis=0, ddof=1)
            half = t_quantile(0.5 + CONFIDENCE / 2, n - 1) * std / math.sqrt(n)
        else:
            std = half = np.full(values.shape[1], np.nan)
        out[name] = {"mean": mean.tolist(), "std": std.tolist(), "low": (mean - half).tolist(),
                     "high": (mean + half).tolist(), "per_seed": values.tolist()}
    return out


def kernel_variance(block: BlockConfig) -> float:
    """σ_w² of the D → D kernels (q, k, v, out) under the configured init."""
    if block.init == "bert":
        return block.init_std ** 2
    return 1.0 / block.d_model  # lecun: 1/fan_in; xavier: 2/(fan_in + fan_out) = 1/D for D → D


def attention_input_gain(config: SweepConfig, s: np.ndarray) -> np.ndarray:
    """g(s) = E‖a‖²/d for the attention input a of a token. Post-LN / no LN (a = x): 1 + s²/d for
    the biased, norm-matched and per-sequence inputs, 1 for the fixed-norm ones. Pre-LN
    (a = LN(x), norm √d): 1 for every kind. F2 is ‖q‖ = σ_w √(d·Dh) √g."""
    if config.model.norm_position == "pre" or config.inputs == "fixed_norm":
        return np.ones_like(s)
    return 1.0 + s ** 2 / config.model.d_model


def logit_variance(config: SweepConfig, s: np.ndarray) -> np.ndarray:
    """Var_j ℓ_ij, the key-dependent logit variance of a query (mean over queries), with zero
    linear biases: v0·r(s) with v0 = (σ_w² d/τ)² and, with c² = 1 + s²/d,

      biased, per-sequence   r = c²   (‖q‖² ∝ d + s²; the keys vary by z_j alone: ∝ d)
      norm-matched           r = c⁴   (every logit × c²)
      fixed-norm             r = 1/c² (the biased logits / c²)
    for a block whose attention sees x (post-LN, no LN). Pre-LN attention sees LN(x), which for
    x = z + s·u (or its fixed-norm rescaling) is ≈ (z + s·u)/c: r = 1/c²; for the norm-matched
    z·c it is LN(z): r = 1."""
    d, v0 = config.model.d_model, (kernel_variance(config.model) * config.model.d_model
                                   / config.model.logit_temperature) ** 2
    c2 = 1.0 + s ** 2 / d
    if config.inputs == "norm_matched":
        ratio = np.ones_like(s) if config.model.norm_position == "pre" else c2 ** 2
    elif config.model.norm_position == "pre" or config.inputs == "fixed_norm":
        ratio = 1.0 / c2
    else:
        ratio = c2
    return v0 * ratio


def _input_forms(config: SweepConfig, s: np.ndarray) -> dict[str, dict[str, Any]]:
    """F1 and its within/cross-sequence parts, and the mean input norm, per inputs kind."""
    d, kind, seq_len, batch = (config.model.d_model, config.inputs, config.seq_len,
                               config.batch_size)
    f1 = s ** 2 / (s ** 2 + d)
    zero = np.zeros_like(s)
    within = zero if kind == "norm_matched" else f1
    cross = f1 if kind in ("biased", "fixed_norm") else zero
    # All pairs: L(L − 1) of the L(BL − 1) partners of a token share its sequence.
    pairs = {"biased": f1, "fixed_norm": f1, "norm_matched": zero,
             "per_sequence": f1 * (seq_len - 1) / (batch * seq_len - 1)}[kind]
    label = {"biased": "F1: s^2/(s^2+d)", "fixed_norm": "F1, fixed norm (scale-free): s^2/(s^2+d)",
             "norm_matched": "F1, control (no common direction): 0",
             "per_sequence": "F1, per sequence: s^2/(s^2+d) (L-1)/(BL-1)"}[kind]
    forms = {"input_cosine": {"formula": label, "predicted": pairs},
             "input_within_sequence_cosine": {
                 "formula": "within sequences: " + ("0" if kind == "norm_matched"
                                                    else "s^2/(s^2+d)"), "predicted": within}}
    if batch >= 2:
        forms["input_cross_sequence_cosine"] = {
            "formula": "across sequences: " + ("s^2/(s^2+d)" if kind in ("biased", "fixed_norm")
                                               else "0"), "predicted": cross}
    forms["input_norm"] = {
        "formula": "sqrt(d) (fixed norm)" if kind == "fixed_norm" else "sqrt(d+s^2)",
        "predicted": np.full_like(s, math.sqrt(d)) if kind == "fixed_norm"
        else np.sqrt(d + s ** 2)}
    return forms


def closed_forms(config: SweepConfig, bias_norms: Any) -> dict[str, dict[str, Any]]:
    """The closed forms evaluated on the grid: {metric: {"formula", "predicted" [per s]}}.

    F1 input cosine s²/(s² + d) and its within/cross-sequence parts (`_input_forms`, per inputs
    kind), the mean input norm; F2 query norm σ_w √(d·Dh) √g(s) (`attention_input_gain`); F3
    attention entropy ln L − ½ v(s) (L−1)/L with v(s) the key-dependent logit variance
    (`logit_variance`; v(0) = (σ_w² d)²/τ²), given where v(s) ≤ F3_MAX_LOGIT_VARIANCE; F4
    attention-output cross-sequence cosine s²/(s² + d/L) (near-uniform attention; 0 for the
    norm-matched and per-sequence inputs, whose sequences share no direction); post-LN output
    norm √d. F2–F4 assume the plain softmax attention with zero linear biases (as at init); F3
    and F4 also a non-causal block. F3 and F4 are softmax forms: for another
    attention_normalization or with the output gate they are not given (F1, F2 and the output
    norm do not depend on the normalisation).
    """
    block = config.model
    s = np.asarray(bias_norms, np.float64)
    d, dh, seq_len = block.d_model, block.d_head, config.seq_len
    forms = _input_forms(config, s)
    if block.attention == "softmax":
        fixed = block.norm_position == "pre" or config.inputs == "fixed_norm"
        forms["query_norm"] = {
            "formula": ("F2 (attention input of norm sqrt(d)): sigma_w*sqrt(d*d_head)" if fixed
                        else "F2: sigma_w*sqrt(d*d_head)*sqrt(1+s^2/d)"),
            "predicted": math.sqrt(kernel_variance(block) * d * dh)
            * np.sqrt(attention_input_gain(config, s))}
    softmax = block.attention_normalization == "softmax" and not block.attention_output_gate
    if block.attention == "softmax" and not block.causal and softmax:  # F3, F4: all L keys seen
        v = logit_variance(config, s)
        entropy = math.log(seq_len) - 0.5 * v * (seq_len - 1) / seq_len
        ratio = {"biased": "(1+s^2/d)", "per_sequence": "(1+s^2/d)",
                 "norm_matched": "(1+s^2/d)^2", "fixed_norm": "/(1+s^2/d)"}[config.inputs]
        if block.norm_position == "pre":
            ratio = "" if config.inputs == "norm_matched" else "/(1+s^2/d)"
        forms["attention_entropy"] = {
            "formula": f"F3 (where v <= {F3_MAX_LOGIT_VARIANCE:g}): ln L - v (L-1)/(2L), "
                       f"v = (sigma_w^2 d / tau)^2{ratio and (' ' + ratio.lstrip())}",
            "predicted": np.where(v <= F3_MAX_LOGIT_VARIANCE, entropy, np.nan)}
        shared = config.inputs in ("biased", "fixed_norm")
        forms["attention_output_cross_sequence_cosine"] = {
            "formula": "F4 (near-uniform attention): s^2/(s^2+d/L)" if shared else
            "F4, no direction shared across sequences: 0",
            "predicted": s ** 2 / (s ** 2 + d / seq_len) if shared else np.zeros_like(s)}
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
