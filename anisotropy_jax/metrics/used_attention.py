"""Per-head statistics of the attention weights a model actually used, for any normalisation
(models/normalizations.py: softmax, off-by-one, the sigmoids, softpick, clipped softmax), whose
rows need not sum to one.

Input: the weights (B, H, Lq, Lk) ≥ 0 as the normalisation returned them, and the boolean mask of
visible keys broadcastable to them (None: all visible; masked keys count as weight 0). A query is
*counted* when it sees more than one key (as in metrics.attention: a causal head's first query has
no choice). Its *mass* is m = Σ_k w_k over its visible keys, and the *shape* of its attention the
renormalised weights p̂ = w/m. A counted query of zero mass (softpick with every logit ≤ 0,
clipped softmax clipped to 0 on every key, an underflowed sigmoid) has no shape: it is left out
of every shape statistic and counted in `zero_mass_share`, so no NaN enters a mean unseen.

Per head (H,):
  entropy             H(p̂) in nats,                       mean over (sequence, counted query
  entropy_normalized  H(p̂)/ln n, n the query's visible keys  with mass > 0)
  max                 max_k p̂_k                            "
  first_key           p̂_0, the renormalised weight on key 0 "
  query_agreement, row_cosine, query_key_information
                      `metrics.attention.categorical_from_sums` of the counted queries with mass
                      of each sequence's matrix, votes by the largest weight (for every
                      normalisation here the key of the largest logit); mean over the sequences
                      with enough such queries (one; two for row_cosine)
  mass                m, mean over (sequence, counted query), zero-mass queries included
  zero_mass_share     share of (sequence, counted query) with m = 0
A shape statistic is NaN for a head only where no query (sequence) qualifies; zero_mass_share
then says why. For softmax weights p̂ = w and m = 1 (up to rounding): the statistics of
metrics.attention.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from anisotropy_jax.metrics.attention import (categorical_from_sums, categorical_key_sums,
                                              normalized_entropy)

Array = jax.Array

USED_WEIGHT_STATISTICS = ("entropy", "entropy_normalized", "max", "first_key", "query_agreement",
                          "row_cosine", "query_key_information", "mass", "zero_mass_share")
# The fewest qualifying queries a sequence's matrix needs for each categorical statistic.
_CATEGORICAL_MINIMUM = {"query_agreement": 1, "row_cosine": 2, "query_key_information": 1}


def _mean_where(values: Array, rows: Array, axes: tuple[int, ...]) -> Array:
    """Mean of `values` over `axes` where `rows` holds; NaN where no row does (never a mean of
    nothing read as a number)."""
    n = jnp.sum(rows, axis=axes)
    total = jnp.sum(jnp.where(rows, values, 0.0), axis=axes)
    return jnp.where(n > 0, total / jnp.maximum(n, 1), jnp.nan)


def used_weight_statistics(weights_BxHxLqxLk: Array, mask: Array | None = None
                           ) -> dict[str, Array]:
    """{name in USED_WEIGHT_STATISTICS: (H,)} of one layer's attention weights (module
    docstring)."""
    w = jnp.asarray(weights_BxHxLqxLk)
    visible = (jnp.ones(w.shape, bool) if mask is None
               else jnp.broadcast_to(jnp.asarray(mask).astype(bool), w.shape))
    w = jnp.where(visible, w, 0.0)
    counts_BxHxLq = jnp.sum(visible, axis=-1)
    counted = counts_BxHxLq > 1
    mass = jnp.sum(w, axis=-1)
    shaped = counted & (mass > 0)
    p = jnp.where(shaped[..., None], w / jnp.where(shaped, mass, 1.0)[..., None], 0.0)
    entropy = -jnp.sum(p * jnp.log(jnp.where(p > 0, p, 1.0)), axis=-1)
    over_queries = (0, 2)
    out = {"entropy": _mean_where(entropy, shaped, over_queries),
           "entropy_normalized": _mean_where(normalized_entropy(entropy, counts_BxHxLq), shaped,
                                             over_queries),
           "max": _mean_where(jnp.max(p, axis=-1), shaped, over_queries),
           "first_key": _mean_where(p[..., 0], shaped, over_queries),
           "mass": _mean_where(mass, counted, over_queries),
           "zero_mass_share": _mean_where((mass <= 0).astype(w.dtype), counted, over_queries)}
    # Rows without mass are masked out entirely, so the categorical sums skip them like the
    # uncounted queries; the votes go to the largest renormalised weight.
    sums = categorical_key_sums(p, visible & shaped[..., None], probabilities=p, entropy=entropy)
    categorical_BxH = categorical_from_sums(sums)
    for name, minimum in _CATEGORICAL_MINIMUM.items():
        out[name] = _mean_where(categorical_BxH[name], sums.count >= minimum, (0,))
    return out
