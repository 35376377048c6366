"""The training loop: `train(config, workdir)` trains a run from scratch or resumes it.

Outputs in the workdir (`logs`): `config.json`, `metrics.jsonl`, `eval.jsonl` (validation loss
at each checkpoint) and `checkpoints/<step>/` (orbax; steps 0, 1, 2, 4, 8, …, every
`checkpoint_every`, and the last). Running the same command again resumes from the newest
readable checkpoint and reproduces an uninterrupted run exactly (same parameters, same loss curve
on CPU). A non-finite loss, gradient or parameter stops the run with FloatingPointError before
anything non-finite is saved; the last good checkpoint stays.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import pathlib
import time
from typing import Any, Callable

import jax
from jax.sharding import NamedSharding, PartitionSpec as P

from anisotropy_jax import checkpointing, data as data_lib
from anisotropy_jax.config import AnalysisConfig, TrainConfig
from anisotropy_jax.protocol import SILENT, Interrupted, Progress
from anisotropy_jax.studies.training import logs
from anisotropy_jax.studies.training.step import (abstract_state, check_devices, data_mesh,
                                                  eval_loss, init_state, learning_rate_schedule,
                                                  train_step)

# Test hook (documented in docs/TRAINING.md): when set to N, the training loop stops making progress
# before step N and sleeps, so that a test can SIGKILL a real run mid-way at a known place.
HANG_ENV = "ANISOTROPY_JAX_TEST_HANG_AT_STEP"


@dataclasses.dataclass(frozen=True)
class TrainSummary:
    """What a finished run reports: losses in nats per predicted byte.

    Attributes:
      objective: 'mlm' or 'clm'.
      final_step: number of updates made (config.steps).
      first_loss, final_loss: training loss of the first and the last step (None without steps).
      eval: the eval.jsonl records [{"step", "val_loss"}] at every checkpoint.
      checkpoints: the checkpointed steps.
    """

    objective: str
    final_step: int
    first_loss: float | None
    final_loss: float | None
    eval: list[dict]
    checkpoints: list[int]


def format_summary(summary: TrainSummary) -> str:
    """The line the training script prints."""
    return (f"trained {summary.objective} for {summary.final_step} steps: loss "
            f"{summary.first_loss:.4f} -> {summary.final_loss:.4f}; val "
            f"{summary.eval[0]['val_loss']:.4f} -> {summary.eval[-1]['val_loss']:.4f}")


@dataclasses.dataclass(frozen=True)
class _Compiled:
    """The jitted functions of a run and the shardings of their arguments."""

    init: Callable
    step: Callable
    eval: Callable
    abstract: Any
    replicated: NamedSharding
    batch_sharded: NamedSharding


def _compile(config: TrainConfig) -> _Compiled:
    mesh = data_mesh()
    replicated, batch_sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    abstract, model, tx = abstract_state(config)
    schedule = learning_rate_schedule(config.optim, config.steps)
    step_fn = jax.jit(functools.partial(train_step, model=model, tx=tx, schedule=schedule),
                      in_shardings=(replicated, batch_sharded),
                      out_shardings=(replicated, replicated), donate_argnums=0)
    eval_fn = jax.jit(functools.partial(eval_loss, model=model),
                      in_shardings=(replicated, batch_sharded), out_shardings=replicated)
    init_fn = jax.jit(functools.partial(init_state, model, tx, config.seed, config.data.seq_len),
                      out_shardings=replicated)
    return _Compiled(init_fn, step_fn, eval_fn, abstract, replicated, batch_sharded)


def _non_finite_error(step: int, record: dict, params_finite: bool, last_good: int,
                      workdir: pathlib.Path) -> FloatingPointError:
    return FloatingPointError(
        f"non-finite training at step {step}: loss={record['loss']}, "
        f"grad_norm={record['grad_norm']}, finite parameters after the update: {params_finite}; "
        f"the last good checkpoint is step {last_good} in {workdir / 'checkpoints'} (kept)")


def train(config: TrainConfig, workdir: str | os.PathLike, *, progress: Progress = SILENT,
          analysis: AnalysisConfig | None = None) -> TrainSummary:
    """Trains (or resumes) the run in `workdir`.

    `analysis` (the settings of the per-checkpoint analysis) is stored in config.json beside the
    training config. `progress` shows a bar over the steps and notes (resuming, checkpoints
    saved). Raises ConfigError when the workdir holds a run of another config,
    FloatingPointError on a non-finite loss, gradient or parameter, and on Ctrl-C
    `protocol.Interrupted` naming the step (the newest checkpoint stays; a rerun resumes there).
    """
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    check_devices(config)
    logs.check_same_config(workdir, config)
    logs.write_config(workdir, config, analysis)

    stream = data_lib.BatchIterator(config.data)
    fns = _compile(config)
    val_batch = jax.device_put(stream.validation_batch(config.eval_batch_size), fns.batch_sharded)
    save_steps = set(checkpointing.checkpoint_steps(config.steps, config.checkpoint_every))
    hang_at = int(os.environ.get(HANG_ENV, "-1"))
    metrics_path, eval_path = workdir / logs.METRICS_FILE, workdir / logs.EVAL_FILE

    def evaluate_and_save(mngr, step, state):
        val = float(fns.eval(state["params"], val_batch))
        checkpointing.save(mngr, step, state, stream.state())
        with open(eval_path, "a") as f:
            logs.append_jsonl(f, {"step": step, "val_loss": val})
        return val

    with checkpointing.manager(workdir / "checkpoints") as mngr:
        restored = checkpointing.restore_latest(mngr, fns.abstract)
        if restored is None:
            start, state = 0, fns.init()
            logs.truncate_jsonl(metrics_path, 0)
            logs.truncate_jsonl(eval_path, 0)
            evaluate_and_save(mngr, 0, state)
        else:
            start, state, data_state = restored
            if int(state["step"]) != start:
                raise ValueError(f"checkpoint {start} holds a state of step {int(state['step'])}")
            stream.restore(data_state)
            logs.truncate_jsonl(metrics_path, start)
            logs.truncate_jsonl(eval_path, start + 1)
        last_good = start
        bar = progress.bar(config.steps, f"train {config.objective}", initial=start)
        if start:
            progress.note(f"resuming from checkpoint step {start} in {workdir / 'checkpoints'}")
        tokens = config.data.batch_size * config.data.seq_len
        tick = time.perf_counter()
        step = start
        try:
            with open(metrics_path, "a") as log:
                for step in range(start, config.steps):
                    if step == hang_at:
                        progress.note(f"{HANG_ENV}={hang_at}: hanging before step {step}")
                        while True:
                            time.sleep(1.0)
                    stream.position = step
                    batch = jax.device_put(next(stream), fns.batch_sharded)
                    state, metrics = fns.step(state, batch)
                    metrics = jax.device_get(metrics)
                    now = time.perf_counter()
                    record = {"step": step, "loss": float(metrics["loss"]),
                              "learning_rate": float(metrics["learning_rate"]),
                              "grad_norm": float(metrics["grad_norm"]),
                              "tokens_per_s": tokens / max(now - tick, 1e-9)}
                    tick = now
                    params_finite = bool(metrics["params_finite"])
                    if not (math.isfinite(record["loss"]) and math.isfinite(record["grad_norm"])
                            and params_finite):
                        raise _non_finite_error(step, record, params_finite, last_good, workdir)
                    logs.append_jsonl(log, record)
                    bar.update(loss=f"{record['loss']:.3f}")
                    if step + 1 in save_steps:
                        val = evaluate_and_save(mngr, step + 1, state)
                        last_good = step + 1
                        progress.note(f"step {step + 1}: loss {record['loss']:.4f}, "
                                      f"val loss {val:.4f}, checkpoint saved")
        except KeyboardInterrupt:
            raise Interrupted(step) from None
        finally:
            bar.close()
    records = logs.read_metrics(workdir)
    return TrainSummary(objective=config.objective, final_step=config.steps,
                        first_loss=records[0]["loss"] if records else None,
                        final_loss=records[-1]["loss"] if records else None,
                        eval=logs.read_evals(workdir), checkpoints=sorted(save_steps))
