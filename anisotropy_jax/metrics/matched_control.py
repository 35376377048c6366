"""The variance-matched control of the key-term intervention (`metrics.intervention`), and the
share of a head's entropy deficit that a removal recovers.

Removing the key term m_j from the logits l_ij takes some logit variance out of every query's
row; a control that *adds* variance (a permutation of m, nearly uncorrelated with the rest) or
removes none cannot tell "m sharpens attention" from "any term of m's size would". The matched
control removes the same variance from a term that is not m: the query-specific term
r_ij = s (q_i − q̄)·(k_j − k̄) (`logit_terms.split_logits`), scaled by one α per query,

    Var_j(l_ij − α r_ij) = Var_j(l_ij − m_j)        (population variance over the visible keys)
    ⇔  Var(r) α² − 2 Cov(l, r) α + Var(l) − Var(l − m) = 0.

Of the two roots the one of smallest |α| is taken. Both remove the same variance, but the smaller
changes the logits least (‖α r‖ is smallest), and it goes to 0 as m's share of the variance does
(a head whose m removes nothing gets a control that removes nothing); the other root lies beyond
the minimum of the parabola: it overshoots, removing r and adding back its reverse. Where no real
root exists the target lies below the least variance any α reaches (Var(l) − Cov(l, r)²/Var(r):
r does not carry as much removable variance as m does); the control then takes the α of that
minimum and the query counts as *unmatched*: the control removed less variance than m did, so it
is weaker than the key term by construction, and the fraction of unmatched queries is reported
beside every result that uses it.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from anisotropy_jax.metrics.logit_terms import _cov_over_visible

Array = jax.Array

# A query is matched when the control's variance is within this fraction of Var(l) of the target
# (float32 rounding of the variances is ~1e-6 of Var(l); an unreachable target misses by more).
MATCH_RTOL = 1e-3
# A head whose mean normalised entropy is above 1 − MIN_ENTROPY_DEFICIT has (almost) uniform
# attention: no deficit to recover, so its share is undefined (NaN), never a ratio of rounding.
MIN_ENTROPY_DEFICIT = 0.01


def matched_control_scale(logits_BxHxLqxLk: Array, key_term: Array, query_specific: Array,
                          visible: Array) -> dict[str, Array]:
    """Per query (B, H, Lq), over its visible keys (module docstring):

      "alpha"      the scale α of r: Var(l − α r) = Var(l − m) where a real root exists (the root
                   of smallest |α|), else the α minimising Var(l − α r);
      "matched"    bool, |Var(l − α r) − Var(l − m)| ≤ MATCH_RTOL · Var(l);
      "shortfall"  (Var(l − α r) − Var(l − m)) / Var(l): the variance removing m takes out that the
                   control could not (0 when matched; 0 where Var(l) = 0).
    `key_term` m (B, H, 1, Lk) and `query_specific` r (B, H, Lq, Lk) as `split_logits` returns
    them, `visible` the boolean mask of the logits' shape.
    """
    logits = jnp.asarray(logits_BxHxLqxLk)
    w = visible.astype(logits.dtype)
    counts = jnp.maximum(jnp.sum(w, axis=-1), 1.0)
    r = jnp.broadcast_to(query_specific, logits.shape)

    def cov(a, b):
        return _cov_over_visible(a, b, w, counts)

    var_l, cov_lr, var_r = cov(logits, logits), cov(logits, r), cov(r, r)
    without_m = logits - key_term
    target = cov(without_m, without_m)
    excess = var_l - target  # the variance removing m takes out (negative if it adds some)
    disc = cov_lr * cov_lr - var_r * excess
    # The smallest-|α| root in the form without cancellation: the product of the roots is
    # excess / Var(r), and the root of largest |α| is (C + sign(C)·√disc) / Var(r).
    larger_times_var_r = cov_lr + jnp.where(cov_lr >= 0, 1.0, -1.0) * jnp.sqrt(
        jnp.maximum(disc, 0.0))
    safe = jnp.where(larger_times_var_r != 0, larger_times_var_r, 1.0)
    root = jnp.where(larger_times_var_r != 0, excess / safe, 0.0)  # 0: C = disc = excess = 0
    has_root = (disc >= 0) & (var_r > 0)
    minimiser = cov_lr / jnp.where(var_r > 0, var_r, 1.0) * (var_r > 0)
    alpha = jnp.where(has_root, root, minimiser)
    achieved = var_l - 2 * alpha * cov_lr + alpha * alpha * var_r
    miss = achieved - target
    scale = jnp.where(var_l > 0, var_l, 1.0)
    return {"alpha": alpha, "matched": jnp.abs(miss) <= MATCH_RTOL * jnp.maximum(var_l, 0.0),
            "shortfall": jnp.where(var_l > 0, miss / scale, 0.0)}


def entropy_deficit_share(original: Array, removed: Array,
                          min_deficit: float = MIN_ENTROPY_DEFICIT) -> Array:
    """(H(removed) − H(original)) / (1 − H(original)) per head, for mean normalised entropies
    (uniform attention = 1): the share of the head's entropy deficit that the removal recovers
    (1: back to uniform, 0: unchanged, < 0: sharper). NaN where the deficit 1 − H(original) is
    below `min_deficit` (attention already about uniform: nothing to recover)."""
    deficit = 1.0 - original
    defined = deficit >= min_deficit
    return jnp.where(defined, (removed - original) / jnp.where(defined, deficit, 1.0), jnp.nan)
