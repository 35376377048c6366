r"""GPU time of one bias-sweep chunk, kernel by kernel, from a profiler trace (GPU tuning).

  python -m benchmarks.profiling.trace_sweep [--precision=default|bfloat16|highest] [--chunk=32]
      [--top=16] [--variant=three|full|bare] [--repeats=10] [--json=FILE]

Runs a sweep chunk of BERT-base, B = 32, L = 128, with the library's default schedule — the
benchmark's three metrics (`benchmark.parity_chunk`, `three`), the full results contract the main
job computes (`full`) or the bare forward (`bare`) — `--repeats` times under `jax.profiler.trace`,
reads the Perfetto trace that JAX writes, and prints the device time per grid point of every
kernel, summed by name, plus the share of GEMM kernels (cuBLAS names) and their TFLOP/s from the
executed FLOP count (`flops.sweep_point_flops`). docs/PERFORMANCE.md quotes its output.
"""
from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import tempfile

from absl import flags

from benchmarks.profiling import harness


def define_flags():
    flags.DEFINE_enum("precision", "default", ["highest", "default", "bfloat16", "tf32"],
                      "Precision ('default': TF32 on NVIDIA GPUs; 'tf32' is accepted for it).")
    flags.DEFINE_integer("chunk", 32, "Bias norms per chunk.")
    flags.DEFINE_integer("top", 16, "Kernels listed.")
    flags.DEFINE_enum("variant", "three", ["three", "full", "bare"],
                      "Chunk traced: three metrics, the full results contract, no metrics.")

GEMM_MARKERS = ("gemm", "nvjet", "cublas", "cutlass")


def kernel_events(trace_dir: str) -> list[tuple[str, float, float]]:
    """(name, start µs, duration µs) of every kernel on the device lanes of the Perfetto trace
    in `trace_dir` (also benchmarks/profiling/trace_train.py's reader)."""
    (path,) = glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True)
    with gzip.open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    device_pids = {e["pid"] for e in events if e.get("ph") == "M"
                   and e.get("name") == "process_name" and "/device:" in e["args"]["name"]}
    return [(e["name"], float(e.get("ts", 0)), float(e.get("dur", 0))) for e in events
            if e.get("ph") == "X" and e.get("pid") in device_pids]


def kernel_times(trace_dir: str) -> collections.Counter:
    """{kernel name: total µs} over the device lanes of the Perfetto trace in `trace_dir`."""
    totals: collections.Counter = collections.Counter()
    for name, _, duration in kernel_events(trace_dir):
        totals[name] += duration
    return totals


def main(args, report):
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    from benchmarks import benchmark

    from anisotropy_jax import flops
    from anisotropy_jax.configs.sweep import SweepConfig
    from anisotropy_jax.studies.sweep import grid
    from anisotropy_jax.config import BlockConfig, precision_name

    precision = precision_name(args.precision)
    impl = "pallas" if jax.default_backend() == "gpu" and precision != "highest" else "xla"
    block = BlockConfig(precision=precision, attention_impl=impl)
    mesh = grid.grid_mesh(jax.devices()[:1])
    config = SweepConfig(model=block, batch_size=32, seq_len=128, bias_norms=(0.0,),
                               num_seeds=1)
    state = jax.device_put(tuple(grid.init_seeds(config)), NamedSharding(mesh, P()))
    if args.variant == "three":
        chunk_fn = benchmark.parity_chunk(block)
    else:
        chunk_fn = grid.chunk_computation(block, args.variant == "full", True,
                                          grid.default_points_per_step())
    fn = grid.jit_chunk(chunk_fn, mesh)
    norms = jax.device_put(np.linspace(0.0, 100.0, args.chunk).astype(np.float32),
                           NamedSharding(mesh, P(grid.GRID_AXIS)))
    jax.block_until_ready(fn(*state, norms))
    with tempfile.TemporaryDirectory() as trace_dir:
        with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
            out = [fn(*state, norms) for _ in range(args.repeats)]
            jax.block_until_ready(out)
        totals = kernel_times(trace_dir)
    if not totals:
        raise SystemExit("trace_sweep.py: the trace has no device kernels (run it on a GPU)")
    points = args.repeats * args.chunk
    busy = sum(totals.values()) / points
    gemm = sum(t for n, t in totals.items() if any(m in n.lower() for m in GEMM_MARKERS)) / points
    executed = flops.sweep_point_flops(block, 32, 128, args.chunk)
    report.describe(f"{args.precision}, {impl} attention, {args.variant} chunk {args.chunk}: "
                    f"device busy {busy:.1f} µs per point", precision=args.precision,
                    attention_impl=impl, variant=args.variant, chunk=args.chunk,
                    device_busy_us_per_point=busy)
    if gemm:
        report.row("GEMM kernels", gemm, "µs/point", share_percent=100 * gemm / busy,
                   **{"TFLOP/s": executed / gemm / 1e6, "executed_GFLOP": executed / 1e9})
    for name, total in totals.most_common(args.top):
        report.row(name[:90], total / points, "µs/point",
                   share_percent=100 * total / points / busy)


if __name__ == "__main__":
    harness.run("trace_sweep", main, define_flags, repeats=10)
