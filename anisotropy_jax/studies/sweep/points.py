"""One grid point of the bias sweep: the block on x = z + s·u and the on-device reduction of its
probes to the metrics of the results contract (README "The main job"; docs/BIAS_SWEEP.md)."""
from __future__ import annotations

from typing import Any, Mapping

import jax
import jax.numpy as jnp

from anisotropy_jax import metrics
from anisotropy_jax.config import BlockConfig
from anisotropy_jax.models.attention import attention_mask
from anisotropy_jax.studies.sweep.affine import ProjectedSeed, block_at

Array = jax.Array

# Scalars per grid point (the results contract, README "The main job", plus a few more).
SCALAR_METRICS = (
    "input_cosine", "input_norm", "input_drift_norm",
    "attention_output_cosine", "attention_output_cross_sequence_cosine", "attention_output_norm",
    "output_cosine", "output_cross_sequence_cosine", "output_within_sequence_cosine",
    "output_norm", "output_isoscore", "output_drift_norm", "output_relative_drift",
    "attention_entropy", "attention_entropy_normalized", "attention_max", "attention_sink_mass",
    "query_norm", "key_norm", "mean_query_norm", "mean_key_norm", "mean_query_key_cosine",
    "mean_query_key_abs_cosine", "mean_query_key_dot",
)
# Metrics that need two sequences (B ≥ 2); absent from the results when batch_size = 1.
CROSS_SEQUENCE_METRICS = ("attention_output_cross_sequence_cosine", "output_cross_sequence_cosine")
# Per-head vectors (H,) per grid point, kept for the npz file.
PER_HEAD_METRICS = ("attention_entropy_normalized", "attention_max", "query_norm", "key_norm",
                    "mean_query_norm", "mean_key_norm", "mean_query_key_cosine",
                    "mean_query_key_dot")


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
    return {
        "attention_entropy": jnp.mean(metrics.mean_over_queries(entropy_BxHxLq, counts_Lq)),
        "attention_entropy_normalized": jnp.mean(norm_entropy_h),
        "attention_max": jnp.mean(max_h),
        "attention_sink_mass": jnp.mean(metrics.mean_over_queries(probes["attn_sink"],
                                                                  counts_Lq)),
        "per_head/attention_entropy_normalized": norm_entropy_h,
        "per_head/attention_max": max_h,
    }


def reduce_probes(probes: Mapping[str, Array], block: BlockConfig) -> dict[str, Array]:
    """Block probes of one grid point → {metric: scalar} and {"per_head/metric": (H,)}.

    Attention averages run over batch, heads and queries; with a causal mask the first query (a
    single visible key, no choice) is excluded (`metrics.mean_over_queries`). Query/key geometry
    is per head (means over batch and positions), then averaged over heads.
    """
    probes = {k: v.astype(jnp.float32) for k, v in probes.items()}  # bfloat16 runs: f32 metrics
    x, attn, y = probes["resid_pre"], probes["attn_out"], probes["resid_post"]
    qk = metrics.query_key_geometry(probes["queries"], probes["keys"])
    out = {
        "input_cosine": metrics.average_cosine_similarity(x),
        "input_norm": metrics.mean_norm(x),
        "input_drift_norm": metrics.drift_norm(x),
        "attention_output_cosine": metrics.average_cosine_similarity(attn),
        "attention_output_norm": metrics.mean_norm(attn),
        "output_cosine": metrics.average_cosine_similarity(y),
        "output_within_sequence_cosine": metrics.within_sequence_cosine_similarity(y),
        "output_norm": metrics.mean_norm(y),
        "output_isoscore": metrics.isoscore(y),
        "output_drift_norm": metrics.drift_norm(y),
        "output_relative_drift": metrics.relative_drift(y),
        "mean_query_key_abs_cosine": jnp.mean(jnp.abs(qk["mean_query_key_cosine"])),
        **_attention_metrics(probes, block),
    }
    if x.shape[0] >= 2:
        out["attention_output_cross_sequence_cosine"] = (
            metrics.cross_sequence_cosine_similarity(attn))
        out["output_cross_sequence_cosine"] = metrics.cross_sequence_cosine_similarity(y)
    for name in ("query_norm", "key_norm", "mean_query_norm", "mean_key_norm",
                 "mean_query_key_cosine", "mean_query_key_dot"):
        out[name] = jnp.mean(qk[name])
        out[f"per_head/{name}"] = qk[name]
    # The constants above are the contract: exactly these names leave the device.
    scalars = [n for n in SCALAR_METRICS if x.shape[0] >= 2 or n not in CROSS_SEQUENCE_METRICS]
    return ({name: out[name] for name in scalars}
            | {f"per_head/{name}": out[f"per_head/{name}"] for name in PER_HEAD_METRICS})


def point_metrics(block: BlockConfig, params: Any, z_BxLxD: Array, u_D: Array,
                  bias_norm: Array, projected: ProjectedSeed | None = None) -> dict[str, Array]:
    """Forward of the block on x = z + s·u and the metric reduction, for one grid point."""
    _, probes = block_at(block, params, z_BxLxD, u_D, bias_norm, projected)
    return reduce_probes(probes, block)


def point_forward(block: BlockConfig, params: Any, z_BxLxD: Array, u_D: Array,
                  bias_norm: Array, projected: ProjectedSeed | None = None) -> dict[str, Array]:
    """The bare forward (no metrics) for benchmarks and bookkeeping tests: one cheap scalar per
    point, {"output_checksum": Σ_i y_i · y_0}, so that the output is used (not pruned), nothing
    large leaves the device, and (unlike Σ y, which a post-LN block makes 0) it depends on the
    point."""
    y_BxLxD, _ = block_at(block, params, z_BxLxD, u_D, bias_norm, projected)
    return {"output_checksum": jnp.sum(y_BxLxD * y_BxLxD[:1, :1, :])}
