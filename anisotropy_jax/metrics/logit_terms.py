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

The decomposition of the logit variance (`logit_variance_decomposition`): with
r_ij = s (q_i − q̄)·(k_j − k̄) the query-specific term, over the visible keys of each query

    Var_j l_ij = Var_j m_j + Var_j r_ij + 2 Cov_j(m_j, r_ij)

exactly (the constant terms add nothing to a variance over keys), so after averaging over queries
logit_var = key_term_var + query_specific_var + 2·key_query_covariance. `split_logits` returns the
three terms the softmax can tell apart; `metrics.intervention` removes them one at a time.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array

TERMS = ("key_term_std", "key_term_share", "logit_std")
DECOMPOSITION = ("key_term_var", "query_specific_var", "key_query_covariance", "logit_var")


def _var_over_visible(values: Array, weights: Array, counts: Array) -> Array:
    """Population variance over the last axis with 0/1 weights (two-pass, stable)."""
    return _cov_over_visible(values, values, weights, counts)


def _cov_over_visible(a: Array, b: Array, weights: Array, counts: Array) -> Array:
    """Population covariance over the last axis with 0/1 weights (two-pass: centred first)."""
    def centred(v):
        v = jnp.where(weights > 0, v, 0.0)  # a masked −inf logit must not reach the sums
        return v - jnp.sum(v * weights, axis=-1, keepdims=True) / counts[..., None]

    return jnp.sum(weights * centred(a) * centred(b), axis=-1) / counts


def _check_shapes(q: Array, k: Array, logits: Array) -> None:
    if q.ndim != 4 or k.shape != q.shape:
        raise ValueError(f"expected queries and keys of equal shape (B, L, H, Dh), got "
                         f"{q.shape} and {k.shape}")
    if logits.ndim != 4 or logits.shape[:2] != (q.shape[0], q.shape[2]):
        raise ValueError(f"expected logits (B, H, Lq, Lk) for {q.shape}, got {logits.shape}")


def split_logits(queries_BxLxHxDh: Array, keys_BxLxHxDh: Array, scale: float | None = None
                 ) -> dict[str, Array]:
    """The logits s q_i·k_j as three terms that sum to them (module docstring), with q̄, k̄ the
    means over all tokens of the batch:

      "constant"        (B, H, Lq, 1)   s q_i·k̄ = s q̄·k̄ + s (q_i − q̄)·k̄: one value per query,
                                        which the softmax cancels;
      "key_term"        (B, H, 1, Lk)   m_j = s q̄·(k_j − k̄): the same for every query;
      "query_specific"  (B, H, Lq, Lk)  s (q_i − q̄)·(k_j − k̄).
    `scale` s defaults to 1/√Dh.
    """
    q = jnp.asarray(queries_BxLxHxDh)
    k = jnp.asarray(keys_BxLxHxDh)
    s = q.shape[-1] ** -0.5 if scale is None else scale
    mean_q_1x1xHxDh = jnp.mean(q, axis=(0, 1), keepdims=True)
    mean_k_1x1xHxDh = jnp.mean(k, axis=(0, 1), keepdims=True)
    dq, dk = q - mean_q_1x1xHxDh, k - mean_k_1x1xHxDh
    return {
        "constant": s * jnp.einsum("bqhd,hd->bhq", q, mean_k_1x1xHxDh[0, 0])[..., None],
        "key_term": s * jnp.einsum("bkhd,hd->bhk", dk, mean_q_1x1xHxDh[0, 0])[:, :, None],
        "query_specific": s * jnp.einsum("bqhd,bkhd->bhqk", dq, dk),
    }


def _visible_weights(logits: Array, mask: Array | None) -> tuple[Array, Array, Array]:
    """(0/1 weights of the visible keys, their count per query (≥ 1), 0/1 for the queries with
    more than one visible key: the only ones averaged)."""
    visible = (jnp.ones(logits.shape, bool) if mask is None
               else jnp.broadcast_to(jnp.asarray(mask).astype(bool), logits.shape))
    w = visible.astype(logits.dtype)
    counts = jnp.sum(w, axis=-1)
    return w, jnp.maximum(counts, 1.0), (counts > 1).astype(logits.dtype)


def logit_variance_decomposition(queries_BxLxHxDh: Array, keys_BxLxHxDh: Array,
                                 logits_BxHxLqxLk: Array, mask: Array | None = None,
                                 scale: float | None = None) -> dict[str, Array]:
    """{"key_term_var", "query_specific_var", "key_query_covariance", "logit_var"}, each (H,):
    per query the population variance (covariance) over its visible keys of m_j, of
    r_ij = s (q_i − q̄)·(k_j − k̄), of (m_j, r_ij) and of the `logits` as given, averaged over
    the batch and the queries with more than one visible key.

    When `logits` = s q·k (the models' logits, masked or not) the identity
    logit_var = key_term_var + query_specific_var + 2·key_query_covariance holds up to rounding;
    `mask` and `scale` as in `mean_query_key_terms`.
    """
    q, k = jnp.asarray(queries_BxLxHxDh), jnp.asarray(keys_BxLxHxDh)
    logits = jnp.asarray(logits_BxHxLqxLk)
    _check_shapes(q, k, logits)
    terms = split_logits(q, k, scale)
    w, counts, chosen = _visible_weights(logits, mask)
    m = jnp.broadcast_to(terms["key_term"], logits.shape)
    r = terms["query_specific"]
    n = jnp.sum(chosen, axis=(0, 2))

    def average(per_query_BxHxLq):
        return jnp.sum(per_query_BxHxLq * chosen, axis=(0, 2)) / n

    return {"key_term_var": average(_var_over_visible(m, w, counts)),
            "query_specific_var": average(_var_over_visible(r, w, counts)),
            "key_query_covariance": average(_cov_over_visible(m, r, w, counts)),
            "logit_var": average(_var_over_visible(logits, w, counts))}


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
    _check_shapes(q, k, logits)
    s = q.shape[-1] ** -0.5 if scale is None else scale
    mean_q_HxDh = jnp.mean(q, axis=(0, 1))
    m_BxHxLk = s * jnp.einsum("bkhd,hd->bhk", k, mean_q_HxDh)
    w, counts, chosen = _visible_weights(logits, mask)  # chosen: queries with a choice to make
    m_b = jnp.broadcast_to(m_BxHxLk[:, :, None, :], logits.shape)
    n = jnp.sum(chosen, axis=(0, 2))
    key_var = jnp.sum(_var_over_visible(m_b, w, counts) * chosen, axis=(0, 2)) / n
    logit_var = jnp.sum(_var_over_visible(logits, w, counts) * chosen, axis=(0, 2)) / n
    return {"key_term_std": jnp.sqrt(key_var),
            "key_term_share": key_var / logit_var,
            "logit_std": jnp.sqrt(logit_var)}
