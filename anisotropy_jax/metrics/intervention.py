"""A causal test of the key term: recompute attention without it, and without controls
(docs/TRAIN.md, "The key-term intervention").

With the split of `metrics.logit_terms` (s = the logit scale, q̄, k̄ the batch means),

    l_ij = s q_i·k̄  +  m_j  +  s (q_i − q̄)·(k_j − k̄),      m_j = s q̄·(k_j − k̄),

the first term is one constant per query (the softmax cancels it), m_j ranks the keys the same
way for every query, the last term is query-specific. Across heads, entropy tracks the total logit
spread, so any part of the logit variance correlates with it; a correlation cannot say which part
sharpens attention. The intervention removes one part and measures what the softmax does:

  key_term        l_ij − m_j
  control         l_ij − m_{π_i(j)}: m permuted, for each query i separately, over the keys that
                  query sees. Over every query's visible keys the removed values are exactly those
                  of m_j (same variance, same multiset), but no longer aligned with the keys they
                  bias. For a causal head this is the only permutation that matches the variance
                  over every prefix exactly; the price is that the control is no longer common to
                  all queries.
  shared_control  l_ij − m_{π(j)}: one permutation of all keys of the sequence, the same for every
                  query: common to all queries like m_j (the control for query agreement). With no
                  mask its variance over each query's keys equals m's; under a causal mask query i
                  receives the m of i + 1 keys drawn from the whole sequence, equal in variance to
                  m over its prefix only on average, and only when m does not trend with position.
  matched_control l_ij − α_i r_ij: the query-specific term r_ij = s (q_i − q̄)·(k_j − k̄), scaled
                  per query so that the logit variance over its visible keys falls exactly as
                  much as removing m makes it fall (`metrics.matched_control`: the root of
                  smallest |α|; where no α reaches it, the α of least variance, and the query
                  counts as unmatched).
Each permutation control is averaged over `num_permutations` independent permutations.
Subtracting a permuted m typically *adds* variance (−m_π is nearly uncorrelated with the rest),
so Δ key_term − Δ control is positive whenever m contributes logit variance at all, whether or not
its alignment with the keys matters: these controls cannot fail. The matched control takes the
same variance out of the logits as removing m does; the test of the key term is the share of the
head's entropy deficit (1 − H) that each removal recovers (`entropy_deficit_share_<removal>`).

Statistics per head (H,), each averaged over the batch and the queries with more than one visible
key: "entropy" (normalised entropy, `metrics.normalized_entropy`), "max" (max probability),
"agreement" (`metrics.categorical_attention_statistics`' query_agreement, averaged over the
batch). Δ = value after the removal − value of the original logits. Also per head:
entropy_deficit_share_<key_term | matched_control> ((H after − H) / (1 − H), NaN where 1 − H <
MIN_ENTROPY_DEFICIT), matched_control_unmatched_fraction (the share of counted queries whose
variance the control could not match) and matched_control_shortfall (the mean over counted
queries of the variance it failed to remove, ÷ Var(l)).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from anisotropy_jax.metrics.attention import (attention_statistics,
                                              categorical_attention_statistics,
                                              normalized_entropy)
from anisotropy_jax.metrics.logit_terms import split_logits
from anisotropy_jax.metrics.matched_control import entropy_deficit_share, matched_control_scale

Array = jax.Array

STATISTICS = ("entropy", "agreement", "max")
REMOVALS = ("key_term", "control", "shared_control", "matched_control")
# The removals whose share of the entropy deficit is reported, and the matched control's quality.
DEFICIT_SHARES = tuple(f"entropy_deficit_share_{r}" for r in ("key_term", "matched_control"))
MATCH_QUALITY = ("matched_control_unmatched_fraction", "matched_control_shortfall")
NUM_PERMUTATIONS = 4


def permute_over_visible(values: Array, visible: Array, noise: Array) -> Array:
    """values (..., Lk) with, in every row, the values of its visible keys permuted among the
    visible keys: the permutation sorts `noise` (i.i.d. continuous draws broadcastable to values,
    e.g. (..., 1, Lk) for one permutation shared by all rows). Masked positions get some value of
    the row (irrelevant: they stay masked)."""
    values = jnp.asarray(values)
    shape = jnp.broadcast_shapes(values.shape, jnp.shape(visible), jnp.shape(noise))
    values = jnp.broadcast_to(values, shape)
    visible = jnp.broadcast_to(visible, shape)
    noise = jnp.broadcast_to(noise, shape)
    # Visible keys first, in random order (source) and in ascending order (target): the t-th
    # visible target position receives the value of the t-th random visible source.
    source = jnp.argsort(jnp.where(visible, noise, jnp.inf), axis=-1)
    position = jnp.broadcast_to(jnp.arange(shape[-1]), shape)
    target = jnp.argsort(jnp.where(visible, position, shape[-1]), axis=-1, stable=True)
    shuffled = jnp.take_along_axis(values, source, axis=-1)
    return jnp.take_along_axis(shuffled, jnp.argsort(target, axis=-1), axis=-1)


def _over_counted_queries(values_BxHxLq: Array, visible: Array) -> Array:
    """Per-head mean (H,) over the batch and the queries with more than one visible key."""
    counted = (jnp.sum(visible, axis=-1) > 1).astype(values_BxHxLq.dtype)
    return jnp.sum(values_BxHxLq * counted, axis=(0, 2)) / jnp.sum(counted, axis=(0, 2))


def sharpness(logits_BxHxLqxLk: Array, mask: Array | None = None) -> dict[str, Array]:
    """{"entropy", "agreement", "max"}, each (H,); see the module docstring."""
    logits = jnp.asarray(logits_BxHxLqxLk)
    visible = (jnp.ones(logits.shape, bool) if mask is None
               else jnp.broadcast_to(jnp.asarray(mask).astype(bool), logits.shape))
    counts_BxHxLq = jnp.sum(visible, axis=-1)
    stats = attention_statistics(logits, visible)
    agreement = categorical_attention_statistics(logits, visible, entropy=stats["entropy"])
    return {"entropy": _over_counted_queries(
                normalized_entropy(stats["entropy"], counts_BxHxLq), visible),
            "agreement": jnp.mean(agreement["query_agreement"], axis=0),
            "max": _over_counted_queries(stats["max"], visible)}


def control_noise(rng: Array, logits_shape, num_permutations: int = NUM_PERMUTATIONS
                  ) -> dict[str, Array]:
    """The uniform draws whose sort orders are the controls' permutations:
    {"control": (P, B, H, Lq, Lk), one permutation per query; "shared_control": (P, B, H, 1, Lk),
    one per sequence and head}, P = num_permutations. A function of `rng` alone: always float32,
    so that float64 logits get the same permutations as float32 ones."""
    batch, heads, num_queries, num_keys = logits_shape
    control, shared = jax.random.split(rng)
    return {"control": jax.random.uniform(control, (num_permutations, *logits_shape), jnp.float32),
            "shared_control": jax.random.uniform(shared, (num_permutations, batch, heads, 1,
                                                          num_keys), jnp.float32)}


def _matched_control(logits: Array, visible: Array, terms: dict[str, Array]
                     ) -> tuple[dict[str, Array], dict[str, Array]]:
    """(sharpness without α r, {MATCH_QUALITY}) of the variance-matched control."""
    match = matched_control_scale(logits, terms["key_term"], terms["query_specific"], visible)
    removed = sharpness(logits - match["alpha"][..., None] * terms["query_specific"], visible)
    unmatched = 1.0 - match["matched"].astype(logits.dtype)
    return removed, {"matched_control_unmatched_fraction": _over_counted_queries(unmatched, visible),
                     "matched_control_shortfall": _over_counted_queries(match["shortfall"],
                                                                        visible)}


def key_term_intervention(queries_BxLxHxDh: Array, keys_BxLxHxDh: Array,
                          logits_BxHxLqxLk: Array, mask: Array | None = None, *,
                          rng: Array, num_permutations: int = NUM_PERMUTATIONS,
                          scale: float | None = None) -> dict[str, Array]:
    """{"original_<stat>", "delta_<stat>_<removal>", DEFICIT_SHARES, MATCH_QUALITY}, each (H,),
    for stat in STATISTICS and removal in REMOVALS (module docstring). `logits` are those the
    softmax receives (s q·k), `mask` the visible-key mask broadcastable to them (None: all
    visible), `rng` a PRNG key (the permutations come from `control_noise(rng, …)`: a fixed key
    gives the same result), `scale` s for m_j and r_ij (default 1/√Dh)."""
    logits = jnp.asarray(logits_BxHxLqxLk)
    visible = (jnp.ones(logits.shape, bool) if mask is None
               else jnp.broadcast_to(jnp.asarray(mask).astype(bool), logits.shape))
    terms = split_logits(queries_BxLxHxDh, keys_BxLxHxDh, scale)
    m_BxHx1xLk = terms["key_term"]
    original = sharpness(logits, visible)
    removed = {"key_term": sharpness(logits - m_BxHx1xLk, visible)}
    noise = control_noise(rng, logits.shape, num_permutations)
    # The shared control permutes all keys of the sequence (one permutation for every query).
    keys_visible = {"control": visible,
                    "shared_control": jnp.ones(noise["shared_control"].shape[1:], bool)}
    for name in ("control", "shared_control"):
        def one(noise_one, name=name):
            control = permute_over_visible(m_BxHx1xLk, keys_visible[name], noise_one)
            return sharpness(logits - control, visible)

        per_permutation = jax.lax.map(one, noise[name])
        removed[name] = {s: jnp.mean(v, axis=0) for s, v in per_permutation.items()}
    removed["matched_control"], out = _matched_control(logits, visible, terms)
    out.update({f"original_{s}": original[s] for s in STATISTICS})
    for name, stats in removed.items():
        out.update({f"delta_{s}_{name}": stats[s] - original[s] for s in STATISTICS})
    for name in ("key_term", "matched_control"):
        out[f"entropy_deficit_share_{name}"] = entropy_deficit_share(
            original["entropy"], removed[name]["entropy"])
    return out
