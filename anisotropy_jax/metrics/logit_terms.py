"""Which part of an attention logit the softmax sees: the key-dependent mean-query term.

With q̄, k̄ the means of a head's queries and keys over all tokens of the batch and s the logit
scale (1/√Dh), every logit splits as

    l_ij = s q_i·k_j = s q̄·k̄ + s (q_i − q̄)·k̄  +  s q̄·(k_j − k̄)  +  s (q_i − q̄)·(k_j − k̄).
           └──── constant over the keys of ────┘   └─ m_j: the same ┘   └─ query-specific ─┘
                 query i: softmax-invariant          for every query

The first two terms add one constant to every logit of query i, which the softmax cancels:
q̄·k̄ (`query_key_geometry`'s `mean_query_key_dot`) cannot change attention. The mean term that can
is m_j = s q̄·(k_j − k̄): it ranks the keys identically for every query (a common bias towards the
same keys, the categorical-attention mechanism of docs/SCIENCE.md).

Definitions (per head; V(b, i) = the keys visible to query i of sequence b; only queries with
|V| ≥ 2 count, as in `attention.mean_over_queries`):

    key_term_var     = mean_{b,i} Var_{j∈V(b,i)} m_bj
    logit_var        = mean_{b,i} Var_{j∈V(b,i)} l_bij     (the logits the softmax receives)
    key_term_std     = √key_term_var
    key_term_share   = key_term_var / logit_var

Var is the population variance over the visible keys of that query, so subtracting k̄ (or any
constant vector from the keys) changes nothing: m_j and q̄·k_j have the same variance over keys.
key_term_share is 1 when every query equals q̄ and 0 when the keys do not vary along q̄; it can
exceed 1 when the query-specific term cancels part of m (negative covariance).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array

TERMS = ("key_term_std", "key_term_share", "logit_std")


def _var_over_visible(values: Array, weights: Array, counts: Array) -> Array:
    """Population variance over the last axis with 0/1 weights (two-pass, stable)."""
    mean = jnp.sum(values * weights, axis=-1, keepdims=True) / counts[..., None]
    return jnp.sum(weights * (values - mean) ** 2, axis=-1) / counts


def mean_query_key_terms(queries_BxLxHxDh: Array, keys_BxLxHxDh: Array, logits_BxHxLqxLk: Array,
                         mask: Array | None = None, scale: float | None = None
                         ) -> dict[str, Array]:
    """{"key_term_std", "key_term_share", "logit_std"}, each (H,); see the module docstring.

    `logits` are the attention logits the softmax receives (s q·k, before masking), `mask` the
    boolean visible-key mask broadcastable to them (None: every key visible), `scale` the logit
    scale s used for m_j (default 1/√Dh, the models' scale). logit_std = √logit_var.
    """
    q = jnp.asarray(queries_BxLxHxDh)
    k = jnp.asarray(keys_BxLxHxDh)
    logits = jnp.asarray(logits_BxHxLqxLk)
    if q.ndim != 4 or k.shape != q.shape:
        raise ValueError(f"expected queries and keys of equal shape (B, L, H, Dh), got "
                         f"{q.shape} and {k.shape}")
    if logits.ndim != 4 or logits.shape[:2] != (q.shape[0], q.shape[2]):
        raise ValueError(f"expected logits (B, H, Lq, Lk) for {q.shape}, got {logits.shape}")
    s = q.shape[-1] ** -0.5 if scale is None else scale
    mean_q_HxDh = jnp.mean(q, axis=(0, 1))
    m_BxHxLk = s * jnp.einsum("bkhd,hd->bhk", k, mean_q_HxDh)
    visible = (jnp.ones(logits.shape, bool) if mask is None
               else jnp.broadcast_to(jnp.asarray(mask).astype(bool), logits.shape))
    w = visible.astype(logits.dtype)
    counts_BxHxLq = jnp.sum(w, axis=-1)
    safe = jnp.maximum(counts_BxHxLq, 1.0)
    chosen = (counts_BxHxLq > 1).astype(logits.dtype)  # queries with a choice to make
    m_b = jnp.broadcast_to(m_BxHxLk[:, :, None, :], logits.shape)
    key_var = jnp.sum(_var_over_visible(m_b, w, safe) * chosen, axis=(0, 2))
    logit_var = jnp.sum(_var_over_visible(jnp.where(visible, logits, 0.0), w, safe) * chosen,
                        axis=(0, 2))
    n = jnp.sum(chosen, axis=(0, 2))
    key_var, logit_var = key_var / n, logit_var / n
    return {"key_term_std": jnp.sqrt(key_var),
            "key_term_share": key_var / logit_var,
            "logit_std": jnp.sqrt(logit_var)}
