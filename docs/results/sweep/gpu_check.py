"""One-GPU check of the 1,024-point BERT-base bias sweep (B = 32, L = 128, 1 seed, post-LN).

Runs the library directly (no absl/ml_collections, which the GPU image lacks) for two chunk sizes
and records the wall time (first run, with compilation; then a warm run), the points per second and
the allocator's peak device memory. Usage, from the repository root:

  PYTHONPATH=. python3 docs/results/sweep/gpu_check.py OUT.json
"""
import json
import sys
import time

import jax
import numpy as np

from anisotropy_jax import sweep
from anisotropy_jax.config import BlockConfig

NORMS = (0.0,) + tuple(2.0 ** (-2 + 14 * k / 1022) for k in range(1023))  # = config dense_1024


def main(path):
    device = jax.devices()[0]
    out = {"device": str(device), "device_kind": device.device_kind, "jax": jax.__version__,
           "num_points": len(NORMS), "runs": []}
    for chunk in (32, 128):
        cfg = sweep.SweepConfig(model=BlockConfig(), batch_size=32, seq_len=128, bias_norms=NORMS,
                                num_seeds=1, chunk_size=chunk)
        t0 = time.perf_counter()
        first = sweep.run_sweep(cfg)
        first_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        warm = sweep.run_sweep(cfg)
        warm_s = time.perf_counter() - t0
        stats = device.memory_stats() or {}
        row = {"chunk_size": chunk, "first_run_s": first_s,
               "first_chunk_s_incl_compile": first.first_chunk_seconds, "warm_run_s": warm_s,
               "points_per_s": len(NORMS) / warm_s,
               "peak_bytes_in_use": stats.get("peak_bytes_in_use"),
               "bytes_limit": stats.get("bytes_limit"),
               "same_as_first": bool(all(np.array_equal(first.per_seed[k], warm.per_seed[k])
                                         for k in first.per_seed))}
        print(json.dumps(row), flush=True)
        out["runs"].append(row)
        out["metrics_chunk_%d" % chunk] = {k: v[0].tolist() for k, v in warm.per_seed.items()}
    with open(path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(sys.argv[1])
