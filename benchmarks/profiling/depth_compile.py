r"""Compilation time of one depth-sweep chunk per weights mode (what the compile of
`:bert_base` is made of).

  python -m benchmarks.profiling.depth_compile [--width=128] [--num_layers=2] [--json=FILE]

Lowers and compiles the chunk function of one post-LN stack (B = 4, L = 32, 2 bias norms, 1 seed)
for weights 'per_layer' and 'stacked', and once more with the bias sweep's metric reduction
replaced by a single sum (what the metrics add to the compile), on the default backend. One
untimed compile comes first: the first compilation of a process also pays the backend's one-time
start-up (on an H100: 37.8 s for the first line before this warm-up was added,
docs/results/depth/bert_base/weights_modes_h100.txt).
"""
from __future__ import annotations

import time

from absl import flags

from benchmarks.profiling import harness


def define_flags():
    flags.DEFINE_integer("width", 128, "Residual width D.")
    flags.DEFINE_integer("num_layers", 2, "Stack depth.")


def compile_seconds(width: int, num_layers: int, weights: str,
                    reduce_metrics: bool = True) -> float:
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    from anisotropy_jax import inputs
    from anisotropy_jax.configs.depth import DepthConfig
    from anisotropy_jax.studies.depth import grid, stack

    cfg = DepthConfig(widths=(width,), num_layers=num_layers, batch_size=4, seq_len=32,
                      architectures=("post",), bias_norms=(0.0, 4.0), num_seeds=1,
                      chunk_size=2, weights=weights)
    original = stack.reduce_probes
    if not reduce_metrics:
        stack.reduce_probes = lambda probes, block: {"sum": probes["resid_post"].sum()}
    try:
        mesh = grid.grid_mesh(jax.devices()[:1])
        layout = grid.chunk_layout(cfg.num_seeds, len(cfg.bias_norms), cfg.chunk_size, 1)
        keys = np.asarray(jax.random.key_data(inputs.seed_keys(cfg.seed, cfg.num_seeds)))
        fn = grid.chunk_computation(cfg, "post", width, 1)
        jitted = jax.jit(fn)
        k = jax.ShapeDtypeStruct((layout.seeds_per_chunk,) + keys.shape[1:], keys.dtype,
                                 sharding=NamedSharding(mesh, P()))
        s = jax.ShapeDtypeStruct((layout.bias_per_chunk,), np.float32,
                                 sharding=NamedSharding(mesh, P()))
        lowered = jitted.lower(k, s)
        t0 = time.perf_counter()
        lowered.compile()
        return time.perf_counter() - t0
    finally:
        stack.reduce_probes = original


def main(args, report):
    shape = (args.width, args.num_layers)
    compile_seconds(*shape, "stacked", False)  # warm-up: the process's one-time compiler start-up
    report.describe(f"post-LN stack, D = {args.width}, {args.num_layers} layers; compile seconds",
                    width=args.width, num_layers=args.num_layers)
    for weights in ("per_layer", "stacked"):
        report.row(f"weights={weights}, with metrics", compile_seconds(*shape, weights), "s")
        report.row(f"weights={weights}, metrics replaced by a sum",
                   compile_seconds(*shape, weights, False), "s")


if __name__ == "__main__":
    harness.run("depth_compile", main, define_flags, repeats=None)
