"""Data parallel over the devices of one host (`training.loop.compile_run` on `step.data_mesh`):
on the two host devices conftest.py forces, the batch is split over the mesh axis "data" and the
state is replicated, and the losses equal a one-device run of experiments/train.py (a subprocess
with --xla_force_host_platform_device_count=1) within float32 rounding."""
import importlib.util
import os
import pathlib
import subprocess
import sys

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from anisotropy_jax.config import train_config_from_mapping
from anisotropy_jax.studies import training
from anisotropy_jax.studies.training import loop

ROOT = pathlib.Path(__file__).resolve().parent.parent
CLM = str(ROOT / "anisotropy_jax" / "configs" / "train.py")
# tiny and short: compilation dominates on 2 cores
OVERRIDES = {"model.num_layers": 1, "model.d_model": 32, "model.d_ff": 64, "steps": 10,
             "checkpoint_every": 0, "optim.warmup_steps": 3}
# |Δ loss| / loss between 2 devices and 1. Measured on the CPU: 7.3e-7 over the 40 steps of
# train:smoke (the gradients are summed across devices in another order;
# docs/benchmarks/train_throughput_cpu/agreement.json, "devices"); a bound 14x above.
LOSS_RTOL = 1e-5


def _config():
    spec = importlib.util.spec_from_file_location("cfg", CLM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cfg = module.get_config("smoke")
    for field, value in OVERRIDES.items():
        *parents, name = field.split(".")
        node = cfg
        for parent in parents:
            node = node[parent]
        node[name] = value
    return train_config_from_mapping(cfg)[0]


def _one_device_run(workdir):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1")
    args = [f"--config.{k}={v}" for k, v in OVERRIDES.items()]
    proc = subprocess.run([sys.executable, str(ROOT / "experiments" / "train.py"),
                           f"--config={CLM}:smoke", f"--workdir={workdir}", "--progress=false",
                           "--config.analysis.run=false", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_two_devices_split_the_batch_and_equal_one_device(tmp_path):
    config = _config()
    assert jax.device_count() == 2
    fns = loop.compile_run(config)
    assert fns.batch_sharded.spec == P("data") and fns.replicated.spec == P()
    assert fns.batch_sharded.mesh.shape == {"data": 2}
    state = fns.init()
    assert all(x.sharding.is_fully_replicated and len(x.sharding.device_set) == 2
               for x in jax.tree.leaves(state))
    training.train(config, tmp_path / "two")
    _one_device_run(tmp_path / "one")
    saved = training.read_train_config(tmp_path / "one")
    assert saved == config  # the subprocess trained the same config
    two, one = (np.array([r["loss"] for r in training.read_metrics(tmp_path / d)])
                for d in ("two", "one"))
    assert len(one) == len(two) == config.steps
    np.testing.assert_allclose(two, one, rtol=LOSS_RTOL)
    val_two, val_one = ([e["val_loss"] for e in training.read_evals(tmp_path / d)]
                        for d in ("two", "one"))
    np.testing.assert_allclose(val_two, val_one, rtol=LOSS_RTOL)
