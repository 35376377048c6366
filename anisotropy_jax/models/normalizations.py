"""The attention normalisations: masked logits (..., Lq, Lk) float32 → weights of the same shape.

The registry `NORMALIZATIONS` is the normalisation step of models/attention.py (re-exported there;
`BlockConfig.attention_normalization` picks one). The logits arrive masked with the most negative
float32 (attention.MASK_VALUE); every function also takes the boolean mask of visible keys
(broadcastable, or None). Masked keys get exactly 0 in every one; a row without visible keys is
uniform for softmax and all zero for the others. Only softmax rows sum to one.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

Array = jax.Array


def softmax(logits_BxHxLxL: Array, mask: Array | None = None) -> Array:
    """exp(ℓ − max ℓ) / Σ exp(ℓ − max ℓ) over keys. The logits arrive masked (MASK_VALUE), so
    masked keys get exactly 0 and a fully masked row is uniform, not NaN."""
    del mask
    return jax.nn.softmax(logits_BxHxLxL, axis=-1)


def _visible(logits: Array, mask: Array | None) -> Array:
    return jnp.broadcast_to(True if mask is None else jnp.asarray(mask, bool), logits.shape)


def _shifted(logits: Array) -> tuple[Array, Array]:
    """(ℓ − m, m) with m = max(max_j ℓ_j, 0) per row: the implicit zero logit of off-by-one and
    softpick is included, so no exp overflows and e^{−m} ≤ 1."""
    m = jax.lax.stop_gradient(jnp.maximum(jnp.max(logits, axis=-1, keepdims=True), 0.0))
    return logits - m, m


def off_by_one(logits: Array, mask: Array | None = None) -> Array:
    """exp(ℓ_i) / (1 + Σ_j exp(ℓ_j)) (softmax with an extra zero logit): e^{ℓ−m}/(e^{−m} +
    Σ e^{ℓ−m}), m = max(max ℓ, 0). Masked keys and fully masked rows get exactly 0."""
    shifted, m = _shifted(logits)
    e = jnp.where(_visible(logits, mask), jnp.exp(shifted), 0.0)
    return e / (jnp.exp(-m) + jnp.sum(e, axis=-1, keepdims=True))


def sigmoid(logits: Array, mask: Array | None = None) -> Array:
    """σ(ℓ_i + b) with one scalar bias b = −ln L, L the full key length (logits.shape[-1]), the
    same for every query: the bias of Ramapuram et al. 2024 ("Theory, Analysis, and Best
    Practices for Sigmoid Self-Attention"), b = −ln n with n the sequence length. Masked keys and
    fully masked rows get exactly 0."""
    bias = -math.log(logits.shape[-1])
    return jnp.where(_visible(logits, mask), jax.nn.sigmoid(logits + bias), 0.0)


def sigmoid_per_query_bias(logits: Array, mask: Array | None = None) -> Array:
    """σ(ℓ_i − ln n_q), n_q the query's own number of visible keys (causal: n_q = i + 1): a bias
    per query, not the paper's scalar (`sigmoid`); each query's weights sum to about one when its
    logits are near zero. Masked keys and fully masked rows get exactly 0."""
    visible = _visible(logits, mask)
    n = jnp.maximum(jnp.sum(visible, axis=-1, keepdims=True), 1).astype(logits.dtype)
    return jnp.where(visible, jax.nn.sigmoid(logits - jnp.log(n)), 0.0)


def softpick(logits: Array, mask: Array | None = None, eps: float = 1e-6) -> Array:
    """ReLU(e^ℓ − 1) / (Σ_j |e^{ℓ_j} − 1| + ε) (Zuhri et al. 2025), as ReLU(e^{ℓ−m} − e^{−m}) /
    (Σ |e^{ℓ−m} − e^{−m}| + ε e^{−m}), m = max(max ℓ, 0); the sum runs over visible keys only.
    Masked keys and fully masked rows get exactly 0; so does a row with every logit ≤ 0."""
    visible = _visible(logits, mask)
    shifted, m = _shifted(logits)
    a = jnp.where(visible, jnp.exp(shifted) - jnp.exp(-m), 0.0)
    return jax.nn.relu(a) / (jnp.sum(jnp.abs(a), axis=-1, keepdims=True) + eps * jnp.exp(-m))


def clipped_softmax(logits: Array, mask: Array | None = None, zeta: float = 1.0,
                    gamma: float = 0.0) -> Array:
    """clip((ζ − γ)·softmax + γ, 0, 1) (Bondarenko et al. 2023; ζ ≥ 1, γ ≤ 0: exact zeros and
    ones become reachable). ζ = 1, γ = 0 is the softmax. Masked keys and fully masked rows get
    exactly 0."""
    p = jax.nn.softmax(logits, axis=-1)
    return jnp.where(_visible(logits, mask), jnp.clip((zeta - gamma) * p + gamma, 0.0, 1.0), 0.0)


# The normalisation step: name → f(masked logits, mask or None) → weights. Clipped softmax also
# takes ζ and γ (attention.normalization_function passes the block's).
NORMALIZATIONS = {"softmax": softmax, "off_by_one": off_by_one, "sigmoid": sigmoid,
                  "sigmoid_per_query_bias": sigmoid_per_query_bias, "softpick": softpick,
                  "clipped_softmax": clipped_softmax}
