"""Attention statistics, the one implementation: per-query sharpness of the softmax and per-head
query/key geometry.

Input convention (every function here): float32 attention *logits* (..., Lq, Lk) — q·k/(√Dh·τ)
before the softmax — and an optional boolean mask of visible keys broadcastable to them (False =
masked: probability 0, whatever the logit). One value per query comes back, (..., Lq). For
a normalisation other than softmax, whose weights need not sum to one, `attention_statistics`
takes the weights themselves (`weight_statistics`: entropy of the renormalised weights, and the
mass Σ_k w_k as its own statistic). The plain
attention path (`models.attention`), the fused kernel's test reference, the sweep's reduction, the
dynamics analysis and the benchmark's parity check all call these functions.

The categorical-attention statistics (`attention_query_agreement`, `attention_row_cosine`,
`attention_query_key_information`) take the same input but reduce the query and key axes: one
value per attention matrix, (...,), e.g. (B, H) for (B, H, Lq, Lk). They ask whether all queries
attend to the *same* keys (categorical attention), which entropy alone cannot tell from attention
that is merely sharp. Only *counted* queries enter them: those with more than one visible key (a
causal head's first query has no choice). A matrix with fewer counted queries than a statistic
needs (one for agreement and information, two for the row cosine) gives NaN.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from anisotropy_jax.metrics.norms import unit_vectors, vector_norms

Array = jax.Array

STATISTICS = ("entropy", "max", "sink")  # "mass" too for weights that need not sum to one
CATEGORICAL_STATISTICS = ("query_agreement", "row_cosine", "query_key_information")


def _visible(mask: Array | None, shape) -> Array:
    if mask is None:
        return jnp.ones(shape, dtype=bool)
    return jnp.broadcast_to(jnp.asarray(mask).astype(bool), shape)


def attention_statistics(logits: Array, mask: Array | None = None, *,
                         weights: Array | None = None) -> dict[str, Array]:
    """{"entropy", "max", "sink"}, each (..., Lq), of every query's softmax over its keys.

      entropy  −Σ_k p_k log p_k in nats, from log_softmax (never log(softmax)) with 0·log 0 = 0:
               one-hot attention gives exactly 0, uniform attention over n keys gives ln n;
      max      max_k p_k (1/n when uniform over n keys);
      sink     p_0, the probability on the first key (the attention sink).
    Masked keys (mask False, or logits of −inf) get p = 0. A row whose keys are all masked is NaN.

    With `weights` (..., Lq, Lk), the weights of a normalisation whose rows need not sum to one
    (models/attention.py NORMALIZATIONS), the statistics are those of the weights as given, and
    the logits are not used: `weight_statistics`, which adds "mass".
    """
    if weights is not None:
        return weight_statistics(weights, mask)
    logits = jnp.asarray(logits)
    logits = jnp.where(_visible(mask, logits.shape), logits, -jnp.inf)
    log_p = jax.nn.log_softmax(logits, axis=-1)
    p = jnp.exp(log_p)
    return {"entropy": -jnp.sum(jnp.where(p > 0, p * log_p, 0.0), axis=-1),
            "max": jnp.exp(jnp.max(log_p, axis=-1)),  # = max p exactly (exp is monotone)
            "sink": p[..., 0]}


def renormalized_weights(weights: Array, mask: Array | None = None) -> Array:
    """w / Σ_k w_k over the visible keys (the shape of the attention), (..., Lq, Lk); masked keys
    get 0. A row of zero mass (a head that attends to nothing: clipped softmax, softpick with
    every logit ≤ 0, an underflowed sigmoid) is defined as uniform over its visible keys; a row
    without visible keys stays all zero."""
    w = jnp.asarray(weights)
    visible = _visible(mask, w.shape)
    w = jnp.where(visible, w, 0.0)
    mass = jnp.sum(w, axis=-1, keepdims=True)
    uniform = visible / jnp.maximum(jnp.sum(visible, axis=-1, keepdims=True), 1)
    return jnp.where(mass > 0, w / jnp.where(mass > 0, mass, 1.0), uniform.astype(w.dtype))


def weight_statistics(weights: Array, mask: Array | None = None) -> dict[str, Array]:
    """{"entropy", "max", "sink", "mass"}, each (..., Lq), of attention weights (..., Lq, Lk) ≥ 0
    that need not sum to one (off-by-one, sigmoid, softpick, clipped softmax):

      entropy  the entropy (nats) of the renormalised weights p̂ = w/Σw over the visible keys
               (`renormalized_weights`): the shape of the attention, whatever its mass; a row of
               zero mass counts as uniform (entropy ln n), a row without visible keys as 0;
      max      max_k w_k and
      sink     w_0, of the weights as given (Gu et al.'s α_0 is the raw weight);
      mass     Σ_k w_k over the visible keys (1 for softmax; 0 for a head that attends to nothing).
    Masked keys count as weight 0 whatever `weights` holds there. Always finite.
    """
    w = jnp.where(_visible(mask, jnp.shape(weights)), jnp.asarray(weights), 0.0)
    p = renormalized_weights(w, mask)
    log_p = jnp.log(jnp.where(p > 0, p, 1.0))
    return {"entropy": -jnp.sum(p * log_p, axis=-1), "max": jnp.max(w, axis=-1),
            "sink": w[..., 0], "mass": jnp.sum(w, axis=-1)}


def visible_key_counts(shape, mask: Array | None = None) -> Array:
    """Number of visible keys per query, (..., Lq), for attention tensors of `shape`."""
    return jnp.sum(_visible(mask, tuple(shape)), axis=-1)


def normalized_entropy(entropy: Array, counts: Array) -> Array:
    """entropy / ln(counts) ∈ [0, 1] per query (counts broadcastable to entropy).

    1 = uniform over the visible keys, 0 = one-hot. A query with a single visible key (the first
    query of a causal head) has no choice to make: its value is defined as 0, and
    `mean_over_queries` leaves it out.
    """
    entropy = jnp.asarray(entropy)
    counts = jnp.broadcast_to(jnp.asarray(counts), entropy.shape)
    log_counts = jnp.log(jnp.maximum(counts, 2).astype(entropy.dtype))
    return jnp.where(counts > 1, entropy / log_counts, 0.0)


def mean_over_queries(values_BxHxLq: Array, counts_Lq: Array) -> Array:
    """Per-head mean (H,) over the batch and the queries that see more than one key (a query with
    one visible key has no choice and would bias every average towards one-hot)."""
    weight_Lq = (jnp.asarray(counts_Lq) > 1).astype(values_BxHxLq.dtype)
    weight_Lq = weight_Lq / jnp.sum(weight_Lq)
    return jnp.einsum("bhq,q->h", values_BxHxLq, weight_Lq) / values_BxHxLq.shape[0]


def attention_entropy(logits: Array, mask: Array | None = None) -> Array:
    """Entropy (nats) of each query's attention, (..., Lq); see `attention_statistics`."""
    return attention_statistics(logits, mask)["entropy"]


def normalized_attention_entropy(logits: Array, mask: Array | None = None) -> Array:
    """attention_entropy / ln(number of visible keys), (..., Lq); see `normalized_entropy`."""
    logits = jnp.asarray(logits)
    return normalized_entropy(attention_entropy(logits, mask),
                              visible_key_counts(logits.shape, mask))


def attention_max(logits: Array, mask: Array | None = None) -> Array:
    """Largest attention probability max_k p_k of each query, (..., Lq)."""
    return attention_statistics(logits, mask)["max"]


def attention_sink_mass(logits: Array, mask: Array | None = None) -> Array:
    """Probability each query puts on the first key (the attention sink), (..., Lq)."""
    return attention_statistics(logits, mask)["sink"]


class CategoricalSums(NamedTuple):
    """Sums over the counted queries of one attention matrix (leading shape (...,)), from which
    the categorical statistics follow in O(Lk) (`categorical_from_sums`). The fused kernel
    computes the three key sums on chip (models/fused_attention.py, `reduction_statistics`)."""

    votes: Array        # (..., Lk) number of counted queries whose largest logit is at key k
    mass: Array         # (..., Lk) Σ_q p_qk
    unit_mass: Array    # (..., Lk) Σ_q p_qk / ‖p_q‖
    entropy_sum: Array  # (...,) Σ_q H(p_q), nats
    count: Array        # (...,) n, the number of counted queries


def categorical_key_sums(logits: Array, mask: Array | None = None, *,
                         probabilities: Array | None = None,
                         entropy: Array | None = None) -> CategoricalSums:
    """The `CategoricalSums` of every attention matrix, from float32 logits (..., Lq, Lk) and an
    optional visible-key mask; `probabilities` and `entropy` as `categorical_attention_statistics`
    takes them."""
    logits = jnp.asarray(logits)
    visible = _visible(mask, logits.shape)
    counted = jnp.sum(visible, axis=-1) > 1
    weight = counted.astype(logits.dtype)
    # Without a mask every query counts (Lk > 1) and nothing is masked: no selects over the
    # (..., Lq, Lk) arrays; the two query sums below share one contraction (measured:
    # docs/benchmarks/categorical_xla_path_cpu.txt).
    every_query = mask is None and logits.shape[-1] > 1
    masked = logits if mask is None else jnp.where(visible, logits, -jnp.inf)
    is_top = masked == jnp.max(masked, axis=-1, keepdims=True)
    if not every_query:
        is_top = is_top & counted[..., None]
    votes = jnp.sum(is_top.astype(logits.dtype), axis=-2)
    if probabilities is None:
        probabilities = jax.nn.softmax(masked, axis=-1)
    if entropy is None:
        entropy = attention_statistics(logits, mask)["entropy"]
    # Uncounted rows drop out (an all-masked row is NaN: `where`, not a product, removes it).
    p = probabilities if every_query else jnp.where(counted[..., None], probabilities, 0.0)
    # Probabilities lie in [0, 1] and a row's norm in [1/√Lk, 1]: a plain norm is safe here.
    row_norm = jnp.sqrt(jnp.sum(p * p, axis=-1))
    # Both sums over the query axis as one contraction (on the CPU, XLA ran contractions faster
    # than reductions over the second-to-last axis).
    weights_QxR = jnp.stack([1.0 / jnp.where(row_norm > 0, row_norm, 1.0), weight], axis=-1)
    sums_KxR = jnp.einsum("...qk,...qr->...kr", p, weights_QxR, precision="highest")
    return CategoricalSums(votes, sums_KxR[..., 1], sums_KxR[..., 0],
                           jnp.sum(jnp.where(counted, entropy, 0.0), axis=-1),
                           jnp.sum(weight, axis=-1))


def categorical_from_sums(sums: CategoricalSums) -> dict[str, Array]:
    """{"query_agreement", "row_cosine", "query_key_information"}, each (...,), from the sums
    (formulas in `categorical_attention_statistics`)."""
    n = sums.count
    mean_p = sums.mass / n[..., None]
    entropy_of_mean = -jnp.sum(mean_p * jnp.log(jnp.where(mean_p > 0, mean_p, 1.0)), axis=-1)
    total = sums.unit_mass
    return {
        "query_agreement": jnp.max(sums.votes, axis=-1) / n,
        "row_cosine": (jnp.sum(total * total, axis=-1) - n) / jnp.where(n >= 2, n * (n - 1),
                                                                       jnp.nan),
        "query_key_information": entropy_of_mean - sums.entropy_sum / n,
    }


def categorical_attention_statistics(logits: Array, mask: Array | None = None, *,
                                     probabilities: Array | None = None,
                                     entropy: Array | None = None) -> dict[str, Array]:
    """{"query_agreement", "row_cosine", "query_key_information"}, each (...,): the three
    categorical-attention statistics of every attention matrix in one pass (the wrappers below
    return one each). Only counted queries (> 1 visible key) enter; n = their number.

      query_agreement        max over keys k of the share of counted queries whose largest
                             logit is at k: the share of queries whose argmax key is the most
                             frequent argmax key (a query whose maximum is tied votes for each
                             tied key; exact ties do not occur for continuous logits). 1 when all
                             queries pick the same key, 1/L for a one-to-one pattern.
      row_cosine             mean cosine between the probability rows of distinct counted
                             queries: with unit rows r_i and S = Σ r_i, (‖S‖² − n)/(n(n − 1)),
                             O(Lq·Lk) as `average_cosine_similarity`. 1 for identical rows, 0
                             for rows with disjoint support. NaN when n < 2.
      query_key_information  H(mean of p over counted queries) − mean of H(p), nats: the mutual
                             information between a uniformly drawn counted query and the key it
                             attends to; 0 for identical rows, ln L for a one-to-one one-hot
                             pattern, ≥ 0 up to rounding.
    NaN when n = 0. `probabilities` (softmax of the masked logits) and `entropy` (per query, as
    `attention_statistics` gives it) may be passed when already computed (the block's
    attn_weights and attn_entropy probes); they must come from these logits and mask. Computed
    as `categorical_from_sums(categorical_key_sums(...))`.
    """
    return categorical_from_sums(categorical_key_sums(logits, mask, probabilities=probabilities,
                                                      entropy=entropy))


def attention_query_agreement(logits: Array, mask: Array | None = None) -> Array:
    """Share of the counted queries (> 1 visible key) whose argmax key is the most frequent argmax
    key among them, (...,) ∈ [1/n, 1]; see `categorical_attention_statistics`."""
    return categorical_attention_statistics(logits, mask)["query_agreement"]


def attention_row_cosine(logits: Array, mask: Array | None = None) -> Array:
    """Mean cosine between the attention distributions of distinct counted queries (self-pairs
    excluded), (...,) ∈ [0, 1]; see `categorical_attention_statistics`."""
    return categorical_attention_statistics(logits, mask)["row_cosine"]


def attention_query_key_information(logits: Array, mask: Array | None = None) -> Array:
    """H(mean over counted queries of p) − mean over counted queries of H(p), nats, (...,); see
    `categorical_attention_statistics`."""
    return categorical_attention_statistics(logits, mask)["query_key_information"]


def query_key_geometry(queries_BxLxHxDh: Array, keys_BxLxHxDh: Array,
                       mask_BxL: Array | None = None) -> dict[str, Array]:
    """Per-head geometry of queries and keys (B, L, H, Dh); every entry has shape (H,).

      query_norm, key_norm: mean over tokens of ‖q_i‖, ‖k_j‖;
      mean_query_norm, mean_key_norm: ‖q̄‖, ‖k̄‖ (means over batch and positions);
      mean_query_key_cosine: cos(q̄, k̄) (0 when either mean is zero);
      mean_query_key_dot: q̄·k̄ / √Dh, the bias the means add to every logit.
    `mask_BxL` (B, L) restricts the means to valid tokens.
    """
    q = jnp.asarray(queries_BxLxHxDh)
    k = jnp.asarray(keys_BxLxHxDh)
    if q.ndim != 4 or k.shape != q.shape:
        raise ValueError(f"expected queries and keys of equal shape (B, L, H, Dh), got "
                         f"{q.shape} and {k.shape}")
    if mask_BxL is None:  # plain means: XLA ran the weighted contractions below far slower
        return query_key_geometry_from_means(
            jnp.mean(vector_norms(q), axis=(0, 1)), jnp.mean(vector_norms(k), axis=(0, 1)),
            jnp.mean(q, axis=(0, 1)), jnp.mean(k, axis=(0, 1)))
    w_BxL = jnp.asarray(mask_BxL).astype(q.dtype)
    count = jnp.sum(w_BxL)

    def mean_over_tokens(v_BxLxH):
        return jnp.einsum("blh,bl->h", v_BxLxH, w_BxL) / count

    return query_key_geometry_from_means(
        mean_over_tokens(vector_norms(q)), mean_over_tokens(vector_norms(k)),
        jnp.einsum("blhd,bl->hd", q, w_BxL) / count, jnp.einsum("blhd,bl->hd", k, w_BxL) / count)


def query_key_geometry_from_means(query_norm_H: Array, key_norm_H: Array, mean_q_HxDh: Array,
                                  mean_k_HxDh: Array) -> dict[str, Array]:
    """`query_key_geometry` from the per-head means of ‖q_i‖ and ‖k_j‖ and the mean vectors q̄,
    k̄ (H, Dh): what the fused kernel's `reduction_statistics` give without a pass over q and k."""
    cos = jnp.sum(unit_vectors(mean_q_HxDh) * unit_vectors(mean_k_HxDh), axis=-1)
    return {
        "query_norm": query_norm_H,
        "key_norm": key_norm_H,
        "mean_query_norm": vector_norms(mean_q_HxDh),
        "mean_key_norm": vector_norms(mean_k_HxDh),
        "mean_query_key_cosine": cos,
        "mean_query_key_dot": (jnp.sum(mean_q_HxDh * mean_k_HxDh, axis=-1)
                               / mean_q_HxDh.shape[-1] ** 0.5),
    }
