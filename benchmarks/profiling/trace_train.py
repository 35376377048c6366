r"""GPU time of one training step, kernel by kernel, from a profiler trace (where the
step's time goes).

  python -m benchmarks.profiling.trace_train [--precision=default|bfloat16] [--attention=auto]
      [--per_call=1] [--top=20] [--repeats=20] [--json=FILE]

Builds `train:gpu`'s step as the training loop does (`training.loop.compile_run`),
optionally `--per_call` steps per dispatch (the benchmark's 'scanK' loop), runs `--repeats` steps
under `jax.profiler.trace`, reads the Perfetto trace JAX writes, and reports per step: the wall
time, the device-busy time (the union of kernel intervals), the idle share (wall − busy: the GPU
waiting for launches or the host), the number of kernels, the GEMM share, and the kernels summed
by name, grouped into GEMM / attention / optimiser-and-elementwise fusions.
"""
from __future__ import annotations

import collections
import glob
import os
import tempfile
import time

from absl import flags

from benchmarks.profiling import harness
from benchmarks.profiling.trace_sweep import GEMM_MARKERS, kernel_events

ATTENTION_MARKERS = ("flash", "fmha", "cudnn", "attention", "softmax")


def define_flags():
    flags.DEFINE_enum("precision", "default", ["default", "bfloat16"],
                      "'default': TF32 matmuls; 'bfloat16': bf16 compute, float32 master weights.")
    flags.DEFINE_enum("attention", "auto", ["auto", "xla", "dot_product"],
                      "model.attention_impl ('auto': the core `anisotropy-jax train` resolves).")
    flags.DEFINE_integer("per_call", 1, "Steps per dispatch (lax.scan over stacked batches).")
    flags.DEFINE_integer("seeds", 0, "Trace the vmapped step of this many seeds "
                         "(training.seeds.compile_seeds) instead.")
    flags.DEFINE_integer("top", 20, "Kernels listed.")
    flags.DEFINE_string("hlo_dir", None, "The --xla_dump_to folder of this run (XLA_FLAGS="
                        "'--xla_dump_to=DIR --xla_dump_hlo_as_text'): each listed kernel is "
                        "then shown with its HLO shape and the JAX operation it came from.")


def hlo_sources(hlo_dir: str) -> dict[str, str]:
    """{kernel name: 'shape ← op_name'} from the optimised HLO of the train step in `hlo_dir`
    (an instruction `%name.N = shape fusion(...)` runs as kernel `name_N`)."""
    import re

    sources = {}
    for path in glob.glob(os.path.join(hlo_dir, "*train_step*after_optimizations.txt")):
        for line in open(path):
            match = re.match(r"\s*(?:ROOT )?%?([\w.-]+) = (\S+) ", line)
            if not match:
                continue
            op = re.search(r'op_name="([^"]*)"', line)
            sources[match.group(1).replace(".", "_")] = (
                f"{match.group(2)[:40]} <- {op.group(1)[-110:] if op else '?'}")
    return sources


def busy_time(events) -> float:
    """µs covered by at least one kernel (the union of their intervals)."""
    total, end = 0.0, float("-inf")
    for _, start, dur in sorted(events, key=lambda e: e[1]):
        stop = start + dur
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def category(name: str) -> str:
    low = name.lower()
    if any(m in low for m in GEMM_MARKERS):
        return "GEMM"
    if any(m in low for m in ATTENTION_MARKERS):
        return "attention"
    return "other (fusions: norms, GELU, loss, optimiser, reductions)"


def _seeds_step(config, num_seeds: int, stream):
    """(stacked state, vmapped step, stacked batches) of `num_seeds` seeds (each seed is given
    the same batches: the cost of a step does not depend on their values)."""
    import jax
    import jax.numpy as jnp

    from anisotropy_jax.studies.training import seeds

    fns = seeds.compile_seeds(config, num_seeds)
    state = jax.device_put(jax.tree.map(lambda *xs: jnp.stack(xs),
                                        *[fns.init(s) for s in range(num_seeds)]), fns.stacked)
    batches = [jax.device_put(jax.tree.map(lambda x: jnp.stack([x] * num_seeds),
                                           stream.batch_at(i)), fns.batch_sharded)
               for i in range(4)]
    return state, fns.step, batches


def main(args, report):
    import jax
    import jax.numpy as jnp

    from anisotropy_jax import data as data_lib
    from anisotropy_jax.config import resolve_attention_impl
    from anisotropy_jax.studies.training import loop
    from benchmarks import train_throughput
    from benchmarks.configs.train_throughput import get_config

    c = get_config()
    config = train_throughput.train_config(c, args.precision, args.attention)
    core = resolve_attention_impl(config.model, jax.default_backend())
    stream = data_lib.BatchIterator(config.data)
    if args.seeds:
        state, step, batches = _seeds_step(config, args.seeds, stream)
    else:
        fns = loop.compile_run(config)
        step = fns.step if args.per_call == 1 else train_throughput._multi_step(fns.step,
                                                                                args.per_call)
        batches = [jax.device_put(stream.batch_at(i), fns.batch_sharded) for i in range(8)]
        if args.per_call > 1:
            batches = [jax.tree.map(lambda *xs: jnp.stack(xs), *batches[:args.per_call])]
        state = fns.init()
    calls = max(1, args.repeats // args.per_call)
    for i in range(3):  # compile and warm up
        state, _ = step(state, batches[i % len(batches)])
    jax.block_until_ready(state)
    with tempfile.TemporaryDirectory() as trace_dir:
        with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
            t0 = time.perf_counter()
            for i in range(calls):
                state, _ = step(state, batches[i % len(batches)])
            jax.block_until_ready(state)
            wall = (time.perf_counter() - t0) * 1e6
        events = kernel_events(trace_dir)
    if not events:
        raise SystemExit("trace_train.py: the trace has no device kernels (run it on a GPU)")
    steps = calls * args.per_call
    first, last = min(e[1] for e in events), max(e[1] + e[2] for e in events)
    busy, span = busy_time(events) / steps, (last - first) / steps
    report.describe(
        f"{args.precision}, {core} attention, {args.per_call} step(s) per call, "
        f"{args.seeds or 1} seed(s): wall "
        f"{wall / steps:.0f} µs/step (traced), kernels span {span:.0f}, busy {busy:.0f} µs/step "
        f"({100 * busy / span:.1f}% of the span), {len(events) / steps:.0f} kernels/step",
        precision=args.precision, attention=core, per_call=args.per_call, seeds=args.seeds or 1,
        wall_us_per_step=wall / steps, span_us_per_step=span, busy_us_per_step=busy,
        kernels_per_step=len(events) / steps)
    by_category, by_name = collections.Counter(), collections.Counter()
    counts, name_counts = collections.Counter(), collections.Counter()
    for name, _, dur in events:
        by_category[category(name)] += dur / steps
        by_name[name] += dur / steps
        counts[category(name)] += 1 / steps
        name_counts[name] += 1 / steps
    for name, total in by_category.most_common():
        report.row(name, total, "µs/step", share_percent=100 * total / busy,
                   kernels_per_step=counts[name])
    sources = hlo_sources(args.hlo_dir) if args.hlo_dir else {}
    for name, total in by_name.most_common(args.top):
        report.row(name[:90], total, "µs/step", share_percent=100 * total / busy,
                   launches_per_step=name_counts[name],
                   **({"hlo": sources[name]} if name in sources else {}))


if __name__ == "__main__":
    harness.run("trace_train", main, define_flags, repeats=20)
