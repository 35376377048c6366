r"""How closely training variants track the plain run on `train:smoke` (40 steps, CPU): the
measurements behind the tolerances of tests/test_train_precision.py, tests/test_seeds_vmapped.py
and tests/test_data_parallel.py.

  bfloat16  model.precision='bfloat16' (bf16 matmul inputs, float32 master weights, softmax
            statistics, residual stream and loss) against 'highest' (float32)
  seeds     seeds 0 and 1 as one vmapped program (`training.train_seeds`) against their
            separate `training.train` runs, on the devices this process sees
  devices   experiments/train.py on 2 forced host devices (batch split over "data") against 1,
            each in a subprocess (XLA_FLAGS=--xla_force_host_platform_device_count=N)

  XLA_FLAGS=--xla_force_host_platform_device_count=2 JAX_DISABLE_MOST_OPTIMIZATIONS=1 \
      python -m benchmarks.train_agreement docs/benchmarks/train_throughput_cpu/agreement.json

(the environment of the tests, tests/conftest.py). Writes per comparison the largest |Δ loss|,
the largest |Δ loss| / loss over the steps, the largest |Δ val loss| and both loss curves.
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
CLM = str(ROOT / "anisotropy_jax" / "configs" / "train.py")


def _config(precision: str = "highest", seed: int = 0):
    from anisotropy_jax.config import train_config_from_mapping
    from anisotropy_jax.configs.train import get_config

    cfg = get_config("smoke")
    cfg.model.precision, cfg.seed, cfg.data.seed = precision, seed, seed
    return train_config_from_mapping(cfg)[0]


def _curves(workdir) -> tuple[np.ndarray, np.ndarray]:
    from anisotropy_jax.studies import training

    return (np.array([r["loss"] for r in training.read_metrics(workdir)]),
            np.array([r["val_loss"] for r in training.read_evals(workdir)]))


def compare(reference, other) -> dict:
    """The agreement of `other`'s (loss, val loss) curves with `reference`'s."""
    (loss_a, val_a), (loss_b, val_b) = reference, other
    diff = np.abs(loss_b - loss_a)
    return {"max_abs_loss_diff": float(diff.max()), "argmax_step": int(diff.argmax()),
            "max_rel_loss_diff": float((diff / loss_a).max()),
            "mean_abs_loss_diff": float(diff.mean()),
            "max_abs_val_loss_diff": float(np.abs(val_b - val_a).max()),
            "bit_identical": bool(np.array_equal(loss_a, loss_b)),
            "reference_loss": loss_a.tolist(), "loss": loss_b.tolist()}


def _devices_run(n: int, workdir: pathlib.Path) -> None:
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={n}")
    subprocess.run([sys.executable, str(ROOT / "experiments" / "train.py"),
                    f"--config={CLM}:smoke", f"--workdir={workdir}", "--progress=false",
                    "--config.analysis.run=false"], cwd=ROOT, env=env, check=True)


def measure(tmp: pathlib.Path) -> dict:
    import jax

    from anisotropy_jax.studies import training

    out = {"device_count": jax.device_count()}
    for precision in ("highest", "bfloat16"):
        training.train(_config(precision), tmp / precision)
    out["bfloat16"] = compare(_curves(tmp / "highest"), _curves(tmp / "bfloat16"))
    configs = [_config(seed=0), _config(seed=1)]
    for config in configs:
        training.train(config, tmp / f"separate_{config.seed}")
    training.train_seeds(configs, [tmp / "vmapped_0", tmp / "vmapped_1"])
    out["seeds"] = {str(c.seed): compare(_curves(tmp / f"separate_{c.seed}"),
                                         _curves(tmp / f"vmapped_{c.seed}")) for c in configs}
    for n in (1, 2):
        _devices_run(n, tmp / f"devices_{n}")
    out["devices"] = compare(_curves(tmp / "devices_1"), _curves(tmp / "devices_2"))
    return out


def main(argv: list[str]) -> None:
    from anisotropy_jax import results

    if len(argv) != 2:
        raise SystemExit("usage: python -m benchmarks.train_agreement OUT.json")
    provenance = results.Provenance(command="python -m benchmarks.train_agreement " + argv[1])
    env = {k: os.environ.get(k) for k in ("XLA_FLAGS", "JAX_DISABLE_MOST_OPTIMIZATIONS")}
    with tempfile.TemporaryDirectory() as tmp:
        out = measure(pathlib.Path(tmp))
    results.write_json(argv[1], dict(out, environment=env, provenance=provenance.finish("benchmarks.train_agreement")))
    for name in ("bfloat16", "devices"):
        print(f"{name}: max |dloss| {out[name]['max_abs_loss_diff']:.3g}")
    for seed, row in out["seeds"].items():
        print(f"seeds {seed}: max |dloss| {row['max_abs_loss_diff']:.3g}")


if __name__ == "__main__":
    main(sys.argv)
