"""Seeds in one program (`training.train_seeds`): two seeds trained as one vmapped step equal their
separate `training.train` runs (the same initial parameters bit for bit, the losses within float32
rounding), split over the two host devices conftest.py forces; a seed killed mid-run resumes while
a finished one is left alone; a non-finite step stops every seed at its last good checkpoint;
configs that differ in more than the seed are refused."""
import dataclasses
import importlib.util
import pathlib
import shutil

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from anisotropy_jax import checkpointing
from anisotropy_jax.config import ConfigError, train_config_from_mapping
from anisotropy_jax.studies import training
from anisotropy_jax.studies.training import seeds as seeds_lib

ROOT = pathlib.Path(__file__).resolve().parent.parent
# |Δ loss| / loss between the vmapped and the separate runs. Measured on the CPU: 7.3e-7 over the
# 40 steps of train:smoke (2 seeds, 2 forced host devices;
# docs/benchmarks/train_throughput_cpu/agreement.json, "seeds"); a bound 14x above it.
LOSS_RTOL = 1e-5


def _config(seed, **overrides):
    spec = importlib.util.spec_from_file_location(
        "cfg", ROOT / "anisotropy_jax" / "configs" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cfg = module.get_config("smoke")
    # tiny and short (compilation dominates on 2 cores); checkpoints at 0, 1, 2, 4, 8, 10
    cfg.model.num_layers, cfg.model.d_model, cfg.model.d_ff = 1, 32, 64
    cfg.steps, cfg.checkpoint_every, cfg.optim.warmup_steps = 10, 0, 3
    cfg.seed, cfg.data.seed = seed, seed
    for field, value in overrides.items():
        cfg[field] = value
    return train_config_from_mapping(cfg)[0]


def _losses(workdir):
    return np.array([r["loss"] for r in training.read_metrics(workdir)])


def _checkpoint(workdir, config, step):
    abstract, _, _ = training.abstract_state(config)
    with checkpointing.manager(pathlib.Path(workdir) / "checkpoints", read_only=True) as mngr:
        return checkpointing.restore(mngr, step, abstract)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Seeds 0 and 1 trained separately and as one vmapped program."""
    tmp = tmp_path_factory.mktemp("seeds")
    configs = [_config(0), _config(1)]
    for config in configs:
        training.train(config, tmp / f"separate_{config.seed}")
    summaries = training.train_seeds(configs, [tmp / "vmapped_0", tmp / "vmapped_1"])
    return {"tmp": tmp, "configs": configs, "summaries": summaries}


def test_vmapped_seeds_equal_their_separate_runs(runs):
    tmp, configs = runs["tmp"], runs["configs"]
    assert jax.device_count() == 2  # conftest.py: the seed axis is split over two devices
    for config, summary in zip(configs, runs["summaries"]):
        separate, vmapped = tmp / f"separate_{config.seed}", tmp / f"vmapped_{config.seed}"
        a, b = _losses(separate), _losses(vmapped)
        assert len(a) == len(b) == config.steps
        np.testing.assert_allclose(b, a, rtol=LOSS_RTOL)
        evals = [training.read_evals(d) for d in (separate, vmapped)]
        assert [e["step"] for e in evals[0]] == [e["step"] for e in evals[1]] == [0, 1, 2, 4, 8, 10]
        np.testing.assert_allclose([e["val_loss"] for e in evals[1]],
                                   [e["val_loss"] for e in evals[0]], rtol=LOSS_RTOL)
        assert summary.final_loss == b[-1] and summary.checkpoints == [0, 1, 2, 4, 8, 10]
        (init_a, _), (init_b, _) = (_checkpoint(d, config, 0) for d in (separate, vmapped))
        for x, y in zip(jax.tree.leaves(init_a), jax.tree.leaves(init_b)):
            np.testing.assert_array_equal(x, y)  # the same initial parameters, bit for bit
        (_, data_a), (_, data_b) = (_checkpoint(d, config, config.steps) for d in (separate, vmapped))
        assert data_a == data_b  # each seed's own stream, at the same position
    # the seeds differ from each other (their own init and data streams)
    assert not np.allclose(_losses(tmp / "vmapped_0"), _losses(tmp / "vmapped_1"))


def test_seed_axis_is_split_over_the_devices():
    stacked, batch = seeds_lib.seeds_layout(2)
    assert stacked.spec == P("seeds") and batch.spec == P("seeds")
    assert len(stacked.mesh.devices.ravel()) == 2
    stacked, batch = seeds_lib.seeds_layout(3)  # 3 seeds on 2 devices: each batch split instead
    assert stacked.spec == P() and batch.spec == P(None, "data")


def test_a_killed_seed_resumes_and_a_finished_seed_is_left_alone(runs):
    """Seed 0 finished; seed 1 killed after its step-4 checkpoint (later checkpoints gone, its
    logs running past them): seed 1 resumes from step 4 to the uninterrupted run's losses, seed 0
    is not touched."""
    tmp, configs = runs["tmp"], runs["configs"]
    workdirs = [tmp / "resumed_0", tmp / "resumed_1"]
    for config, workdir in zip(configs, workdirs):
        shutil.copytree(tmp / f"vmapped_{config.seed}", workdir)
    for step in (8, 10):
        shutil.rmtree(workdirs[1] / "checkpoints" / str(step))
    finished = (workdirs[0] / "metrics.jsonl").read_text()
    training.train_seeds(configs, workdirs)
    assert (workdirs[0] / "metrics.jsonl").read_text() == finished
    records = training.read_metrics(workdirs[1])
    assert [r["step"] for r in records] == list(range(configs[1].steps))
    np.testing.assert_allclose(_losses(workdirs[1]), _losses(tmp / "vmapped_1"), rtol=LOSS_RTOL)
    assert [e["step"] for e in training.read_evals(workdirs[1])] == [0, 1, 2, 4, 8, 10]


def test_configs_that_differ_beyond_the_seed_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="only in seed"):
        training.train_seeds([_config(0), _config(1, steps=12)], [tmp_path / "a", tmp_path / "b"])
    with pytest.raises(ConfigError, match="repeats"):
        training.train_seeds([_config(0), _config(0)], [tmp_path / "a", tmp_path / "b"])
    assert not (tmp_path / "a").exists()


def test_a_non_finite_seed_stops_the_program_before_anything_non_finite_is_saved(tmp_path):
    configs = [dataclasses.replace(c, optim=dataclasses.replace(  # ~1e30 after one step
        c.optim, learning_rate=1e30, warmup_steps=0)) for c in (_config(0), _config(1))]
    workdirs = [tmp_path / "s0", tmp_path / "s1"]
    with pytest.raises(FloatingPointError, match="last good checkpoint is step 1") as error:
        training.train_seeds(configs, workdirs)
    assert "non-finite training at step 1" in str(error.value)
    for config, workdir in zip(configs, workdirs):
        with checkpointing.manager(workdir / "checkpoints", read_only=True) as mngr:
            assert checkpointing.saved_steps(mngr) == [0, 1]
        state, _ = _checkpoint(workdir, config, 1)
        assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(state))
