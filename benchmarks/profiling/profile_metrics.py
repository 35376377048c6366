r"""What the bias sweep's full results contract costs, metric by metric (GPU tuning).

  python -m benchmarks.profiling.profile_metrics [--chunk=32] [--batch=32] [--repeats=20]
      [--json=FILE]

For one chunk of `chunk` grid points of BERT-base activations (B = 32, L = 128, D = 768, 12 heads),
times each reduction of `studies/sweep/points.reduce_probes` on its own (vmapped over the chunk,
jitted), then the whole reduction: ms per grid point. The probes are random arrays of
the right shapes (attention statistics as the fused kernel returns them, no logits; with and
without its on-chip `reduction_statistics`), so the numbers are the metrics' cost alone, without
the forward (the kernel's own extra cost shows in benchmarks/benchmark.py's jax_full_metrics).
"""
from __future__ import annotations

from absl import flags

from benchmarks.profiling import harness


def define_flags():
    flags.DEFINE_integer("chunk", 32, "Grid points per chunk.")
    flags.DEFINE_integer("batch", 32, "Sequences per grid point (B).")


def _isoscore_default(x_BxLxD):
    """IsoScore with the covariance matmul at the backend's default precision (TF32 on NVIDIA
    GPUs) instead of HIGHEST: how much of IsoScore's cost is the float32 Gram matrix."""
    import jax.numpy as jnp

    x_NxD = x_BxLxD.reshape(-1, x_BxLxD.shape[-1])
    xc = x_NxD - jnp.mean(x_NxD, axis=0, keepdims=True)
    xc = xc / jnp.max(jnp.abs(xc))
    cov = jnp.einsum("nd,ne->de", xc, xc) / (x_NxD.shape[0] - 1)
    c = cov / jnp.max(jnp.abs(cov))
    return jnp.trace(c) ** 2 / jnp.sum(c * c)


def main(args, report):
    import jax
    import jax.numpy as jnp

    from anisotropy_jax import metrics
    from anisotropy_jax.config import BlockConfig
    from anisotropy_jax.studies.sweep import points

    chunk, b, l, d, h = args.chunk, args.batch, 128, 768, 12
    keys = jax.random.split(jax.random.key(0), 8)
    x = jax.random.normal(keys[0], (chunk, b, l, d)) + 3.0
    qk = jax.random.normal(keys[1], (chunk, b, l, h, d // h))
    stat = jax.random.uniform(keys[2], (chunk, b, h, l))
    probes = {"resid_pre": x, "attn_out": x * 0.5, "resid_post": x * 2.0, "queries": qk,
              "keys": qk + 1.0, "values": qk, "attn_entropy": stat, "attn_max": stat,
              "attn_sink": stat}
    key_sum = jax.random.uniform(keys[3], (chunk, b, h, l))
    kernel_probes = probes | {
        "attn_query_norms": stat, "attn_key_norms": stat + 1.0,
        "attn_query_sums": jax.random.normal(keys[4], (chunk, b, h, d // h)),
        "attn_key_sums": jax.random.normal(keys[5], (chunk, b, h, d // h)),
        "attn_key_votes": key_sum, "attn_key_mass": key_sum, "attn_key_unit_mass": key_sum}
    block = BlockConfig(attention_impl="pallas")
    parts = {
        "average_cosine (x1)": lambda p: metrics.average_cosine_similarity(p["resid_post"]),
        "cross_sequence_cosine (x1)": lambda p: metrics.cross_sequence_cosine_similarity(
            p["resid_post"]),
        "within_sequence_cosine (x1)": lambda p: metrics.within_sequence_cosine_similarity(
            p["resid_post"]),
        "mean_norm (x1)": lambda p: metrics.mean_norm(p["resid_post"]),
        "drift_norm (x1)": lambda p: metrics.drift_norm(p["resid_post"]),
        "relative_drift (x1)": lambda p: metrics.relative_drift(p["resid_post"]),
        "isoscore (x1)": lambda p: metrics.isoscore(p["resid_post"]),
        "isoscore, Gram at DEFAULT precision": lambda p: _isoscore_default(p["resid_post"]),
        "query_key_geometry": lambda p: metrics.query_key_geometry(p["queries"], p["keys"]),
        "attention statistics (H, max, sink)": lambda p: points._attention_metrics(p, block),
        "categorical metrics (logits redone)": lambda p: points._categorical_metrics(p, block),
        "rounding_bound": lambda p: points.rounding_bound(p, block),
        "whole reduce_probes": lambda p: points.reduce_probes(p, block),
    }
    logits = jax.random.normal(keys[6], (chunk, b, h, l, l))
    xla_probes = probes | {"attn_logits": logits, "attn_weights": jax.nn.softmax(logits, -1)}
    xla_block = BlockConfig(attention_impl="xla")
    xla_parts = {
        "categorical (XLA path: logits, weights)": lambda p: points._categorical_metrics(
            p, xla_block),
        "whole reduce_probes (XLA path)": lambda p: points.reduce_probes(p, xla_block),
    }
    kernel_parts = {
        "categorical (kernel key sums)": lambda p: points._categorical_metrics(p, block),
        "query_key_geometry (kernel sums)": points._query_key_geometry,
        "rounding_bound (kernel norms)": lambda p: points.rounding_bound(p, block),
        "whole reduce_probes (kernel stats)": lambda p: points.reduce_probes(p, block),
    }
    report.describe(f"chunk {chunk}, B={b}, L={l}, D={d}; ms per point", chunk=chunk, batch=b,
                    seq_len=l, d_model=d, heads=h)
    for group, group_probes in ((parts, probes), (xla_parts, xla_probes),
                                (kernel_parts, kernel_probes)):
        for name, fn in group.items():
            report.time(name, jax.jit(jax.vmap(fn)), group_probes, per=chunk)
    one_pass = jax.jit(jax.vmap(lambda p: jnp.sum(p["resid_post"] * p["resid_post"])))
    report.time("one read of resid_post (memory-bound floor)", one_pass, probes, per=chunk)


if __name__ == "__main__":
    harness.run("profile_metrics", main, define_flags)
