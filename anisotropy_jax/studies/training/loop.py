"""The training loop: `train(config, workdir)` trains a run from scratch or resumes it.

Outputs in the workdir (`logs`): `config.json`, `metrics.jsonl`, `eval.jsonl` (validation loss
at each checkpoint) and `checkpoints/<step>/` (orbax; steps 0, 1, 2, 4, 8, …, every
`checkpoint_every`, and the last). Running the same command again resumes from the newest
readable checkpoint and reproduces an uninterrupted run exactly (same parameters, same loss curve
on CPU). A non-finite loss, gradient or parameter stops the run with FloatingPointError before
anything non-finite is saved; the last good checkpoint stays.

The host never waits for the device between readbacks: the step's metrics stay on the device and
are copied back every `log_every` steps and at each checkpoint (where the finiteness of every
step since the last readback is checked before saving), batches are prefetched to the device,
and the state buffers are donated to the step.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import math
import os
import pathlib
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from anisotropy_jax import checkpointing, data as data_lib
from anisotropy_jax.config import AnalysisConfig, TrainConfig, attention_core_note
from anisotropy_jax.protocol import SILENT, Interrupted, Progress
from anisotropy_jax.studies.training import logs
from anisotropy_jax.studies.training.optimizers import learning_rate_schedule
from anisotropy_jax.studies.training.step import (abstract_state, check_devices, data_mesh,
                                                  eval_loss, init_state, train_step)

# Test hook (documented in docs/TRAIN.md): when set to N, the training loop stops making progress
# before step N and sleeps, so that a test can SIGKILL a real run mid-way at a known place.
HANG_ENV = "ANISOTROPY_JAX_TEST_HANG_AT_STEP"
# The host reads the step metrics back every LOG_EVERY steps (and at every checkpoint), and the
# batches of the next PREFETCH_DEPTH steps are on their way to the device (docs/TRAIN.md).
LOG_EVERY = 50
PREFETCH_DEPTH = 2


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
class Compiled:
    """The jitted functions of a run and the shardings of their arguments."""

    init: Callable
    step: Callable
    eval: Callable
    abstract: Any
    replicated: NamedSharding
    batch_sharded: NamedSharding


def compile_run(config: TrainConfig) -> Compiled:
    """The jitted init, step (state donated) and eval of `config` on the data mesh, with the
    attention core `config.model.attention_impl` resolves to here (`abstract_state`); also what
    benchmarks/train_throughput.py times."""
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
    return Compiled(init_fn, step_fn, eval_fn, abstract, replicated, batch_sharded)


def _non_finite_error(step: int, record: dict, params_finite: bool, last_good: int,
                      workdir: pathlib.Path) -> FloatingPointError:
    return FloatingPointError(
        f"non-finite training at step {step}: loss={record['loss']}, "
        f"grad_norm={record['grad_norm']}, finite parameters after the update: {params_finite}; "
        f"the last good checkpoint is step {last_good} in {workdir / 'checkpoints'} (kept)")



class Prefetch:
    """The batches of steps [start, stop) on the device, `depth` steps ahead: the host builds
    step i + depth's batch (numpy, `BatchIterator.batch_at`: a pure function of the step) and
    starts its copy to the device while the device, dispatched asynchronously, runs step i. (No
    worker thread: with one, the Ctrl-C test's run did not exit within its 60 s.)"""

    def __init__(self, stream: data_lib.BatchIterator, sharding: NamedSharding, start: int,
                 stop: int, depth: int = PREFETCH_DEPTH):
        self._load = lambda step: jax.device_put(stream.batch_at(step), sharding)
        self._queue = collections.deque(self._load(step)
                                        for step in range(start, min(start + depth, stop)))
        self._next, self._stop = start + len(self._queue), stop

    def get(self):
        """The next step's batch (in order)."""
        batch = self._queue.popleft()
        if self._next < self._stop:
            self._queue.append(self._load(self._next))
            self._next += 1
        return batch

    def close(self) -> None:
        self._queue.clear()


class Readback:
    """The step metrics still on the device. `flush` copies them to the host in one transfer per
    metric, checks them (a non-finite loss, gradient norm or parameter raises FloatingPointError
    naming the first such step; the records before it are written), appends them to
    metrics.jsonl and moves the bar. tokens_per_s is the mean rate since the last flush.

    One run: `logs` and `workdirs` hold one entry and each metric is a scalar per step. S seeds
    trained as one program (`training.seeds`): one entry per seed, and each metric has a leading
    seed axis; seed i's records go to logs[i]. The bar shows the first seed's loss."""

    def __init__(self, logs_: list, bar, tokens_per_step: int, workdirs: list[pathlib.Path],
                 stacked: bool = False):
        self.logs, self.bar, self.tokens, self.workdirs = logs_, bar, tokens_per_step, workdirs
        self.stacked = stacked
        self.pending: list[tuple[int, dict]] = []
        self.tick = time.perf_counter()
        self.last_loss: float | None = None

    def add(self, step: int, metrics: dict) -> None:
        self.pending.append((step, metrics))

    def flush(self, last_good: int) -> None:
        if not self.pending:
            return
        steps = [step for step, _ in self.pending]
        stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *[m for _, m in self.pending])
        host = jax.device_get(stacked)
        self.pending = []
        now = time.perf_counter()
        rate = self.tokens * len(steps) / max(now - self.tick, 1e-9)
        self.tick = now
        for column, (log, workdir) in enumerate(zip(self.logs, self.workdirs)):
            values = {k: v[:, column] for k, v in host.items()} if self.stacked else host
            loss = self._write(log, workdir, steps, values, rate, last_good)
            if column == 0:
                self.last_loss = loss
        self.bar.update(len(steps), loss=f"{self.last_loss:.3f}")

    def _write(self, log, workdir, steps, host, rate, last_good) -> float:
        last_loss = float("nan")
        for i, step in enumerate(steps):
            record = {"step": step, "loss": float(host["loss"][i]),
                      "learning_rate": float(host["learning_rate"][i]),
                      "grad_norm": float(host["grad_norm"][i]), "tokens_per_s": rate}
            params_finite = bool(host["params_finite"][i])
            if not (math.isfinite(record["loss"]) and math.isfinite(record["grad_norm"])
                    and params_finite):
                log.flush()
                raise _non_finite_error(step, record, params_finite, last_good, workdir)
            logs.append_jsonl(log, record)
            last_loss = record["loss"]
        return last_loss


def train(config: TrainConfig, workdir: str | os.PathLike, *, progress: Progress = SILENT,
          analysis: AnalysisConfig | None = None, log_every: int = LOG_EVERY) -> TrainSummary:
    """Trains (or resumes) the run in `workdir`.

    `analysis` (the settings of the per-checkpoint analysis) is stored in config.json beside the
    training config. `progress` shows a bar over the steps and notes (resuming, checkpoints
    saved). The host waits for the device only every `log_every` steps and at checkpoints
    (`Readback`); batches are prefetched to the device (`Prefetch`) and the state buffers are
    donated to the step. Raises ConfigError when the workdir holds a run of another config,
    FloatingPointError on a non-finite loss, gradient or parameter (checked on every step's
    metrics before the next checkpoint is saved), and on Ctrl-C `protocol.Interrupted` naming the
    step (the newest checkpoint stays; a rerun resumes there).
    """
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    check_devices(config)
    logs.check_same_config(workdir, config)
    logs.write_config(workdir, config, analysis)

    stream = data_lib.BatchIterator(config.data)
    progress.note(attention_core_note(config.model, jax.default_backend()))
    fns = compile_run(config)
    val_batch = jax.device_put(stream.validation_batch(config.eval_batch_size), fns.batch_sharded)
    save_steps = set(checkpointing.checkpoint_steps(config.steps, config.checkpoint_every))
    metrics_path, eval_path = workdir / logs.METRICS_FILE, workdir / logs.EVAL_FILE

    def evaluate_and_save(mngr, step, state):
        val = float(fns.eval(state["params"], val_batch))
        stream.position = step
        checkpointing.save(mngr, step, state, stream.state())
        with open(eval_path, "a") as f:
            logs.append_jsonl(f, {"step": step, "val_loss": val})
        return val

    with checkpointing.manager(workdir / "checkpoints") as mngr:
        start, state = _start(fns, mngr, stream, evaluate_and_save, metrics_path, eval_path)
        bar = progress.bar(config.steps, f"train {config.objective}", initial=start)
        if start:
            progress.note(f"resuming from checkpoint step {start} in {workdir / 'checkpoints'}")
        batches = Prefetch(stream, fns.batch_sharded, start, config.steps)
        try:
            with open(metrics_path, "a") as log:
                readback = Readback([log], bar, config.data.batch_size * config.data.seq_len,
                                    [workdir])

                def save(step, state):
                    return f"val loss {evaluate_and_save(mngr, step, state):.4f}"

                run_steps(fns.step, state, batches, readback, start, config.steps, save_steps,
                          save, progress, log_every)
        finally:
            batches.close()
            bar.close()
    return summarize(config, workdir)


def summarize(config: TrainConfig, workdir: pathlib.Path) -> TrainSummary:
    """The TrainSummary of the run in `workdir`, from its logs."""
    records = logs.read_metrics(workdir)
    return TrainSummary(objective=config.objective, final_step=config.steps,
                        first_loss=records[0]["loss"] if records else None,
                        final_loss=records[-1]["loss"] if records else None,
                        eval=logs.read_evals(workdir),
                        checkpoints=checkpointing.checkpoint_steps(config.steps,
                                                                   config.checkpoint_every))


def run_steps(step_fn: Callable, state, batches: Prefetch, readback: Readback, start: int,
              stop: int, save_steps: set[int], save: Callable[[int, Any], str],
              progress: Progress, log_every: int):
    """Steps [start, stop) of `step_fn` (state donated) on the prefetched `batches`; the metrics
    are read back every `log_every` steps and before each save. At a step in `save_steps`,
    `save(step, state)` checkpoints it and returns the note's validation text. Returns the last
    state; Ctrl-C raises `protocol.Interrupted` naming the step; HANG_ENV parks the loop."""
    hang_at = int(os.environ.get(HANG_ENV, "-1"))
    last_good, step = start, start
    try:
        for step in range(start, stop):
            if step == hang_at:
                readback.flush(last_good)
                progress.note(f"{HANG_ENV}={hang_at}: hanging before step {step}")
                while True:
                    time.sleep(1.0)
            state, metrics = step_fn(state, batches.get())
            readback.add(step, metrics)
            if step + 1 in save_steps:
                readback.flush(last_good)  # every step up to here is finite
                val = save(step + 1, state)
                readback.tick = time.perf_counter()  # the rate excludes the save
                last_good = step + 1
                progress.note(f"step {step + 1}: loss {readback.last_loss:.4f}, {val}, "
                              f"checkpoint saved")
            elif len(readback.pending) >= log_every:
                readback.flush(last_good)
        readback.flush(last_good)
    except KeyboardInterrupt:
        raise Interrupted(step) from None
    return state


def _start(fns: Compiled, mngr, stream, evaluate_and_save, metrics_path, eval_path):
    """(first step, state): the newest readable checkpoint (the logs cut back to it), or a fresh
    state saved as checkpoint 0 (the logs emptied)."""
    restored = checkpointing.restore_latest(mngr, fns.abstract)
    if restored is None:
        state = fns.init()
        logs.truncate_jsonl(metrics_path, 0)
        logs.truncate_jsonl(eval_path, 0)
        evaluate_and_save(mngr, 0, state)
        return 0, state
    start, state, data_state = restored
    if int(state["step"]) != start:
        raise ValueError(f"checkpoint {start} holds a state of step {int(state['step'])}")
    stream.restore(data_state)
    logs.truncate_jsonl(metrics_path, start)
    logs.truncate_jsonl(eval_path, start + 1)
    return start, state
