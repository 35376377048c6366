"""Attention sinks, no-op heads, and the sink's share of the mean-query logit term (docs/SCIENCE.md,
"Extreme tokens, sinks and intrinsic dimension"). Hidden-state extremes: `metrics.extreme`.

Pure functions of arrays, no model knowledge. Conventions (those of `metrics.attention` and
`metrics.logit_terms`):
  * attention *weights* (probabilities) are (B, H, Lq, Lk); `mask` is the boolean visible-key
    mask broadcastable to them (None: every key visible; causal and padding masks alike), and
    `query_mask_BxLq` marks the queries that count (None: all; a padded query still has a row over
    the visible keys, so padding must be given here to be left out);
  * queries, keys and values are (B, L, H, Dh);
  * key 0 is the first token of every sequence (the BOS / [CLS] position).
Everything is computed in the input dtype; value norms are taken of values divided by a power of
two above their largest entry, so float32 values up to ~1e38 give finite results.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from anisotropy_jax.metrics.norms import power_of_two_above, unit_vectors, vector_norms

Array = jax.Array

SINK_EPSILON = 0.3  # Gu et al. (ICLR 2025): a head is a sink head when α_0 > ε = 0.3


# --------------------------------------------------------------------------------------------
# Attention sinks (Gu et al., "When Attention Sink Emerges in Language Models", ICLR 2025)

def _check_attention(attn: Array) -> Array:
    attn = jnp.asarray(attn)
    if attn.ndim != 4:
        raise ValueError(f"expected attention weights (B, H, Lq, Lk), got shape {attn.shape}")
    return attn


def _counted_pairs(shape, mask: Array | None, query_mask_BxLq: Array | None) -> Array | None:
    """Boolean (B, H, Lq, Lk): key k visible to query q and q counted; None when all are."""
    if mask is None and query_mask_BxLq is None:
        return None
    counted = jnp.ones(shape, bool) if mask is None else jnp.broadcast_to(
        jnp.asarray(mask).astype(bool), shape)
    if query_mask_BxLq is not None:
        query_mask_BxLq = jnp.asarray(query_mask_BxLq).astype(bool)
        if query_mask_BxLq.shape != (shape[0], shape[2]):
            raise ValueError(f"expected a query mask (B, Lq) = {(shape[0], shape[2])}, got "
                             f"{query_mask_BxLq.shape}")
        counted = counted & query_mask_BxLq[:, None, :, None]
    return counted


def key_attention_scores(attn_BxHxLqxLk: Array, mask: Array | None = None,
                         query_mask_BxLq: Array | None = None) -> Array:
    """Gu et al.'s importance score of every key, (B, H, Lk):

        α_k = Σ_{q ∈ Q(k)} A_qk / |Q(k)|,  Q(k) = the counted queries to which key k is visible,

    i.e. 1/(T − k + 1) Σ_{q ≥ k} A_qk for a causal head of length T (their definition, queries and
    keys 1-based there). α_0 is the attention sink score of the head in that sequence. The query
    that sees only key 0 (a causal head's first query, A_00 = 1) counts, as in Gu et al.'s sum
    from q = 1; `metrics.attention.mean_over_queries` leaves such queries out, Gu et al. do not.
    NaN for a key that no counted query sees.
    """
    attn = _check_attention(attn_BxHxLqxLk)
    counted = _counted_pairs(attn.shape, mask, query_mask_BxLq)
    if counted is None:
        return key_attention_scores_from_sums(jnp.sum(attn, axis=-2), attn.shape[-2])
    return key_attention_scores_from_sums(jnp.sum(jnp.where(counted, attn, 0.0), axis=-2),
                                          jnp.sum(counted, axis=-2))


def key_attention_scores_from_sums(column_sums_BxHxLk: Array, viewer_counts) -> Array:
    """`key_attention_scores` from the per-key column sums Σ_{q ∈ Q(k)} A_qk and the number of
    counted queries that see each key, |Q(k)| (broadcastable; an int when every key is seen by
    every query): what a fused kernel can write without the L × L matrix. NaN where |Q(k)| = 0."""
    sums = jnp.asarray(column_sums_BxHxLk)
    counts = jnp.broadcast_to(jnp.asarray(viewer_counts).astype(sums.dtype), sums.shape)
    return jnp.where(counts > 0, sums / jnp.maximum(counts, 1.0), jnp.nan)


def sink_scores_from_probabilities(sink_BxHxLq: Array, query_mask_BxLq: Array | None = None
                                   ) -> Array:
    """α_0, (B, H), from each query's probability on the first key (the block's `attn_sink`
    probe, (B, H, Lq)): the mean over the counted queries. Equal to
    `key_attention_scores(...)[..., 0]` whenever key 0 is visible to every counted query (causal
    and right-padded inputs). NaN for a sequence without counted queries."""
    p = jnp.asarray(sink_BxHxLq)
    if p.ndim != 3:
        raise ValueError(f"expected sink probabilities (B, H, Lq), got shape {p.shape}")
    if query_mask_BxLq is None:
        return jnp.mean(p, axis=-1)
    w_BxLq = jnp.asarray(query_mask_BxLq).astype(p.dtype)
    counts_B = jnp.sum(w_BxLq, axis=-1)
    sums_BxH = jnp.einsum("bhq,bq->bh", jnp.where(w_BxLq[:, None, :] > 0, p, 0.0), w_BxLq)
    return jnp.where(counts_B[:, None] > 0, sums_BxH / jnp.maximum(counts_B, 1.0)[:, None],
                     jnp.nan)


def sink_rate(scores: Array, epsilon: float = SINK_EPSILON, axis=None) -> Array:
    """Share of the scores strictly above ε (Gu et al.: Sink_ε = mean of 1(α_0 > ε)), NaN scores
    left out: with the (B, H) sink scores of one layer, the share of (sequence, head) pairs whose
    head is a sink head in that sequence, i.e. thresholded per sequence, then averaged over
    sequences and heads (axis=None), or per head (axis=0, (H,)). Average the per-layer rates
    over layers for Gu et al.'s model-level number (every layer has H heads). Gu et al. report
    it over 100 sequences of 64 tokens; whether α_0 is thresholded per sequence or after the
    average over sequences is the one choice here (docs/SCIENCE.md, "Extreme tokens, sinks and
    intrinsic dimension"): per sequence, then averaged."""
    scores = jnp.asarray(scores)
    valid = ~jnp.isnan(scores)
    over = valid & (scores > epsilon)
    return (jnp.sum(over, axis=axis).astype(scores.dtype)
            / jnp.sum(valid, axis=axis).astype(scores.dtype))


def attention_sink_rate(attn_BxHxLqxLk: Array, mask: Array | None = None,
                        query_mask_BxLq: Array | None = None,
                        epsilon: float = SINK_EPSILON) -> Array:
    """Gu et al.'s sink rate of one layer, (): `sink_rate` of α_0 from `key_attention_scores`.
    0 for uniform attention over more than 1/ε keys, 1 for attention all on the first key."""
    return sink_rate(key_attention_scores(attn_BxHxLqxLk, mask, query_mask_BxLq)[..., 0],
                     epsilon)


def max_key_attention(scores_BxHxLk: Array) -> tuple[Array, Array]:
    """The position-free sink score: the largest mean attention any single key receives,
    max_k α_k, and the key k that receives it, each (B, H) (NaN keys left out; NaN and −1 when
    every key is NaN). max_k α_k ≥ α_0, so `sink_rate` of these values, the position-free sink
    rate, is at least Gu et al.'s; it also counts heads that sink on a later delimiter token.
    For a causal head the last keys' α_k average few queries (α_{T−1} = A_{T−1,T−1}), so they can
    win on one query's attention to itself; restrict the keys (scores[..., :K]) to avoid it."""
    scores = jnp.asarray(scores_BxHxLk)
    filled = jnp.where(jnp.isnan(scores), -jnp.inf, scores)
    best = jnp.max(filled, axis=-1)
    found = best > -jnp.inf
    return (jnp.where(found, best, jnp.nan),
            jnp.where(found, jnp.argmax(filled, axis=-1), -1))


# --------------------------------------------------------------------------------------------
# No-op heads (Bondarenko et al. 2023)

def _values(values_BxLxHxDh: Array) -> Array:
    v = jnp.asarray(values_BxLxHxDh)
    if v.ndim != 4:
        raise ValueError(f"expected values (B, L, H, Dh), got shape {v.shape}")
    return v


def noop_head_score(sink_scores_BxH: Array, values_BxLxHxDh: Array,
                    mask_BxL: Array | None = None) -> Array:
    """α_0 · ‖v_0‖ / mean_j ‖v_j‖, (B, H): the sink's attention mass (`key_attention_scores`
    [..., 0] or `sink_scores_from_probabilities`) times the norm of the sink's value relative to
    the head's mean value norm over the valid tokens of the sequence: the size of the sink's
    contribution α_0 v_0 to the output, in units of a typical value. A head that dumps its
    attention on a sink whose value is small (a no-op head, Bondarenko et al.) has a high α_0 and
    a low score. NaN when every value of the sequence is zero."""
    v = _values(values_BxLxHxDh)
    sink = jnp.asarray(sink_scores_BxH)
    if sink.shape != (v.shape[0], v.shape[2]):
        raise ValueError(f"expected sink scores (B, H) = {(v.shape[0], v.shape[2])}, got "
                         f"{sink.shape}")
    norms_BxLxH = vector_norms(v)
    _, inv_c = power_of_two_above(jnp.max(norms_BxLxH))
    norms_BxLxH = norms_BxLxH * inv_c  # the ratio is scale-free; the sum cannot overflow
    if mask_BxL is None:
        mean_BxH = jnp.mean(norms_BxLxH, axis=1)
    else:
        w_BxL = jnp.asarray(mask_BxL).astype(v.dtype)
        mean_BxH = (jnp.einsum("blh,bl->bh", norms_BxLxH, w_BxL)
                    / jnp.sum(w_BxL, axis=1)[:, None])
    ratio = norms_BxLxH[:, 0, :] / jnp.where(mean_BxH > 0, mean_BxH, jnp.nan)
    return sink * ratio


def attention_output_norms(attn_BxHxLqxLk: Array, values_BxLxHxDh: Array,
                           mask: Array | None = None, query_mask_BxLq: Array | None = None
                           ) -> dict[str, Array]:
    """How much of the values' norm survives the mixing, per (sequence, head), each (B, H):

      output_norm          mean over counted queries of ‖o_q‖, o_q = Σ_k A_qk v_k (before the
                           output projection);
      weighted_value_norm  mean over counted queries of Σ_k A_qk ‖v_k‖;
      ratio                output_norm / weighted_value_norm ∈ [0, 1] (triangle inequality): 1
                           when each query attends to values that point the same way, near 0
                           when the mixed values cancel (one way a head does nothing).
    Masked keys (mask False) get weight 0 whatever `attn` holds there. Computed on values
    divided by a power of two above their largest entry, so no sum overflows.
    """
    attn = _check_attention(attn_BxHxLqxLk)
    v = _values(values_BxLxHxDh)
    if v.shape[0] != attn.shape[0] or v.shape[1] != attn.shape[3] or v.shape[2] != attn.shape[1]:
        raise ValueError(f"values {v.shape} do not match attention {attn.shape}: expected "
                         f"(B, Lk, H, Dh)")
    if mask is not None:
        attn = jnp.where(jnp.broadcast_to(jnp.asarray(mask).astype(bool), attn.shape), attn, 0.0)
    c, inv_c = power_of_two_above(jnp.max(jnp.abs(v)))
    v = v * inv_c
    out_BxHxLqxDh = jnp.einsum("bhqk,bkhd->bhqd", attn, v, precision=jax.lax.Precision.HIGHEST)
    out_norm_BxHxLq = vector_norms(out_BxHxLqxDh)
    weighted_BxHxLq = jnp.einsum("bhqk,bkh->bhq", attn, vector_norms(v),
                                 precision=jax.lax.Precision.HIGHEST)
    if query_mask_BxLq is None:
        out_mean, weighted_mean = jnp.mean(out_norm_BxHxLq, -1), jnp.mean(weighted_BxHxLq, -1)
    else:
        w_BxLq = jnp.asarray(query_mask_BxLq).astype(v.dtype)
        count_B = jnp.sum(w_BxLq, axis=-1)[:, None]
        out_mean = jnp.einsum("bhq,bq->bh", out_norm_BxHxLq, w_BxLq) / count_B
        weighted_mean = jnp.einsum("bhq,bq->bh", weighted_BxHxLq, w_BxLq) / count_B
    return {"output_norm": out_mean * c, "weighted_value_norm": weighted_mean * c,
            "ratio": out_mean / jnp.where(weighted_mean > 0, weighted_mean, jnp.nan)}


# --------------------------------------------------------------------------------------------
# The bridge to Godey: is the sink's logit excess carried by the mean-query term?

def _sink_offsets(keys_BxLxHxDh: Array, visible_BxHxLxL: Array, w_BxL: Array,
                  key_B: Array | None = None) -> tuple[Array, Array]:
    """(Δ (B, H, L, Dh), number of visible keys (B, H, L)): Δ_bi = k_bj − mean of the keys visible
    to query i, with j = key_B[b] (None: key 0, the sink). The keys are centred first (a no-op for
    Δ), so that k_j − k̄_V cancels less of a large common key."""
    k = keys_BxLxHxDh
    keys_c = k - jnp.einsum("blhd,bl->hd", k, w_BxL)[None, None] / jnp.sum(w_BxL)
    vis = visible_BxHxLxL.astype(k.dtype)
    n_vis_BxHxL = jnp.sum(vis, axis=-1)
    kbar_BxHxLxDh = (jnp.einsum("bhqk,bkhd->bhqd", vis, keys_c,
                                precision=jax.lax.Precision.HIGHEST)
                     / jnp.maximum(n_vis_BxHxL, 1.0)[..., None])
    key_c_BxHxDh = (keys_c[:, 0] if key_B is None
                    else jnp.take_along_axis(keys_c, key_B[:, None, None, None], axis=1)[:, 0])
    return key_c_BxHxDh[:, :, None, :] - kbar_BxHxLxDh, n_vis_BxHxL


def sink_logit_split(queries_BxLxHxDh: Array, keys_BxLxHxDh: Array, mask: Array | None = None,
                     query_mask_BxL: Array | None = None, scale: float | None = None
                     ) -> dict[str, Array]:
    """Split the first key's logit excess into the term shared by all queries and the rest, per
    head, with the conventions of `metrics.logit_terms` (s = 1/√Dh by default, q̄ the mean query
    of the head over the tokens of the batch, logits l_ij = s q_i·k_j without additive biases).

    For every counted query i of sequence b (valid, key 0 visible, ≥ 2 visible keys V(b, i)),
    with k̄_V the mean of its visible keys and Δ_bi = k_b0 − k̄_V:

        excess_bi = l_bi0 − mean_{j∈V} l_bij = s q_bi·Δ_bi
                  = s q̄·Δ_bi  +  s (q_bi − q̄)·Δ_bi
                    shared        query-specific

    The shared term is m_0 − mean_{j∈V} m_j with `logit_terms`' m_j = s q̄·(k_j − k̄): the same
    for every query that sees the same keys. Returned, each (H,), as means over the counted
    queries of the batch: "excess", "shared", "query_specific" (excess = shared + query_specific
    up to rounding), and the shared term's scale, shared = s·mean_query_norm·sink_offset_norm·
    sink_offset_cosine, with Δ̄ the mean of Δ_bi over the counted queries: "mean_query_norm" ‖q̄‖,
    "sink_offset_norm" ‖Δ̄‖ and "sink_offset_cosine" cos(q̄, Δ̄) (0 when either is zero).
    `mask` is the visible-key mask broadcastable to (B, H, L, L); `query_mask_BxL` the valid
    tokens (None: all, and then q̄ is `logit_terms`' mean over every token). NaN for a head
    without counted queries.
    """
    q = jnp.asarray(queries_BxLxHxDh)
    k = jnp.asarray(keys_BxLxHxDh)
    if q.ndim != 4 or k.shape != q.shape:
        raise ValueError(f"expected queries and keys of equal shape (B, L, H, Dh), got "
                         f"{q.shape} and {k.shape}")
    b, l, h, dh = q.shape
    s = dh ** -0.5 if scale is None else scale
    visible = (jnp.ones((b, h, l, l), bool) if mask is None
               else jnp.broadcast_to(jnp.asarray(mask).astype(bool), (b, h, l, l)))
    tokens_BxL = (jnp.ones((b, l), bool) if query_mask_BxL is None
                  else jnp.asarray(query_mask_BxL).astype(bool))
    w_BxL = tokens_BxL.astype(q.dtype)
    mean_q_HxDh = jnp.einsum("blhd,bl->hd", q, w_BxL) / jnp.sum(w_BxL)
    delta_BxHxLxDh, n_vis_BxHxL = _sink_offsets(k, visible, w_BxL)
    counted = visible[..., 0] & (n_vis_BxHxL > 1) & tokens_BxL[:, None, :]
    wc = counted.astype(q.dtype)
    n_H = jnp.sum(wc, axis=(0, 2))

    def mean_over_counted(v_BxHxL):
        return jnp.sum(jnp.where(counted, v_BxHxL, 0.0), axis=(0, 2)) / n_H

    q_dev_BxHxLxDh = jnp.transpose(q - mean_q_HxDh[None, None], (0, 2, 1, 3))
    shared = s * jnp.einsum("hd,bhqd->bhq", mean_q_HxDh, delta_BxHxLxDh,
                            precision=jax.lax.Precision.HIGHEST)
    specific = s * jnp.sum(q_dev_BxHxLxDh * delta_BxHxLxDh, axis=-1)
    excess = s * jnp.sum(jnp.transpose(q, (0, 2, 1, 3)) * delta_BxHxLxDh, axis=-1)
    mean_delta_HxDh = (jnp.einsum("bhqd,bhq->hd", jnp.where(counted[..., None], delta_BxHxLxDh,
                                                              0.0), wc)
                       / n_H[:, None])
    cosine = jnp.sum(unit_vectors(mean_q_HxDh) * unit_vectors(mean_delta_HxDh), axis=-1)
    return {"excess": mean_over_counted(excess),
            "shared": mean_over_counted(shared),
            "query_specific": mean_over_counted(specific),
            "mean_query_norm": vector_norms(mean_q_HxDh),
            "sink_offset_norm": vector_norms(mean_delta_HxDh),
            "sink_offset_cosine": cosine}
