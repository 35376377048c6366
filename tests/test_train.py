"""Training from scratch: the smoke run learns, a SIGKILLed run resumes to the very same parameters
and loss curve, non-finite training stops with the last good checkpoint kept, bad configs fail
early with the field's name; the script's smoke path writes the analysis."""
import dataclasses
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from anisotropy_jax import checkpointing
from anisotropy_jax.config import ConfigError, train_config_from_mapping
from anisotropy_jax import configs
from anisotropy_jax.studies import training

ROOT = pathlib.Path(__file__).resolve().parent.parent
CLM_SMOKE = str(ROOT / "anisotropy_jax" / "configs" / "train.py") + ":smoke"
HANG_AT = 13  # between the checkpoints of steps 8 and 16


def _smoke_config_dict(objective="clm"):
    return configs.module("train").get_config(f"{objective}+smoke")


def _config(cfg):
    return train_config_from_mapping(cfg)[0]


def _final_params(workdir, config):
    abstract, _, _ = training.abstract_state(config)
    with checkpointing.manager(pathlib.Path(workdir) / "checkpoints", read_only=True) as mngr:
        state, _ = checkpointing.restore(mngr, config.steps, abstract)
    return state


def _script(args, env_extra=None, cache_dir=None, script="train.py", **kwargs):
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1", **(env_extra or {}))
    if cache_dir is not None:  # the killed run's compilations serve the resumed run
        env.update(JAX_COMPILATION_CACHE_DIR=str(cache_dir),
                   JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                   JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    kwargs.setdefault("stderr", subprocess.STDOUT)
    return subprocess.Popen([sys.executable, str(ROOT / "experiments" / script), *args],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, **kwargs)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The clm smoke config through experiments/train.py three times, sharing one compilation
    cache: uninterrupted (no analysis); SIGKILLed mid-run; the same command again (which also
    runs the analysis)."""
    cache = tmp_path_factory.mktemp("jax_cache")
    clean = tmp_path_factory.mktemp("uninterrupted")
    reference = _script([f"--config={CLM_SMOKE}", f"--workdir={clean}", "--progress=false",
                         "--config.analysis.run=false"], cache_dir=cache)
    out, _ = reference.communicate(timeout=400)
    assert reference.returncode == 0, out

    workdir = tmp_path_factory.mktemp("resumed")
    args = [f"--config={CLM_SMOKE}", f"--workdir={workdir}", "--progress=false"]
    first = _script(args, {training.HANG_ENV: str(HANG_AT)}, cache_dir=cache)
    output = []
    deadline = time.time() + 240
    for line in first.stdout:  # wait until the run is parked before step HANG_AT
        output.append(line)
        if "hanging before step" in line or time.time() > deadline:
            break
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    assert first.returncode == -signal.SIGKILL, "".join(output)
    with checkpointing.manager(workdir / "checkpoints", read_only=True) as mngr:
        steps_at_kill = checkpointing.saved_steps(mngr)
    lines_at_kill = len((workdir / "metrics.jsonl").read_text().splitlines())
    second = _script(args, cache_dir=cache)
    try:
        out, _ = second.communicate(timeout=400)
    except subprocess.TimeoutExpired:  # show where it is stuck (faulthandler dumps on SIGABRT)
        second.send_signal(signal.SIGABRT)
        out, _ = second.communicate(timeout=60)
        pytest.fail(f"the resumed run did not finish in 400 s:\n{out[-6000:]}")
    assert second.returncode == 0, out
    config = _config(_smoke_config_dict("clm"))
    return {"config": config, "clean": clean, "cache": cache, "workdir": workdir, "steps_at_kill": steps_at_kill,
            "lines_at_kill": lines_at_kill, "out": out}


def test_smoke_loss_decreases(runs):
    config, workdir = runs["config"], runs["clean"]
    records = training.read_metrics(workdir)
    assert [r["step"] for r in records] == list(range(config.steps))
    first, last = np.mean([r["loss"] for r in records[:3]]), np.mean(
        [r["loss"] for r in records[-3:]])
    assert first > 5.0  # ≈ ln 256 at init
    assert last < first - 1.0, (first, last)
    evals = training.read_jsonl(workdir / "eval.jsonl")
    assert [e["step"] for e in evals] == checkpointing.checkpoint_steps(config.steps,
                                                                        config.checkpoint_every)
    assert evals[-1]["val_loss"] < evals[0]["val_loss"] - 1.0
    for r in records:
        assert set(r) == {"step", "loss", "learning_rate", "grad_norm", "tokens_per_s"}
    # the warmup starts at peak / warmup_steps, not 0 (docs/TRAIN.md, "Learning-rate schedule")
    assert records[0]["learning_rate"] == pytest.approx(
        config.optim.learning_rate / config.optim.warmup_steps, rel=1e-6)
    assert max(r["learning_rate"] for r in records) == pytest.approx(config.optim.learning_rate,
                                                                     rel=1e-5)


def test_step_1_differs_from_step_0(runs):
    """The first update moves the parameters: the step-1 checkpoint is not step 0's again (as
    it was with a warmup from learning rate 0)."""
    config = runs["config"]
    abstract, _, _ = training.abstract_state(config)
    with checkpointing.manager(runs["clean"] / "checkpoints", read_only=True) as mngr:
        (step0, _), (step1, _) = (checkpointing.restore(mngr, s, abstract) for s in (0, 1))
    changed = [not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(step0["params"]),
                                                       jax.tree.leaves(step1["params"]))]
    assert all(changed), f"{changed.count(False)} of {len(changed)} parameters did not move"


def test_ctrl_c_is_one_line_naming_the_step_and_the_rerun_resumes(runs, tmp_path):
    workdir = tmp_path / "run"
    args = [f"--config={CLM_SMOKE}", f"--workdir={workdir}", "--progress=false",
            "--config.analysis.run=false"]
    # SIGINT's default disposition restored in the child: a pytest-xdist worker may ignore SIGINT,
    # the child would inherit SIG_IGN, and Python then installs no KeyboardInterrupt handler.
    first = _script(args, {training.HANG_ENV: str(HANG_AT)}, cache_dir=runs["cache"],
                    stderr=subprocess.PIPE,
                    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for line in first.stderr:  # notes go to stderr; wait until the run is parked
        if "hanging before step" in line:
            break
    first.send_signal(signal.SIGINT)
    out, err = first.communicate(timeout=300)  # generous: a loaded 2-core CI machine
    assert first.returncode == 130, err
    assert [line for line in err.splitlines() if line.strip()] == [
        f"error: interrupted at step {HANG_AT}; rerun the same command to resume"], err
    assert not [p for p in workdir.rglob("*") if p.name.endswith(".tmp")]
    second = _script(args, cache_dir=runs["cache"])
    out, _ = second.communicate(timeout=400)
    assert second.returncode == 0 and "resuming from checkpoint step 8" in out, out
    resumed, clean = (training.read_metrics(w) for w in (workdir, runs["clean"]))
    assert [(r["step"], r["loss"]) for r in resumed] == [(r["step"], r["loss"]) for r in clean]


def test_notes_go_around_the_progress_bar_and_no_backend_or_read_only_noise(runs, tmp_path):
    """With the bar on, each "step N: ... checkpoint saved" note starts a line of its own (the
    bar is cleared first: tqdm.write), and neither JAX's "Unable to initialize backend 'tpu'"
    nor orbax's "Given directory is read only" (the analysis reads the checkpoints) is printed."""
    proc = _script([f"--config={CLM_SMOKE}", f"--workdir={tmp_path / 'run'}", "--progress=true",
                    "--config.steps=8", "--config.checkpoint_every=0"], cache_dir=runs["cache"])
    out, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, out
    notes = [line for line in out.split("\n") if "checkpoint saved" in line]
    assert len(notes) == 4, out  # steps 1, 2, 4, 8
    for line in notes:
        assert line.rsplit("\r", 1)[-1].startswith("step "), repr(line)
    assert "analysed checkpoint 8" in out
    assert "Unable to initialize backend" not in out and "read only" not in out, out


def test_kill_and_resume_reproduces_the_uninterrupted_run(runs):
    config, clean_dir, workdir = runs["config"], runs["clean"], runs["workdir"]
    steps_at_kill, lines_at_kill, out = runs["steps_at_kill"], runs["lines_at_kill"], runs["out"]
    # The kill happened mid-run: after checkpoint 8, before 16, with metrics up to step 12.
    assert steps_at_kill == [0, 1, 2, 4, 8], steps_at_kill
    assert lines_at_kill == HANG_AT
    assert "resuming from checkpoint step 8" in out
    # Same loss curve (steps 8..12 were recomputed, not duplicated) ...
    assert training.read_metrics(workdir) and [
        (r["step"], r["loss"], r["grad_norm"], r["learning_rate"])
        for r in training.read_metrics(workdir)] == [
        (r["step"], r["loss"], r["grad_norm"], r["learning_rate"])
        for r in training.read_metrics(clean_dir)]
    assert training.read_evals(workdir) == training.read_evals(clean_dir)
    # ... and bit-identical final parameters and optimiser state.
    a, b = _final_params(workdir, config), _final_params(clean_dir, config)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_script_smoke_path_writes_the_analysis(runs):
    workdir, out = runs["workdir"], runs["out"]
    results = json.loads((workdir / "results.json").read_text())
    assert {"provenance", "config", "steps", "heads", "layers", "embeddings", "final_norm",
            "correlation", "trends", "training"} <= set(results)
    assert results["config"]["train"]["objective"] == "clm"
    assert results["steps"] == [0, 1, 2, 4, 8, 16, 20, 32, 40]
    num_layers, num_heads = 2, 4
    assert np.asarray(results["heads"]["mean_query_key_cosine"]).shape == (9, num_layers,
                                                                            num_heads)
    assert np.asarray(results["layers"]["cross_sequence_cosine"]).shape == (9, num_layers + 1)
    for name in ("loss", "trajectories", "anisotropy_heatmap", "entropy_vs_logit_terms"):
        assert (workdir / "figures" / f"{name}.png").stat().st_size > 1000
    with np.load(workdir / "dynamics.npz") as arrays:
        np.testing.assert_allclose(arrays["heads/mean_query_norm"],
                                   results["heads"]["mean_query_norm"])
    assert "holds=" in out
    # The key-dependent term beside the softmax-invariant one; correlations per checkpoint only.
    assert np.asarray(results["heads"]["key_term_std"]).shape == (9, num_layers, num_heads)
    assert "mean_query_key_dot" not in results["heads"]
    assert "softmax" in results["objects"]["heads"]
    corr = results["correlation"]
    assert corr["n"] == num_layers * num_heads and len(corr["key_term_std"]["rho"]) == 9
    # never pooled over checkpoints (both series trend with the step): one ρ per checkpoint
    for name in ("partial_key_term_given_logit_spread", "key_term_share"):
        if name in corr:
            assert len(corr[name]["rho"]) == 9, name


def test_seeds_script_resumes_a_finished_seed_and_aggregates(runs, tmp_path):
    """experiments/seeds.py: seed 0 is the finished uninterrupted smoke run (copied, not
    trained again), seed 1 trains; the summary has per-checkpoint intervals over both."""
    workdir = tmp_path / "seeds"
    shutil.copytree(runs["clean"], workdir / "seed_0")
    before = (workdir / "seed_0" / "metrics.jsonl").read_text()
    proc = _script([f"--config={CLM_SMOKE}", f"--workdir={workdir}", "--seeds=0,1",
                    "--progress=false"], cache_dir=runs["cache"], script="seeds.py")
    out, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, out
    assert (workdir / "seed_0" / "metrics.jsonl").read_text() == before
    summary = json.loads((workdir / "results.json").read_text())
    assert summary["seeds"] == [0, 1] and "seeds" in summary["units"]
    assert "seeds.py" in summary["command"]
    q = summary["quantities"]["heads_mean/key_term_std"]
    per_seed = np.asarray(q["per_seed"])
    assert per_seed.shape == (2, 9) and np.all(np.asarray(q["low"]) <= np.asarray(q["high"]))
    seed1 = json.loads((workdir / "seed_1" / "results.json").read_text())
    np.testing.assert_allclose(per_seed[1], np.mean(seed1["heads"]["key_term_std"], (1, 2)))
    assert seed1["config"]["train"]["seed"] == 1 and seed1["config"]["train"]["data"]["seed"] == 1
    assert (workdir / "figures" / "seeds_query_key.png").stat().st_size > 1000
    assert not (workdir / "figures" / "seeds.png").exists()
    assert "| heads_mean/key_term_std |" in out
    # An analysed seed is loaded, not trained or analysed again (its checkpoints may be gone: a
    # run trained on another machine); another config or analysis setting is not.
    from anisotropy_jax.config import AnalysisConfig
    from anisotropy_jax.studies.train import analysed
    train1 = training.read_train_config(workdir / "seed_1")
    settings = AnalysisConfig(batch_size=json.loads(
        (workdir / "seed_1" / "results.json").read_text())["config"]["analysis"]["batch_size"])
    assert analysed(workdir / "seed_1", train1, settings) == seed1
    assert analysed(workdir / "seed_1", dataclasses.replace(train1, steps=7), settings) is None
    assert analysed(workdir / "seed_1", train1, dataclasses.replace(settings, seed=3)) is None
    assert analysed(tmp_path / "nothing", train1, settings) is None
    bad = _script([f"--config={CLM_SMOKE}", f"--workdir={tmp_path}/x", "--seeds=3"],
                  script="seeds.py")
    out, _ = bad.communicate(timeout=120)
    assert bad.returncode == 2 and out.strip().splitlines()[-1].startswith("error: seeds: "), out
    assert not (tmp_path / "x").exists()


def test_non_finite_training_stops_and_keeps_the_last_good_checkpoint(tmp_path):
    # The mlm objective here, so that its training path (masked batches, post-LN) runs in CI too.
    cfg = _smoke_config_dict("mlm")
    cfg.optim.learning_rate, cfg.optim.warmup_steps = 1e30, 0  # parameters ~1e30 after 1 step
    cfg.model.num_layers, cfg.model.d_model, cfg.model.d_ff = 1, 16, 16  # small: fast compile
    cfg.data.seq_len = 8
    config = _config(cfg)
    with pytest.raises(FloatingPointError, match="last good checkpoint is step 1") as error:
        training.train(config, tmp_path)
    assert "non-finite training at step 1" in str(error.value)
    abstract, _, _ = training.abstract_state(config)
    with checkpointing.manager(tmp_path / "checkpoints", read_only=True) as mngr:
        assert checkpointing.saved_steps(mngr) == [0, 1]
        state, _ = checkpointing.restore(mngr, 1, abstract)
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(state))


def test_resuming_with_another_config_is_refused(runs):
    workdir = runs["clean"]
    cfg = _smoke_config_dict("clm")
    cfg.seed = 1
    with pytest.raises(ConfigError, match="^seed: "):
        training.train(_config(cfg), workdir)


@pytest.mark.parametrize("field, value, message", [
    # d_model = 64 over 3 heads: BlockConfig reports the width that does not divide.
    ("model.num_heads", 3, "model.d_model"), ("model.num_heads", 0, "model.num_heads"),
    ("model.d_model", 0, "model.d_model"),
    ("optim.learning_rate", -1.0, "optim.learning_rate"), ("data.seq_len", 1, "data.seq_len"),
    ("steps", 0, "steps"), ("optim.warmup_steps", 100, "optim.warmup_steps")])
def test_bad_config_names_the_field(field, value, message):
    cfg = _smoke_config_dict("mlm")
    section, _, name = field.rpartition(".")
    setattr(cfg[section] if section else cfg, name, value)
    with pytest.raises(ConfigError, match=f"^{message}: "):
        _config(cfg)


def test_unknown_fields_are_refused():
    cfg = _smoke_config_dict("mlm").to_dict()
    cfg["model"]["n_layers"] = 3
    with pytest.raises(ConfigError, match="^model.n_layers: unknown field"):
        _config(cfg)
    with pytest.raises(ConfigError, match="data.batch_size"):
        training.check_devices(_config(_smoke_config_dict("mlm")), num_devices=3)


def test_script_rejects_a_bad_config_in_one_line_before_compiling(tmp_path):
    started = time.time()
    proc = _script([f"--config={CLM_SMOKE}", f"--workdir={tmp_path}/run",
                    "--config.model.num_heads=3"])
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0] == (
        "error: model.d_model: d_model=64 is not divisible by num_heads=3"), out
    assert not (tmp_path / "run").exists()  # nothing written, nothing compiled
    proc = _script([f"--config={CLM_SMOKE}", f"--workdir={tmp_path}/run", "--config.model.foo=1"])
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2 and out.strip() == "error: --config.model.foo: unknown config field"
    qk = subprocess.run([sys.executable, str(ROOT / "experiments" / "dynamics.py"),
                         f"--workdir={tmp_path}"], cwd=ROOT, capture_output=True, text=True,
                        timeout=120)
    assert qk.returncode != 0 and qk.stderr.strip().splitlines()[-1].startswith(
        "error: --workdir"), qk.stderr
    assert time.time() - started < 60
