r"""Wall time of S seeds trained as one vmapped program (`training.train_seeds`) against one seed,
from scratch, as experiments/seeds.py trains them (the target: 5 seeds in ≤ 2x one seed's
wall time at `train:gpu` size).

  python -m benchmarks.train_seeds_time --variant=gpu --steps=1000 --seeds=1,5 --out=DIR

For each S (in its own workdirs under DIR) it records the whole wall time of `train_seeds`
(compilation, the checkpoints of the log-spaced schedule and every step: what a user waits for),
the median tokens/s of one seed's metrics.jsonl (the readback batches: steps only), and the
ratio of each S's wall time to the first S's. Writes DIR/train_seeds_time.json with provenance.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

import numpy as np


def _configs(variant: str, steps: int, num_seeds: int, precision: str | None):
    from anisotropy_jax.config import train_config_from_mapping
    from anisotropy_jax.configs.train import get_config

    configs = []
    for seed in range(num_seeds):
        cfg = get_config(variant)
        cfg.steps, cfg.seed, cfg.data.seed = steps, seed, seed
        cfg.optim.warmup_steps = min(cfg.optim.warmup_steps, steps)
        if precision:
            cfg.model.precision = precision
        configs.append(train_config_from_mapping(cfg)[0])
    return configs


def time_seeds(variant: str, steps: int, num_seeds: int, workdir: pathlib.Path,
               precision: str | None = None) -> dict:
    """Trains `num_seeds` seeds from scratch into workdir/seed_<s>; wall time and rates."""
    from anisotropy_jax.studies import training

    configs = _configs(variant, steps, num_seeds, precision)
    workdirs = [workdir / f"seed_{c.seed}" for c in configs]
    t0 = time.perf_counter()
    summaries = training.train_seeds(configs, workdirs)
    wall = time.perf_counter() - t0
    rates = [r["tokens_per_s"] for r in training.read_metrics(workdirs[0])]
    config = configs[0]
    return {"num_seeds": num_seeds, "wall_s": wall, "steps": steps,
            "tokens_per_step_per_seed": config.data.batch_size * config.data.seq_len,
            "median_tokens_per_s_per_seed": float(np.median(rates)),
            "final_losses": [s.final_loss for s in summaries]}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="gpu", help="variant of the training config (train:VARIANT)")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seeds", default="1,5", help="the seed counts S to time, in order")
    parser.add_argument("--precision", default=None, help="model.precision (default: variant's)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv[1:])
    import jax

    from anisotropy_jax import results

    provenance = results.Provenance(command="python -m benchmarks.train_seeds_time "
                                    + " ".join(argv[1:]))
    out = pathlib.Path(args.out)
    rows = []
    for num_seeds in (int(s) for s in args.seeds.split(",")):
        rows.append(time_seeds(args.variant, args.steps, num_seeds, out / f"S{num_seeds}",
                               args.precision))
        rows[-1]["wall_over_first"] = rows[-1]["wall_s"] / rows[0]["wall_s"]
        print(f"S={num_seeds}: {rows[-1]['wall_s']:.1f} s "
              f"({rows[-1]['wall_over_first']:.2f}x S={rows[0]['num_seeds']})", flush=True)
        results.write_json(out / "train_seeds_time.json",
                           {"device_kind": jax.devices()[0].device_kind,
                            "device_count": jax.device_count(), "rows": rows,
                            "args": vars(args), "provenance": provenance.finish()})


if __name__ == "__main__":
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    main(sys.argv)
