r"""Times the bias sweep against PyTorch peers and the device's own matmul rate, in one run.

  python -m benchmarks.benchmark --config=benchmarks/configs/benchmark.py[:cpu|:smoke] \
      --workdir=DIR [--config.precision=highest|default|bfloat16]

Every variant computes the same function, a BERT-base block at BERT init on x = z + s·u for each
bias norm s, and the same three metrics on the device (mean output norm, output average cosine,
normalised attention entropy); the PyTorch peers get the *same* weights, z and u as JAX, so their
metric values must agree within the precision's tolerance (checked and reported).

JAX variants: `jax_sweep` (vmap over a chunk of s, jit once, sharded over the devices — the
library's sweep with the three metrics, each seed's input projection z·W, u·W shared by the points
of a chunk), `jax_sweep_literal` (the same, but the block run literally on every x = z + s·u: the
peers' amount of work), `jax_bare` (the sweep's bare forward: the metric overhead),
`jax_full_metrics` (the library's full results-contract reduction: what the main job runs; the
headline `full_contract` ratios compare it with the bare forward and the peers), `jax_loop` (a Python loop of
jitted single-s calls, the projection computed once before it). PyTorch: Hugging Face `BertLayer`
eager loop over s, s folded into the batch, and folded under torch.compile.

Two FLOP rates per variant: `flops_per_s`, the FLOPs the variant *executes* (its share of the
matmul rate is the hardware utilisation), and `nominal_flops_per_s`, the literal block's FLOPs per
point over its time (what a variant that skips no work would need to achieve the same speed).
Writes benchmark.json; prints a table of ratios last.
"""
from __future__ import annotations

import functools
import os
import time
from typing import Any

from absl import app, flags
from ml_collections import config_flags

from anisotropy_jax import cli
from anisotropy_jax import config as library_config



def _define_flags():
    """Defined only when run as a script: tests import this module beside other scripts that
    define --config too (absl refuses a flag defined twice in one process)."""
    global _CONFIG, _WORKDIR
    _CONFIG = config_flags.DEFINE_config_file(
        "config", os.path.join(os.path.dirname(__file__), "configs", "benchmark.py"),
        "Benchmark config file.", lock_config=True)
    _WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (benchmark.json).")

# The library's precision names ('default' = TF32 on NVIDIA GPUs; 'tf32' is accepted for it).
PRECISIONS = library_config.PRECISIONS


class BenchmarkConfigError(ValueError):
    pass


def validate(c) -> None:
    """One-line errors naming the field, before anything is compiled."""
    def positive(name, value):
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise BenchmarkConfigError(f"{name}: must be a positive integer, got {value!r}")

    for name in ("batch_size", "num_bias_norms", "chunk", "repeats", "matmul_size",
                 "cosine_n", "isoscore_n", "max_blocked_n"):
        positive(name, c[name])
    if c.seq_len < 2:
        raise BenchmarkConfigError(f"seq_len: must be >= 2, got {c.seq_len!r}")
    if c.attention_impl not in ("auto", "xla", "pallas"):
        raise BenchmarkConfigError(f"attention_impl: unknown {c.attention_impl!r}; choose one "
                                   f"of ('auto', 'xla', 'pallas')")
    c.precision = library_config.precision_name(c.precision)  # 'tf32' → 'default'
    if c.precision not in PRECISIONS:
        raise BenchmarkConfigError(f"precision: unknown {c.precision!r}; choose one of "
                                   f"{tuple(PRECISIONS)}")
    for v in c.torch_variants:
        if v not in ("loop", "folded", "folded_compiled"):
            raise BenchmarkConfigError(f"torch_variants: unknown variant {v!r}")
    for k in tuple(c.memory_chunks) + tuple(c.device_counts):
        positive("memory_chunks/device_counts entry", k)


def block_config(c, attention_impl: str | None = None):
    """The benchmark's block; attention_impl 'auto' = the fused Pallas kernel on GPU when the
    shapes allow it, else the plain XLA path."""
    import jax

    from anisotropy_jax.models import fused_attention
    from anisotropy_jax.config import BlockConfig

    impl = attention_impl or c.attention_impl
    if impl == "auto":
        # The kernel's IEEE float32 dots are slow in Triton: at 'highest' it ran at half the
        # speed of the XLA path on an H200 (2.63 vs 1.37 ms per point), so 'auto' skips it there.
        d_head = c.model.d_model // c.model.num_heads
        impl = ("pallas" if jax.default_backend() == "gpu" and c.precision != "highest"
                and fused_attention.supported(c.seq_len, d_head) else "xla")
    return BlockConfig(d_model=c.model.d_model, num_heads=c.model.num_heads, d_ff=c.model.d_ff,
                       init="bert", init_std=c.model.init_std,
                       layer_norm_eps=c.model.layer_norm_eps, precision=c.precision,
                       attention_impl=impl)


# ------------------------------------------------------------------------------------ JAX side

def parity_point(block, params, z_BxLxD, u_D, bias_norm, projected=None):
    """The three metrics every variant computes, for one bias norm (the library's metrics: the
    normalised entropy counts each query's visible keys, as the sweep does)."""
    import jax.numpy as jnp

    from anisotropy_jax import metrics
    from anisotropy_jax.models.attention import attention_mask
    from anisotropy_jax.studies.sweep import affine

    y, probes = affine.block_at(block, params, z_BxLxD, u_D, bias_norm, projected)
    seq_len = y.shape[1]
    mask = attention_mask(seq_len, block.causal, None)
    counts_Lq = metrics.visible_key_counts((seq_len, seq_len), None if mask is None else mask[0, 0])
    entropy_h = metrics.mean_over_queries(
        metrics.normalized_entropy(probes["attn_entropy"].astype(jnp.float32), counts_Lq), counts_Lq)
    cloud = metrics.cloud_metrics(y, sequences=False, drift=False)  # one set of norms and sums
    return {"output_norm": cloud["mean_norm"], "output_cosine": cloud["average_cosine"],
            "attention_entropy_normalized": jnp.mean(entropy_h)}


def parity_chunk(block, reuse_projections=True, points_per_step=None):
    """The three-metric chunk function (not jitted) of the sweep's grid machinery; by default
    with the sweep's schedule for this platform (`grid.default_points_per_step`)."""
    from anisotropy_jax.studies.sweep import grid

    if points_per_step is None:
        points_per_step = grid.default_points_per_step()
    return grid.grid_computation(functools.partial(parity_point, block), block,
                                  reuse_projections, points_per_step)


def _chunks(norms, chunk, sharding):
    import jax
    import numpy as np

    out = []
    for i in range(0, len(norms), chunk):
        s = np.full((chunk,), norms[min(i + chunk, len(norms)) - 1], np.float32)
        s[: min(chunk, len(norms) - i)] = norms[i:i + chunk]
        out.append(jax.device_put(s, sharding))
    return out


def time_chunked(fn, state, norms, chunk, mesh, repeats, num_real):
    """(first-call s incl. compile, median s of the whole sweep, metrics (num_real, ...))."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    from anisotropy_jax.studies.sweep import grid

    s_chunks = _chunks(norms, chunk, NamedSharding(mesh, P(grid.GRID_AXIS)))
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*state, s_chunks[0]))
    first = time.perf_counter() - t0
    times, outs = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        outs = [fn(*state, s) for s in s_chunks]
        jax.block_until_ready(outs)
        times.append(time.perf_counter() - t0)
    merged = {k: np.concatenate([np.asarray(o[k])[0] for o in outs])[:num_real] for k in outs[0]}
    return first, float(np.median(times)), times, merged


def jax_state(c, block, mesh):
    """Weights, z, u of seed 0 with a leading seed axis of 1, replicated over the mesh."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    from anisotropy_jax.configs.sweep import SweepConfig
    from anisotropy_jax.studies.sweep import grid

    cfg = SweepConfig(model=block, batch_size=c.batch_size, seq_len=c.seq_len,
                      bias_norms=(0.0,), num_seeds=1, seed=c.seed)
    state = grid.init_seeds(cfg)
    return jax.device_put(tuple(state), NamedSharding(mesh, P()))


def bias_grid(n):
    import numpy as np

    return np.concatenate([[0.0], np.logspace(-1, np.log10(4096.0), n - 1)]).astype(np.float32)


def matmul_rate(n: int, precision: str, repeats: int) -> float:
    """Achieved FLOP/s of an n×n×n matmul at the benchmark's precision (random data)."""
    import jax
    import jax.numpy as jnp

    from benchmarks.profiling import harness

    dtype = jnp.bfloat16 if precision == "bfloat16" else jnp.float32
    lax_precision = "highest" if precision == "highest" else "default"
    ka, kb = jax.random.split(jax.random.key(42))
    a = jax.random.normal(ka, (n, n), dtype)
    b = jax.random.normal(kb, (n, n), dtype)
    f = jax.jit(lambda x, y: jnp.dot(x, y, precision=lax_precision,
                                     preferred_element_type=jnp.float32))
    return 2 * n ** 3 / harness.time_calls(f, a, b, repeats=max(repeats, 3)).median_s


def memory_footprint(fn, state, chunk_sizes, mesh) -> list[dict[str, Any]]:
    """Compiled (static) device memory of one chunk call, per chunk size."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    from anisotropy_jax.studies.sweep import grid

    rows = []
    for k in chunk_sizes:
        k = -(-k // mesh.size) * mesh.size
        s = jax.device_put(np.zeros((k,), np.float32), NamedSharding(mesh, P(grid.GRID_AXIS)))
        mem = fn.lower(*state, s).compile().memory_analysis()
        if mem is None:
            continue
        rows.append({"chunk": k, "temp_bytes": int(mem.temp_size_in_bytes),
                     "argument_bytes": int(mem.argument_size_in_bytes),
                     "output_bytes": int(mem.output_size_in_bytes)})
    return rows


def time_loop(block, state, norms, repeats):
    """A Python loop of jitted single-s calls (seed 0), its projection z·W, u·W computed once by
    its own jitted call before the loop (the library's algorithm, without vmap): (first call s,
    median s, times)."""
    import jax
    import numpy as np

    from anisotropy_jax.studies.sweep import affine

    params0, z0, u0 = jax.tree.map(lambda a: a[0], state)
    reuse = affine.can_reuse_projections(block)
    project = jax.jit(functools.partial(affine.project_seed, block))
    single = jax.jit(functools.partial(parity_point, block))

    def run():
        projected = project(params0, z0, u0) if reuse else None
        return [single(params0, z0, u0, float(s), projected) for s in norms]

    t0 = time.perf_counter()
    jax.block_until_ready(run()[:1])
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(run())
        times.append(time.perf_counter() - t0)
    return first, float(np.median(times)), times


def run_benchmark(c, log=print) -> dict[str, Any]:
    import jax
    import numpy as np

    from anisotropy_jax import flops, results
    from anisotropy_jax.studies.sweep import grid

    block = block_config(c)
    norms = bias_grid(c.num_bias_norms)
    flop_per_point = flops.block_forward_flops(block, c.batch_size, c.seq_len)["total"]
    # Executed FLOPs per point: with shared projections, one z·W per seed and chunk (or per loop).
    reused_flop_per_point = flops.sweep_point_flops(block, c.batch_size, c.seq_len,
                                                    min(c.chunk, len(norms)))
    loop_flop_per_point = flops.sweep_point_flops(block, c.batch_size, c.seq_len, len(norms))
    devices = jax.devices()
    mesh = grid.grid_mesh(devices[:1])
    out: dict[str, Any] = {"device": str(devices[0]), "device_kind": devices[0].device_kind,
                           "attention_impl": block.attention_impl,
                           "num_devices": len(devices), "precision": c.precision,
                           "flop_per_point": flop_per_point,
                           "executed_flop_per_point": {"sweep": reused_flop_per_point,
                                                       "loop": loop_flop_per_point,
                                                       "literal": flop_per_point},
                           "bias_norms": norms.tolist(),
                           "variants": {}}
    log(f"device {devices[0].device_kind} ×{len(devices)}; precision {c.precision}; "
        f"attention {block.attention_impl}; "
        f"{flop_per_point / 1e9:.1f} GFLOP per grid point; {len(norms)} bias norms")

    rate = matmul_rate(c.matmul_size, c.precision, c.repeats)
    out["matmul_flops_per_s"] = rate
    log(f"matmul {c.matmul_size}³ ({c.precision}): {rate / 1e12:.2f} TFLOP/s")

    state = jax_state(c, block, mesh)
    variants = out["variants"]

    def record(name, first, median, times, values=None, executed=flop_per_point):
        per_point = median / len(norms)
        row = {"first_call_s": first, "median_s": median, "times_s": times,
               "s_per_point": per_point, "executed_flop_per_point": executed,
               "flops_per_s": executed / per_point,
               "share_of_matmul_rate": executed / per_point / rate,
               "nominal_flops_per_s": flop_per_point / per_point}
        if values is not None:
            row["metrics"] = {k: np.asarray(v).tolist() for k, v in values.items()}
        variants[name] = row
        log(f"  {name:24s} first call {first:7.2f} s   {per_point * 1e3:9.3f} ms/point   "
            f"{row['flops_per_s'] / 1e12:8.3f} TFLOP/s executed, "
            f"{row['nominal_flops_per_s'] / 1e12:8.3f} nominal")

    def timed(fn):
        return time_chunked(fn, state, norms, c.chunk, mesh, c.repeats, len(norms))

    parity_fn = grid.jit_chunk(parity_chunk(block), mesh)
    record("jax_sweep", *timed(parity_fn), executed=reused_flop_per_point)
    record("jax_sweep_literal", *timed(grid.jit_chunk(parity_chunk(block, False), mesh)))
    schedule = grid.default_points_per_step()  # the sweep's own: 1 point at a time on the CPU
    bare_fn = grid.jit_chunk(grid.chunk_computation(block, False, True, schedule), mesh)
    record("jax_bare", *timed(bare_fn)[:3], executed=reused_flop_per_point)
    full_fn = grid.jit_chunk(grid.chunk_computation(block, True, True, schedule), mesh)
    record("jax_full_metrics", *timed(full_fn)[:3], executed=reused_flop_per_point)
    if block.attention_impl == "pallas":  # what the fused kernel buys, same run
        xla_fn = grid.jit_chunk(parity_chunk(block.replace(attention_impl="xla")), mesh)
        record("jax_sweep_xla_attention", *timed(xla_fn)[:3], executed=reused_flop_per_point)
    out["metric_overhead"] = variants["jax_sweep"]["median_s"] / variants["jax_bare"]["median_s"] - 1
    if c.jax_loop:
        record("jax_loop", *time_loop(block, state, norms, c.repeats),
               executed=loop_flop_per_point)

    # Several devices: same per-device chunk, grid axis sharded over the first k devices.
    scaling = []
    for k in c.device_counts:
        if k > len(devices):
            continue
        mesh_k = grid.grid_mesh(devices[:k])
        fn_k = grid.jit_chunk(parity_chunk(block), mesh_k)
        state_k = jax_state(c, block, mesh_k)
        reps = np.resize(norms, max(len(norms), c.chunk * k))  # enough work for every device
        _, median, _, _ = time_chunked(fn_k, state_k, reps, c.chunk * k, mesh_k, c.repeats,
                                       len(reps))
        scaling.append({"devices": k, "points": int(len(reps)), "median_s": median,
                        "points_per_s": len(reps) / median})
    if scaling:
        base = scaling[0]["points_per_s"]
        for row in scaling:
            row["speedup"] = row["points_per_s"] / base
            log(f"  sweep on {row['devices']} device(s): {row['points_per_s']:.1f} points/s "
                f"({row['speedup']:.2f}×)")
    out["device_scaling"] = scaling

    # All points of a chunk in flight at once (the GPU schedule; on the CPU the sweep runs them
    # one at a time, so its memory does not grow with the chunk).
    out["memory"] = memory_footprint(grid.jit_chunk(parity_chunk(block, points_per_step=0), mesh),
                                     state, c.memory_chunks, mesh)
    if len(out["memory"]) >= 2:
        ks = np.array([r["chunk"] for r in out["memory"]], float)
        total = np.array([r["temp_bytes"] + r["output_bytes"] for r in out["memory"]], float)
        slope, intercept = np.polyfit(ks, total, 1)
        out["memory_fit"] = {"bytes_per_point": slope, "fixed_bytes": intercept}
        log(f"  compiled memory per chunk ≈ {intercept / 2**20:.1f} MiB + "
            f"{slope / 2**20:.1f} MiB × chunk (plus weights and z: "
            f"{out['memory'][0]['argument_bytes'] / 2**20:.1f} MiB)")

    if c.torch:
        out["torch"] = run_torch(c, block, state, norms, log, record)

    if c.metrics_at_scale:
        from benchmarks import benchmark_metrics

        out["metrics_at_scale"] = benchmark_metrics.run_metric_benchmarks(
            c.cosine_n, c.isoscore_n, c.model.d_model, c.max_blocked_n, seed=c.seed, log=log)
    if c.precision != "highest":  # what the reduced precision costs each variant in accuracy
        ref_block = block.replace(precision="highest", attention_impl="xla")
        ref_fn = grid.jit_chunk(parity_chunk(ref_block, reuse_projections=False), mesh)
        reference = time_chunked(ref_fn, state, norms, c.chunk, mesh, 1, len(norms))[3]
        out["reference_highest"] = {k: np.asarray(v).tolist() for k, v in reference.items()}
        out["deviation_from_highest"] = deviations(variants, reference)
    out["ratios"] = ratios(variants)
    out["full_contract"] = full_contract_ratios(variants)
    return results.to_jsonable(out)


def run_torch(c, block, state, norms, log, record) -> dict[str, Any]:
    """The PyTorch peers with the JAX seed-0 weights, z and u; agreement of their metrics."""
    import numpy as np

    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as err:
        log(f"  PyTorch peers skipped: {err}")
        return {"skipped": str(err)}
    from benchmarks import benchmark_torch

    import jax

    params0 = jax.tree.map(lambda a: np.asarray(a[0]), state[0])
    z0, u0 = np.asarray(state[1][0]), np.asarray(state[2][0])
    info = {"version": torch.__version__}
    for variant in c.torch_variants:
        r = benchmark_torch.time_torch_sweep(
            variant=variant, precision=c.precision, bias_norms=norms, params=params0, z=z0, u=u0,
            block=block, fold=c.chunk, repeats=c.repeats)
        values = {"output_norm": r["metrics"][:, 0], "output_cosine": r["metrics"][:, 1],
                  "attention_entropy_normalized": r["metrics"][:, 2]}
        record(r["variant"], r["first_call_s"], r["median_s"], r["times_s"], values)
    return info


def ratios(variants: dict[str, Any]) -> dict[str, float]:
    """Speed of jax_sweep over every other variant (> 1: JAX faster)."""
    base = variants["jax_sweep"]["median_s"]
    return {name: row["median_s"] / base for name, row in variants.items() if name != "jax_sweep"}


def full_contract_ratios(variants: dict[str, Any]) -> dict[str, float]:
    """The main job's own sweep (the full results contract, `jax_full_metrics`) against the bare
    forward and every PyTorch peer: {"over_bare": full ÷ bare (target ≤ 1.15),
    "<peer>": peer ÷ full (> 1: the full contract is faster)}."""
    full = variants["jax_full_metrics"]["median_s"]
    out = {"over_bare": full / variants["jax_bare"]["median_s"]}
    out.update({name: row["median_s"] / full for name, row in variants.items()
                if name.startswith("torch_")})
    return out


def deviations(variants: dict[str, Any], reference: dict[str, Any]) -> dict[str, dict]:
    """{variant: {metric: largest |difference| from the float32-'highest' literal block}} for
    every variant that reports metrics."""
    import numpy as np

    return {name: {k: float(np.max(np.abs(np.asarray(row["metrics"][k]) -
                                          np.asarray(reference[k])))) for k in reference}
            for name, row in variants.items() if "metrics" in row}


def agreement(variants: dict[str, Any]) -> dict[str, float]:
    """Largest |difference| of each PyTorch variant's metrics from jax_sweep's."""
    import numpy as np

    ref = variants["jax_sweep"].get("metrics")
    out = {}
    for name, row in variants.items():
        if name.startswith("torch_") and "metrics" in row and ref is not None:
            out[name] = max(float(np.max(np.abs(np.asarray(row["metrics"][k]) -
                                                np.asarray(ref[k])))) for k in ref)
    return out


def print_table(result: dict[str, Any]) -> None:
    variants = result["variants"]
    print(f"\n{result['device_kind']} | precision {result['precision']} | matmul "
          f"{result['matmul_flops_per_s'] / 1e12:.2f} TFLOP/s | "
          f"{len(result['bias_norms'])} bias norms")
    print(f"{'variant':24s}{'first call s':>13s}{'ms/point':>11s}{'TFLOP/s':>10s}"
          f"{'% matmul':>10s}{'nominal TFLOP/s':>17s}{'jax_sweep ×':>13s}")
    for name, row in variants.items():
        speed = result["ratios"].get(name, 1.0)
        print(f"{name:24s}{row['first_call_s']:13.2f}{row['s_per_point'] * 1e3:11.3f}"
              f"{row['flops_per_s'] / 1e12:10.3f}{100 * row['share_of_matmul_rate']:10.1f}"
              f"{row['nominal_flops_per_s'] / 1e12:17.3f}{speed:13.2f}")
    print("TFLOP/s and % matmul count the FLOPs each variant executes (jax_sweep shares each "
          "seed's z·W_qkv over a chunk); nominal TFLOP/s counts the literal block's "
          f"{result['flop_per_point'] / 1e9:.2f} GFLOP per point.")
    print(f"metric reduction overhead over the bare forward: {100 * result['metric_overhead']:.1f}%")
    contract = result["full_contract"]
    print(f"full results contract (jax_full_metrics): {contract['over_bare']:.2f}× the bare "
          "forward" + "".join(f"; {name} ÷ full contract {ratio:.2f}"
                              for name, ratio in contract.items() if name != "over_bare"))
    for name, diff in result.get("agreement", {}).items():
        print(f"max |metric difference| {name} vs jax_sweep: {diff:.2e}")
    for name, devs in result.get("deviation_from_highest", {}).items():
        print(f"max |difference| from float32-highest, {name}: " +
              ", ".join(f"{k} {v:.1e}" for k, v in devs.items()))


def main(argv):
    del argv
    c = _CONFIG.value
    cli.workdir(_WORKDIR.value)
    try:
        validate(c)
        block_config(c)
    except ValueError as err:
        cli.fail(str(err))
    from anisotropy_jax import results

    provenance = results.Provenance()
    result = run_benchmark(c)
    result["agreement"] = agreement(result["variants"])
    result["config"] = results.to_jsonable(c)
    result["provenance"] = provenance.finish("benchmarks.benchmark")
    path = results.write_json(os.path.join(_WORKDIR.value, "benchmark.json"), result)
    print_table(result)
    print(f"wrote {path}")


if __name__ == "__main__":
    _define_flags()
    app.run(main, flags_parser=cli.parse_flags_or_exit)
