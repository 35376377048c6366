"""Closed forms beside the depth data (docs/DEPTH.md, "Theory").

Pre-LN residual growth at initialisation. A pre-LN layer adds α·Attn(LN x) and α·MLP(LN h) to
the stream; each branch ends in a zero-mean kernel independent of the stream, so over the weights
E‖x_{l+1}‖² = ‖x_l‖² + α²(E‖a‖² + E‖m‖²) exactly, with (kernel entry variances v, zero biases,
LN with γ = 1 so ‖LN x‖² = D·var/(var + eps) ≈ D):
  attention  E‖a_q‖² = D v_o · D v_v · ‖ȳ_q‖²,  ȳ_q = Σ_k p_qk LN(x_k),  ‖ȳ_q‖² = c·D, c ∈ (0, 1]
             (c = 1 when every token is the same after LN; c = 1/L for uniform attention over
             orthogonal tokens)
  MLP        E‖m‖² = D v_out · F · E[gelu(g)²],  g ~ N(0, v_in·D)
so the mean squared token norm grows linearly in depth: ‖x_l‖² = ‖x_0‖² + l·α²(A·c + M). The
band c ∈ [1/L, 1] is drawn beside the measured residual_rms².

Pure attention (no skip, no LN, no MLP): with X = 1·x̄ᵀ + R, softmax cancels every logit term
that does not vary with both query and key, so the part of the output that varies over tokens is
third order in R: res(Y) ≈ κ·res(X)³ (Dong, Cordonnier & Loukas 2021: doubly exponential
collapse, res(X_l) ~ κ^((3^l − 1)/2)·res(X_0)^(3^l)). `cubic_recursion` continues the measured
first layer with κ fitted on the first step; tests/test_depth.py checks the order 3 directly.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from anisotropy_jax.config import BlockConfig
from anisotropy_jax.configs.depth import DepthConfig


def kernel_variance(block: BlockConfig, fan_in: int, fan_out: int) -> float:
    """Variance of one kernel entry at initialisation (flax's truncated normals are rescaled to
    the target variance)."""
    if block.init == "bert":
        return block.init_std ** 2
    if block.init == "lecun":
        return 1.0 / fan_in
    return 2.0 / (fan_in + fan_out)


def gelu_second_moment(variance: float, order: int = 80) -> float:
    """E[gelu(g)²] for g ~ N(0, variance) (exact erf GELU), by Gauss–Hermite quadrature."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(order)
    g = nodes * math.sqrt(variance)
    erf = np.vectorize(math.erf)
    gelu = 0.5 * g * (1.0 + erf(g / math.sqrt(2.0)))
    return float(np.sum(weights * gelu ** 2) / math.sqrt(2.0 * math.pi))


def pre_ln_branch_terms(config: DepthConfig, width: int) -> dict[str, float]:
    """A (attention per unit c) and M (MLP) of one pre-LN layer, in squared-norm units per token."""
    block = config.block_for("pre", width)
    d, f = width, block.d_ff
    attention = d * kernel_variance(block, d, d) * d * kernel_variance(block, d, d) * d
    mlp = d * kernel_variance(block, f, d) * f * gelu_second_moment(kernel_variance(block, d, f)
                                                                       * d)
    return {"attention_per_c": attention, "mlp": mlp}


def pre_ln_norm_growth(config: DepthConfig, width: int, initial_sq: float) -> dict[str, Any]:
    """Predicted mean squared token norm after layers 0..N: band c = 1/L (lower) to c = 1 (upper)."""
    terms = pre_ln_branch_terms(config, width)
    layers = np.arange(config.num_layers + 1, dtype=np.float64)
    alpha2 = config.alpha ** 2
    per_layer = {name: alpha2 * (terms["attention_per_c"] * c + terms["mlp"])
                 for name, c in (("lower", 1.0 / config.seq_len), ("upper", 1.0))}
    return {"formula": "||x_l||^2 = ||x_0||^2 + l*alpha^2*(A*c + M), c in [1/L, 1]",
            **terms, "alpha": config.alpha,
            "lower": (initial_sq + layers * per_layer["lower"]).tolist(),
            "upper": (initial_sq + layers * per_layer["upper"]).tolist()}


def compare_pre_ln(config: DepthConfig, width: int, residual_rms: np.ndarray,
                   input_rms: np.ndarray) -> dict[str, Any]:
    """Measured mean over seeds of residual_rms² (per bias norm, layers 0..N) against the band.
    `residual_rms` (seeds, s, layers), `input_rms` (seeds, s)."""
    out = []
    for j in range(residual_rms.shape[1]):
        measured = np.concatenate([[np.mean(input_rms[:, j] ** 2)],
                                   np.mean(residual_rms[:, j] ** 2, axis=0)])
        band = pre_ln_norm_growth(config, width, float(measured[0]))
        lo, hi = np.asarray(band["lower"]), np.asarray(band["upper"])
        inside = (measured >= lo * (1 - 1e-6)) & (measured <= hi * (1 + 1e-6))
        out.append({"bias_norm": config.bias_norms[j], "measured_sq": measured.tolist(),
                    "lower": band["lower"], "upper": band["upper"],
                    "fraction_inside": float(inside.mean()),
                    "measured_slope_per_layer": float((measured[-1] - measured[0])
                                                      / config.num_layers)})
    terms = pre_ln_branch_terms(config, width)
    return {"formula": band["formula"], **terms, "alpha": config.alpha, "per_bias_norm": out}


def cubic_recursion(first: float, second: float, num_layers: int) -> dict[str, Any]:
    """r_{l+1} = κ r_l³ from the measured r_1 (first) with κ = r_2 / r_1³ (fitted on one step):
    predicted r_1..r_N (values below 1e-30 reported as 0: far under float32 resolution)."""
    kappa = second / first ** 3 if first > 0 else float("nan")
    r, out = first, []
    for _ in range(num_layers):
        out.append(r if r > 1e-30 else 0.0)
        r = kappa * r ** 3 if r > 1e-30 else 0.0
    return {"formula": "r_{l+1} = kappa * r_l^3 (kappa fitted on layers 1-2)", "kappa": kappa,
            "predicted": out}


def depth_to_threshold(cosine_by_layer: np.ndarray, threshold: float = 0.9) -> int | None:
    """The first depth l (0 = the input) whose cosine ≥ threshold, or None."""
    hits = np.flatnonzero(np.asarray(cosine_by_layer) >= threshold)
    return int(hits[0]) if hits.size else None
