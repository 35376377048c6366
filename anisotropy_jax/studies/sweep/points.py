"""One grid point of the bias sweep: the block on x = z + s·u (or one of its controls) and the
on-device reduction of its probes to the metrics of the results contract (README "The main job";
docs/SWEEP.md)."""
from __future__ import annotations

from typing import Any, Mapping

import jax
import jax.numpy as jnp

from anisotropy_jax import metrics
from anisotropy_jax.config import BlockConfig
from anisotropy_jax.metrics.attention import renormalized_weights
from anisotropy_jax.models.attention import attention_logits, attention_mask
from anisotropy_jax.models.fused_attention import logit_scale
from anisotropy_jax.models.layers import matmul_settings
from anisotropy_jax.studies.sweep.affine import ProjectedSeed, block_at

Array = jax.Array

# Scalars per grid point (the results contract, README "The main job", plus a few more).
SCALAR_METRICS = (
    "input_cosine", "input_within_sequence_cosine", "input_cross_sequence_cosine", "input_norm",
    "input_drift_norm",
    "attention_output_cosine", "attention_output_cross_sequence_cosine", "attention_output_norm",
    "output_cosine", "output_cross_sequence_cosine", "output_within_sequence_cosine",
    "output_norm", "output_isoscore", "output_drift_norm", "output_relative_drift",
    "attention_entropy", "attention_entropy_normalized", "attention_max", "attention_sink_mass",
    "query_norm", "key_norm", "mean_query_norm", "mean_key_norm", "mean_query_key_cosine",
    "mean_query_key_abs_cosine", "mean_query_key_dot",
    "attention_query_agreement", "attention_row_cosine", "attention_query_key_information",
    "attention_rounding_bound",
)
# With `sink_metrics` (SweepConfig.reports_sink_metrics: on by itself for a normalisation other
# than softmax): the attention mass Σ_k w_qk (mean over queries; 1 by definition for softmax),
# Gu et al.'s sink rate (share of (sequence, head) pairs with α_0 > 0.3), the no-op score
# α_0·‖v_0‖/mean‖v‖ (metrics/sinks.py), mean over sequences and heads, and the position-free sink
# rate (the same share for max_k α_k, from per-key column sums: `_free_sink_rate`).
SINK_METRICS = ("attention_mass", "attention_sink_rate", "attention_noop_score",
                "attention_free_sink_rate")
# Metrics that hold for softmax weights only: absent from a run of another normalisation.
SOFTMAX_ONLY_METRICS = ("attention_rounding_bound",)
# Categorical attention (docs/SCIENCE.md "Categorical attention"): per (sequence, head) matrix,
# averaged over the batch per head, then over heads.
CATEGORICAL_METRICS = ("attention_query_agreement", "attention_row_cosine",
                       "attention_query_key_information")
# A point's attention statistics count as reliable while the rounding bound stays below this
# (an absolute error in H/ln L, max p or sink mass; see `rounding_bound`).
RELIABLE_ROUNDING_BOUND = 1e-2
# Metrics that need two sequences (B ≥ 2); absent from the results when batch_size = 1.
# The input's within- and cross-sequence cosines tell the per-sequence control (direction shared
# within a sequence only: cross-sequence cosine ≈ 0) from the biased inputs (both ≈ s²/(s² + d)).
CROSS_SEQUENCE_METRICS = ("input_cross_sequence_cosine", "attention_output_cross_sequence_cosine",
                          "output_cross_sequence_cosine")
# Per-head vectors (H,) per grid point, kept for the npz file.
PER_HEAD_METRICS = ("attention_entropy_normalized", "attention_max", "query_norm", "key_norm",
                    "mean_query_norm", "mean_key_norm", "mean_query_key_cosine",
                    "mean_query_key_dot") + CATEGORICAL_METRICS


def _attention_metrics(probes: Mapping[str, Array], block: BlockConfig) -> dict[str, Array]:
    """Softmax sharpness averaged over batch, queries (those with > 1 visible key) and heads,
    from the per-query statistics (B, H, Lq) of the attention core: computed from the logits by
    the plain path, or on chip by the fused kernel, which never writes logits."""
    seq_len = probes["resid_pre"].shape[1]
    mask = attention_mask(seq_len, block.causal, None)
    counts_Lq = metrics.visible_key_counts((seq_len, seq_len), None if mask is None else mask[0, 0])
    entropy_BxHxLq = probes["attn_entropy"]
    norm_entropy_h = metrics.mean_over_queries(
        metrics.normalized_entropy(entropy_BxHxLq, counts_Lq), counts_Lq)
    max_h = metrics.mean_over_queries(probes["attn_max"], counts_Lq)
    mass = (jnp.mean(metrics.mean_over_queries(probes["attn_mass"], counts_Lq))
            if "attn_mass" in probes else jnp.float32(1.0))  # softmax: 1 by definition
    return {
        "attention_mass": mass,
        "attention_entropy": jnp.mean(metrics.mean_over_queries(entropy_BxHxLq, counts_Lq)),
        "attention_entropy_normalized": jnp.mean(norm_entropy_h),
        "attention_max": jnp.mean(max_h),
        "attention_sink_mass": jnp.mean(metrics.mean_over_queries(probes["attn_sink"],
                                                                  counts_Lq)),
        "per_head/attention_entropy_normalized": norm_entropy_h,
        "per_head/attention_max": max_h,
    }


def _categorical_metrics(probes: Mapping[str, Array], block: BlockConfig) -> dict[str, Array]:
    """Query agreement, row cosine and query-key information per head (mean over the batch) and
    over heads, from `metrics.CategoricalSums` per (sequence, head): the fused kernel's on-chip
    key sums when the probes hold them (`reduction_statistics`), else the sums of the logits and
    weights probes. A fused kernel run without them writes no logits: they are then recomputed
    from the queries and keys probes (the same q·k/(√Dh·τ), one extra (B, H, L, L) product).
    Weights that need not sum to one (a normalisation other than softmax) enter renormalised
    (`metrics.attention.renormalized_weights`, as their entropy); the agreement votes by the
    largest logit, which is the largest weight for every normalisation here (each is monotone in
    the logit; ties among clipped weights aside)."""
    seq_len = probes["resid_pre"].shape[1]
    mask = attention_mask(seq_len, block.causal, None)
    if "attn_key_votes" in probes:
        counted_Lq = metrics.visible_key_counts((seq_len, seq_len),
                                                None if mask is None else mask[0, 0]) > 1
        entropy_sum_BxH = jnp.sum(jnp.where(counted_Lq, probes["attn_entropy"], 0.0), axis=-1)
        count_BxH = jnp.full(entropy_sum_BxH.shape, jnp.sum(counted_Lq), jnp.float32)
        sums = metrics.CategoricalSums(probes["attn_key_votes"], probes["attn_key_mass"],
                                       probes["attn_key_unit_mass"], entropy_sum_BxH, count_BxH)
    else:
        logits, weights = probes.get("attn_logits"), probes.get("attn_weights")
        if block.attention_normalization != "softmax":
            weights = renormalized_weights(weights, mask)
        if logits is None:
            logits = attention_logits(probes["queries"], probes["keys"],
                                      logit_scale(block.d_head, block.logit_temperature),
                                      matmul_settings(block)[1])
        sums = metrics.categorical_key_sums(logits, mask, probabilities=weights,
                                            entropy=probes["attn_entropy"])
    stats = metrics.categorical_from_sums(sums)
    out = {}
    for name in CATEGORICAL_METRICS:
        per_head = jnp.mean(stats[name.removeprefix("attention_")], axis=0)  # (B, H) → (H,)
        out[name], out[f"per_head/{name}"] = jnp.mean(per_head), per_head
    return out


def _token_norms(probes: Mapping[str, Array]) -> tuple[Array, Array]:
    """(‖q_i‖ (B, H, Lq), ‖k_j‖ (B, H, Lk)): from the fused kernel's on-chip statistics when
    present, else from the queries and keys probes."""
    if "attn_query_norms" in probes:
        return probes["attn_query_norms"], probes["attn_key_norms"]
    return tuple(jnp.transpose(metrics.vector_norms(probes[name]), (0, 2, 1))
                 for name in ("queries", "keys"))


def _query_key_geometry(probes: Mapping[str, Array]) -> dict[str, Array]:
    """`metrics.query_key_geometry` per head, from the kernel's norms and sums when present."""
    if "attn_query_sums" not in probes:
        return metrics.query_key_geometry(probes["queries"], probes["keys"])
    query_norms_BxHxL, key_norms_BxHxL = _token_norms(probes)
    batch, _, seq_len = query_norms_BxHxL.shape
    return metrics.query_key_geometry_from_means(
        jnp.mean(query_norms_BxHxL, axis=(0, 2)), jnp.mean(key_norms_BxHxL, axis=(0, 2)),
        jnp.sum(probes["attn_query_sums"], axis=0) / (batch * seq_len),
        jnp.sum(probes["attn_key_sums"], axis=0) / (batch * seq_len))


def rounding_bound(probes: Mapping[str, Array], block: BlockConfig) -> Array:
    """A bound on how far float32 rounding can move the point's attention statistics (mean over
    batch, heads and counted queries), in units of H/ln L and of probability.

    Every logit ℓ_ij = q_i·k_j·c (c = 1/(√Dh·τ)) is computed from rounded inputs, projections and
    a rounded dot product; each step errs by about one float32 epsilon relative to the vectors
    involved, so |Δℓ_ij| ≲ δ_i = 2·eps·‖q_i‖·max_j‖k_j‖·c (Cauchy-Schwarz; at huge s the
    key-independent s²·q(u)·k(u) term makes ‖q‖‖k‖ ≫ the logit differences that the softmax
    sees). Logit errors of at most δ change every probability ratio by at most e^{±2δ}, so the
    mass off the argmax key, 1 − p_max, and with it p_max, the sink mass and (to first order)
    the normalised entropy move by at most (e^{2δ} − 1)(1 − p_max + H/ln n), capped at 1 per
    query. Sharp rows are thus robust to large δ; soft rows are not. It bounds what the computed
    rows can be off by; it cannot see a row that rounding made one-hot (checked against float64
    in tests/test_sweep.py). Uses only the queries, keys, entropy and max probes, so it exists
    with the fused kernel too. Non-finite statistics make it non-finite (and the run stops).
    """
    seq_len = probes["resid_pre"].shape[1]
    mask = attention_mask(seq_len, block.causal, None)
    counts_Lq = metrics.visible_key_counts((seq_len, seq_len), None if mask is None else mask[0, 0])
    scale = logit_scale(block.d_head, block.logit_temperature)
    query_BxHxLq, key_BxHxLk = _token_norms(probes)
    key_max_BxH = jnp.max(key_BxHxLk, axis=-1)
    eps = float(jnp.finfo(jnp.float32).eps)
    delta_BxHxLq = 2 * eps * scale * query_BxHxLq * key_max_BxH[..., None]
    entropy_BxHxLq = metrics.normalized_entropy(probes["attn_entropy"], counts_Lq)
    soft_BxHxLq = (jnp.maximum(1.0 - probes["attn_max"], 0.0)  # ≥ 0 despite rounding
                   + jnp.maximum(entropy_BxHxLq, 0.0))
    bound = jnp.minimum(1.0, jnp.expm1(2 * jnp.minimum(delta_BxHxLq, 40.0)) * soft_BxHxLq)
    # Statistics outside their range (seen at s ≈ 1e6 on a d = 32 block): as unreliable as can be.
    in_range = ((jnp.abs(entropy_BxHxLq - 0.5) <= 0.5 + 1e-3)
                & (jnp.abs(probes["attn_max"] - 0.5) <= 0.5 + 1e-3))
    bound = jnp.where(in_range, bound, 1.0)
    return jnp.mean(metrics.mean_over_queries(bound, counts_Lq))


def _free_sink_rate(probes: Mapping[str, Array], block: BlockConfig) -> Array:
    """The position-free sink rate: `metrics.sink_rate` of max_k α_k, α_k the mean weight that
    key k receives from the counted queries (those with more than one visible key) that see it,
    over the keys that at least half of the counted queries see (as the extreme-token study:
    a causal head's last keys average a few queries' attention to themselves). The per-key
    column sums are the fused kernel's on-chip `attn_key_mass` when the probes hold it (no
    L × L array), else the sums of the weights probe (weights of another normalisation enter
    raw, as α_0 does), else, for a fused softmax run without them, of the softmax of the logits
    recomputed from the queries and keys probes."""
    seq_len = probes["resid_pre"].shape[1]
    mask = attention_mask(seq_len, block.causal, None)
    visible_LqxLk = jnp.ones((seq_len, seq_len), bool) if mask is None else mask[0, 0]
    counted_Lq = jnp.sum(visible_LqxLk, axis=-1) > 1
    if "attn_key_mass" in probes:
        sums_BxHxLk = probes["attn_key_mass"]
    elif "attn_weights" in probes:
        sums_BxHxLk = jnp.einsum("bhqk,q->bhk", probes["attn_weights"],
                                 counted_Lq.astype(jnp.float32))
    else:
        logits = attention_logits(probes["queries"], probes["keys"],
                                  logit_scale(block.d_head, block.logit_temperature),
                                  matmul_settings(block)[1])
        sums_BxHxLk = metrics.categorical_key_sums(logits, mask).mass
    viewers_Lk = jnp.sum(visible_LqxLk & counted_Lq[:, None], axis=0)
    scores = metrics.key_attention_scores_from_sums(sums_BxHxLk, viewers_Lk)
    widely_seen_Lk = 2 * viewers_Lk >= jnp.sum(counted_Lq)
    best_BxH, _ = metrics.max_key_attention(jnp.where(widely_seen_Lk, scores, jnp.nan))
    return metrics.sink_rate(best_BxH)


def _sink_metrics(probes: Mapping[str, Array], block: BlockConfig) -> dict[str, Array]:
    """Gu et al.'s sink rate and the no-op score from α_0 (B, H), the mean over queries of the
    weight on key 0 (`metrics.sink_scores_from_probabilities` of the attn_sink probe), and the
    position-free rate (`_free_sink_rate`)."""
    alpha_0_BxH = metrics.sink_scores_from_probabilities(probes["attn_sink"])
    return {"attention_sink_rate": metrics.sink_rate(alpha_0_BxH),
            "attention_noop_score": jnp.mean(metrics.noop_head_score(alpha_0_BxH,
                                                                     probes["values"])),
            "attention_free_sink_rate": _free_sink_rate(probes, block)}


def scalar_metrics(block: BlockConfig, batch_size: int, sink_metrics: bool = False
                   ) -> tuple[str, ...]:
    """The scalar names a point returns: SCALAR_METRICS (less CROSS_SEQUENCE_METRICS with one
    sequence, less SOFTMAX_ONLY_METRICS for another normalisation), then SINK_METRICS."""
    softmax = block.attention_normalization == "softmax"
    return tuple(n for n in SCALAR_METRICS
                 if (batch_size >= 2 or n not in CROSS_SEQUENCE_METRICS)
                 and (softmax or n not in SOFTMAX_ONLY_METRICS)) + (SINK_METRICS * sink_metrics)


def reduce_probes(probes: Mapping[str, Array], block: BlockConfig, sink_metrics: bool = False
                  ) -> dict[str, Array]:
    """Block probes of one grid point → {metric: scalar} and {"per_head/metric": (H,)}.

    Attention averages run over batch, heads and queries; with a causal mask the first query (a
    single visible key, no choice) is excluded (`metrics.mean_over_queries`). Query/key geometry
    is per head (means over batch and positions), then averaged over heads. `sink_metrics`: add
    SINK_METRICS. The softmax rounding bound is left out for another normalisation.
    """
    probes = {k: v.astype(jnp.float32) for k, v in probes.items()}  # bfloat16 runs: f32 metrics
    x, attn, y = probes["resid_pre"], probes["attn_out"], probes["resid_post"]
    qk = _query_key_geometry(probes)
    # One set of norms and column sums per point cloud (metrics.cloud_metrics), not one per metric.
    pair = x.shape[0] >= 2
    inputs = metrics.cloud_metrics(x)  # within-sequence cosine always, cross- when B ≥ 2
    attention = metrics.cloud_metrics(attn, sequences=pair, drift=False)
    output = metrics.cloud_metrics(y, isoscore=True)
    out = {
        "input_cosine": inputs["average_cosine"],
        "input_within_sequence_cosine": inputs["within_sequence_cosine"],
        "input_norm": inputs["mean_norm"],
        "input_drift_norm": inputs["drift_norm"],
        "attention_output_cosine": attention["average_cosine"],
        "attention_output_norm": attention["mean_norm"],
        "output_cosine": output["average_cosine"],
        "output_within_sequence_cosine": output["within_sequence_cosine"],
        "output_norm": output["mean_norm"],
        "output_isoscore": output["isoscore"],
        "output_drift_norm": output["drift_norm"],
        "output_relative_drift": output["relative_drift"],
        "mean_query_key_abs_cosine": jnp.mean(jnp.abs(qk["mean_query_key_cosine"])),
        **_attention_metrics(probes, block),
        **_categorical_metrics(probes, block),
    }
    if block.attention_normalization == "softmax":
        out["attention_rounding_bound"] = rounding_bound(probes, block)
    if sink_metrics:
        out.update(_sink_metrics(probes, block))
    if pair:
        out["input_cross_sequence_cosine"] = inputs["cross_sequence_cosine"]
        out["attention_output_cross_sequence_cosine"] = attention["cross_sequence_cosine"]
        out["output_cross_sequence_cosine"] = output["cross_sequence_cosine"]
    for name in ("query_norm", "key_norm", "mean_query_norm", "mean_key_norm",
                 "mean_query_key_cosine", "mean_query_key_dot"):
        out[name] = jnp.mean(qk[name])
        out[f"per_head/{name}"] = qk[name]
    # The constants above are the contract: exactly these names leave the device.
    return ({name: out[name] for name in scalar_metrics(block, x.shape[0], sink_metrics)}
            | {f"per_head/{name}": out[f"per_head/{name}"] for name in PER_HEAD_METRICS})


def point_metrics(block: BlockConfig, params: Any, z_BxLxD: Array, u_D: Array,
                  bias_norm: Array, projected: ProjectedSeed | None = None,
                  kind: str = "biased", sink_metrics: bool = False) -> dict[str, Array]:
    """Forward of the block on the inputs of `kind` (x = z + s·u by default) and the metric
    reduction (`reduce_probes`), for one grid point."""
    _, probes = block_at(block, params, z_BxLxD, u_D, bias_norm, projected, kind,
                         reduction_statistics=True)
    return reduce_probes(probes, block, sink_metrics)


def point_forward(block: BlockConfig, params: Any, z_BxLxD: Array, u_D: Array,
                  bias_norm: Array, projected: ProjectedSeed | None = None,
                  kind: str = "biased") -> dict[str, Array]:
    """The bare forward (no metrics) for benchmarks and bookkeeping tests: one cheap scalar per
    point, {"output_checksum": Σ_i y_i · y_0}, so that the output is used (not pruned), nothing
    large leaves the device, and (unlike Σ y, which a post-LN block makes 0) it depends on the
    point."""
    y_BxLxD, _ = block_at(block, params, z_BxLxD, u_D, bias_norm, projected, kind)
    return {"output_checksum": jnp.sum(y_BxLxD * y_BxLxD[:1, :1, :])}
