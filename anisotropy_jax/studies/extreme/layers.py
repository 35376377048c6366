"""One forward of one batch and every extreme-token statistic of every layer, reduced inside the
jitted function (`layer_statistics_fn`): no (B, H, L, L) array leaves it, only per-head and
per-state numbers (`storage_bytes` states their size).

Per attention layer (block i, from the block's probes queries, keys, values, attn_logits,
attn_weights; models.block):
  sink_score        (B, H) Gu et al.'s α_0 (`metrics.sinks.key_attention_scores`), the counted
                    queries being the measured tokens (no padding; Whisper: the speech frames)
  free_sink_score   (B, H) the position-free score max_k α_k over the keys that at least half of
                    the sequence's counted queries see (a causal head's last keys average a few
                    queries' attention to themselves), and free_sink_key (B, H) its key
  noop_score        (B, H) α_0 · ‖v_0‖ / mean ‖v‖ (`noop_head_score`)
  output_ratio      (B, H) ‖Σ A v‖ / Σ A ‖v‖ averaged over queries (`attention_output_norms`)
  excess, shared, query_specific  (H,) the first key's logit excess and its split into
                    q̄·(k_0 − k̄) and the rest (`sink_logit_split`, on q·k/√Dh: an additive
                    logit bias, MPNet's relative positions, is not in it)
  query_positive, query_carried  (H,) per query (`query_split`): the share of the counted
                    queries whose excess is > 0, and whose excess is > 0 and at least half
                    carried by the shared term (shared_i ≥ excess_i / 2)
  control_query_carried  (H,) the same share as query_carried for a control key instead of key
                    0: one key per sequence, drawn at random among its measured keys 1 … n − 1
                    (`control_key_B`); a key that is not a sink, so that "carried" can be told
                    apart from a property of every key
Per hidden state (the family's `states`: embedding output, every block's output, the final
norm's output where there is one), over the measured tokens (`metrics.extreme`):
  top_values, top_batch, top_token, top_dim, top_ratio (top_k,)   massive activations
  median, massive_count, relative_count, kurtosis, inf_norm (B,)  per sequence
  cc_top_share (), cc_top_dims (top_dims,), average_cosine ()    CC_d (rogue dimensions)
  standardized_cosine (), top_pc_share (), top_pc_share_without_first ()
  average_cosine_without_first ()  Σ_d CC_d over every token but each sequence's first
  first_token_norm_ratio ()  mean over sequences of ‖x_b0‖ / the mean ‖x_bi‖ of its other
                    measured tokens: how much the first row weighs in the variance-weighted
                    top-PC share
  top_pc_share_unit (), top_pc_share_unit_without_first ()  the top-PC share of the unit rows
                    x/‖x‖, with and without each sequence's first token (norm weighting removed)
  twonn_dimension (), gride_dimension ()  intrinsic dimension of the measured tokens of the
                    batch but each sequence's first, pooled (`metrics.layer_metrics`: TwoNN, and
                    GRIDE at (n1, n2) = GRIDE_RANKS; identical points counted once). Position 0
                    is left out because the B first tokens (BOS / [CLS], or one token's
                    massive-activation row) form a far cluster of exactly B points: with B = 16
                    and n2 = 16, GRIDE's ratio r_16/r_8 of every first token measured that cluster
The visible-key mask is read from the logits (masked entries are MASK_VALUE), so causal, padding
and local-chunk masks are all the model's own.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.metrics import extreme, intrinsic_dimension, sinks
from anisotropy_jax.metrics.layer import layer_metrics
from anisotropy_jax.models.attention import MASK_VALUE

Array = jax.Array
HEAD_KEYS = ("sink_score", "free_sink_score", "free_sink_key", "noop_score", "output_ratio")
SPLIT_KEYS = ("excess", "shared", "query_specific")
QUERY_KEYS = ("query_positive", "query_carried", "control_query_carried")
CARRIED = 0.5  # a query's excess is carried by the shared term: shared_i ≥ CARRIED · excess_i
STATE_KEYS = ("top_values", "top_batch", "top_token", "top_dim", "top_ratio", "median",
              "massive_count", "relative_count", "kurtosis", "inf_norm", "cc_top_share",
              "cc_top_dims", "average_cosine", "standardized_cosine", "top_pc_share",
              "top_pc_share_without_first", "average_cosine_without_first",
              "first_token_norm_ratio", "top_pc_share_unit", "top_pc_share_unit_without_first",
              "twonn_dimension", "gride_dimension")
# GRIDE at neighbours 8 and 16, the scale every study reports (`LAYER_GRIDE_RANKS`, which says
# why); 16 neighbours stay well inside the smallest batch measured (8 sentences, ~300 tokens).
GRIDE_RANKS = intrinsic_dimension.LAYER_GRIDE_RANKS


def query_split(queries_BxLxHxDh: Array, keys_BxLxHxDh: Array, visible_BxHxLxL: Array,
                query_mask_BxL: Array, key_B: Array | None = None) -> dict[str, Array]:
    """The split of `sinks.sink_logit_split` per query (same q̄, Δ_bi and counted queries, from
    its `_sink_offsets`): per head (H,), the share of the counted queries whose excess
    s q_bi·Δ_bi is > 0 ("query_positive"), and whose excess is > 0 with the shared term
    s q̄·Δ_bi ≥ CARRIED × the excess ("query_carried"). NaN for a head without counted queries.
    `key_B` (B,) puts key key_B[b] in the place of key 0 (the control key); None: key 0."""
    q, k = queries_BxLxHxDh, keys_BxLxHxDh
    s = q.shape[-1] ** -0.5
    w_BxL = query_mask_BxL.astype(q.dtype)
    mean_q_HxDh = jnp.einsum("blhd,bl->hd", q, w_BxL) / jnp.sum(w_BxL)
    delta_BxHxLxDh, n_vis_BxHxL = sinks._sink_offsets(k, visible_BxHxLxL, w_BxL, key_B)
    key_visible_BxHxL = (visible_BxHxLxL[..., 0] if key_B is None else jnp.take_along_axis(
        visible_BxHxLxL, key_B[:, None, None, None], axis=-1)[..., 0])
    counted = key_visible_BxHxL & (n_vis_BxHxL > 1) & query_mask_BxL[:, None, :]
    excess = s * jnp.sum(jnp.transpose(q, (0, 2, 1, 3)) * delta_BxHxLxDh, axis=-1)
    shared = s * jnp.einsum("hd,bhqd->bhq", mean_q_HxDh, delta_BxHxLxDh,
                            precision=jax.lax.Precision.HIGHEST)
    n_H = jnp.sum(counted, axis=(0, 2)).astype(q.dtype)

    def share(condition_BxHxL):
        got = jnp.sum(counted & condition_BxHxL, axis=(0, 2)).astype(q.dtype)
        return jnp.where(n_H > 0, got / jnp.maximum(n_H, 1.0), jnp.nan)

    positive = excess > 0
    return {"query_positive": share(positive),
            "query_carried": share(positive & (shared >= CARRIED * excess))}


def attention_statistics(block: dict[str, Array], query_mask_BxL: Array, control_key_B: Array
                         ) -> dict[str, Array]:
    """The per-head statistics of one block's probes (module docstring); `control_key_B` (B,)
    the control key of each sequence."""
    attn, logits = block["attn_weights"], block["attn_logits"]
    visible = logits > MASK_VALUE / 2
    counted = visible & query_mask_BxL[:, None, :, None]
    scores_BxHxL = sinks.key_attention_scores(attn, visible, query_mask_BxL)
    viewers_BxHxL = jnp.sum(counted, axis=-2)
    queries_BxH = jnp.sum(query_mask_BxL, axis=-1)[:, None, None]
    widely_seen = 2 * viewers_BxHxL >= queries_BxH
    free, free_key = sinks.max_key_attention(jnp.where(widely_seen, scores_BxHxL, jnp.nan))
    alpha0_BxH = scores_BxHxL[..., 0]
    queries, keys = block["queries"].astype(jnp.float32), block["keys"].astype(jnp.float32)
    split = sinks.sink_logit_split(queries, keys, visible, query_mask_BxL)
    values = block["values"].astype(jnp.float32)
    return {"sink_score": alpha0_BxH, "free_sink_score": free, "free_sink_key": free_key,
            "noop_score": sinks.noop_head_score(alpha0_BxH, values, query_mask_BxL),
            "output_ratio": sinks.attention_output_norms(attn, values, visible,
                                                         query_mask_BxL)["ratio"],
            **{key: split[key] for key in SPLIT_KEYS},
            **query_split(queries, keys, visible, query_mask_BxL),
            "control_query_carried": query_split(queries, keys, visible, query_mask_BxL,
                                                 control_key_B)["query_carried"]}


def state_statistics(x_BxLxD: Array, mask_BxL: Array, top_k: int, top_dims: int
                     ) -> dict[str, Array]:
    """The per-state statistics of one hidden state (module docstring)."""
    massive = extreme.massive_activations(x_BxLxD, mask_BxL, k=top_k)
    cc_D = extreme.cosine_contributions(x_BxLxD, mask_BxL)
    share, dims = extreme.top_contribution_share(cc_D, top_dims)
    norms_BxLx1 = jnp.sqrt(jnp.sum(jnp.square(x_BxLxD), axis=-1, keepdims=True))
    units = x_BxLxD / jnp.where(norms_BxLx1 > 0, norms_BxLx1, 1.0)
    return {**{key: massive[key] for key in STATE_KEYS[:8]},
            "kurtosis": extreme.activation_kurtosis(x_BxLxD, mask_BxL),
            "inf_norm": extreme.activation_inf_norm(x_BxLxD, mask_BxL),
            "cc_top_share": share, "cc_top_dims": dims, "average_cosine": jnp.sum(cc_D),
            "standardized_cosine": extreme.standardized_average_cosine(x_BxLxD, mask_BxL),
            "top_pc_share": extreme.top_pc_share(x_BxLxD, mask_BxL),
            "top_pc_share_without_first": extreme.top_pc_share(x_BxLxD, mask_BxL,
                                                               drop_first=True),
            "average_cosine_without_first": jnp.sum(extreme.cosine_contributions(
                x_BxLxD[:, 1:], mask_BxL[:, 1:])),
            "first_token_norm_ratio": first_token_norm_ratio(x_BxLxD, mask_BxL),
            "top_pc_share_unit": extreme.top_pc_share(units, mask_BxL),
            "top_pc_share_unit_without_first": extreme.top_pc_share(units, mask_BxL,
                                                                    drop_first=True),
            **layer_metrics(x_BxLxD, mask_BxL.at[:, 0].set(False),
                            names=("twonn_dimension", "gride_dimension"))}


def first_token_norm_ratio(x_BxLxD: Array, mask_BxL: Array) -> Array:
    """Mean over the sequences whose first token is measured and that have another measured
    token of ‖x_b0‖ / mean_{i ≥ 1 measured} ‖x_bi‖, (); NaN when no sequence qualifies."""
    norms_BxL = jnp.sqrt(jnp.sum(jnp.square(x_BxLxD.astype(jnp.float32)), axis=-1))
    rest_BxL = mask_BxL.at[:, 0].set(False)
    n_rest_B = jnp.sum(rest_BxL, axis=-1)
    mean_rest_B = jnp.sum(jnp.where(rest_BxL, norms_BxL, 0.0), axis=-1) / jnp.maximum(n_rest_B, 1)
    ok_B = mask_BxL[:, 0] & (n_rest_B > 0) & (mean_rest_B > 0)
    ratio_B = norms_BxL[:, 0] / jnp.where(ok_B, mean_rest_B, 1.0)
    return jnp.where(jnp.any(ok_B), jnp.sum(jnp.where(ok_B, ratio_B, 0.0))
                     / jnp.maximum(jnp.sum(ok_B), 1), jnp.nan)


@functools.lru_cache(maxsize=None)
def layer_statistics_fn(family: Any, cfg: Any, top_k: int, top_dims: int
                        ) -> Callable[..., dict[str, Any]]:
    """jit f(params, inputs, mask_BxL) → {"attention": [per block], "states": [per state]} of
    host-sized arrays; `inputs` is the tuple a family's forward takes ((tokens, token types,
    mask) for text, (pixels,) or (mel,) for images and audio); `mask_BxL` the measured tokens
    (None, or a shape other than the states': every token); `control_key_B` (B,) the control
    key of each sequence (None: the middle measured key, ⌊n_b / 2⌋). Cached per (family,
    config, top_k, top_dims)."""

    @jax.jit
    def statistics(params, inputs, mask_BxL, control_key_B=None):
        x = inputs[0]
        token_types = inputs[1] if len(inputs) > 1 else None
        model_mask = inputs[2] if len(inputs) > 2 else None
        _, probes = family.apply(cfg, params, x, token_types, model_mask)
        states = family.states(probes, cfg)
        given = mask_BxL is not None and mask_BxL.shape == states.shape[1:3]
        mask = mask_BxL.astype(bool) if given else jnp.ones(states.shape[1:3], bool)
        key_B = (jnp.sum(mask, axis=-1) // 2 if control_key_B is None
                 else jnp.asarray(control_key_B, jnp.int32))
        return {"attention": [attention_statistics(b, mask, key_B) for b in probes["blocks"]],
                "states": [state_statistics(s, mask, top_k, top_dims) for s in states]}

    return statistics


def to_host(stats: dict[str, Any]) -> dict[str, list[dict[str, np.ndarray]]]:
    """The statistics as numpy arrays (float64 for floats, so that JSON keeps every digit)."""
    def convert(a):
        a = np.asarray(a)
        return a.astype(np.float64) if np.issubdtype(a.dtype, np.floating) else a

    return jax.tree.map(convert, jax.device_get(stats))


def storage_bytes(stats: dict[str, list[dict[str, np.ndarray]]]) -> int:
    """Bytes of the per-layer statistics of one forward (as `to_host` keeps them): a sum of
    per-head, per-sequence and per-state sizes; nothing grows as L × L."""
    return int(sum(a.nbytes for a in jax.tree.leaves(stats)))
