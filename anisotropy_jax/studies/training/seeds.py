"""Several seeds of one configuration trained as one program: `train_seeds(configs, workdirs)`.

The seeds' states are stacked on a leading seed axis and one jitted `jax.vmap` of `train_step`
updates them all (state donated), so S small models fill a device that one leaves idle. Each
seed keeps everything a single run has (`loop.train`): its own data stream (data.seed), its
workdir with config.json, metrics.jsonl, eval.jsonl and orbax checkpoints at the same steps, the
finite check before every save, and resume. Seeds that stand at different checkpoints (one
killed earlier than another) train in groups, one program per starting step; finished seeds are
left as they are. tokens_per_s in each seed's metrics.jsonl is that seed's own rate (its B·L
tokens per step); the S seeds together process S times as many.

Layout (`seeds_layout`): with S a multiple of the device count the seed axis is split over the
devices (each trains whole seeds, no communication); otherwise every seed's batch is split over
the devices ("data", as one run's) and the stacked states are replicated.

The losses equal the seeds' sequential runs within float32 rounding, not bit for bit: under vmap
XLA lowers the model's matmuls as batched products, whose summation order differs
(tests/test_seeds_vmapped.py bounds the difference).
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import pathlib
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from anisotropy_jax import checkpointing, data as data_lib
from anisotropy_jax.config import AnalysisConfig, ConfigError, TrainConfig, attention_core_note
from anisotropy_jax.protocol import SILENT, Progress
from anisotropy_jax.studies.training import logs
from anisotropy_jax.studies.training.loop import (LOG_EVERY, Prefetch, Readback, TrainSummary,
                                                  run_steps, summarize)
from anisotropy_jax.studies.training.optimizers import learning_rate_schedule
from anisotropy_jax.studies.training.step import (abstract_state, check_devices, eval_loss,
                                                  init_state, train_step)


def seeds_layout(num_seeds: int, devices: Sequence[Any] | None = None
                 ) -> tuple[NamedSharding, NamedSharding]:
    """(sharding of the stacked states and per-seed metrics, sharding of the stacked batches
    (S, B, ...)) over `devices` (default: all)."""
    devices = list(jax.devices() if devices is None else devices)
    if num_seeds % len(devices) == 0:
        mesh = Mesh(np.array(devices), ("seeds",))
        return NamedSharding(mesh, P("seeds")), NamedSharding(mesh, P("seeds"))
    mesh = Mesh(np.array(devices), ("data",))
    return NamedSharding(mesh, P()), NamedSharding(mesh, P(None, "data"))


@dataclasses.dataclass(frozen=True)
class SeedsCompiled:
    """The jitted functions of a group of seeds and the shardings of their arguments; `init`
    takes one seed and returns its (unstacked) fresh state, `abstract` is one seed's state."""

    init: Callable[[int], Any]
    step: Callable
    eval: Callable
    abstract: Any
    stacked: NamedSharding
    batch_sharded: NamedSharding


def compile_seeds(config: TrainConfig, num_seeds: int) -> SeedsCompiled:
    """The vmapped step (state donated) and eval of `num_seeds` seeds of `config` (any one of
    them: the seed changes neither the model nor the optimiser), and the per-seed init."""
    stacked, batch_sharded = seeds_layout(num_seeds)
    abstract, model, tx = abstract_state(config)
    schedule = learning_rate_schedule(config.optim, config.steps)
    step = jax.jit(jax.vmap(functools.partial(train_step, model=model, tx=tx, schedule=schedule)),
                   in_shardings=(stacked, batch_sharded), out_shardings=(stacked, stacked),
                   donate_argnums=0)
    eval_fn = jax.jit(jax.vmap(functools.partial(eval_loss, model=model)),
                      in_shardings=(stacked, batch_sharded), out_shardings=stacked)
    # The init of `loop.compile_run` with the seed traced (one compilation for every seed), one
    # seed at a time: bit for bit the parameters of a single run (tests/test_seeds_vmapped.py).
    init = jax.jit(functools.partial(init_state, model, tx), static_argnums=1)
    return SeedsCompiled(lambda seed: init(jnp.int32(seed), config.data.seq_len), step, eval_fn,
                         abstract, stacked, batch_sharded)


def check_same_run(configs: Sequence[TrainConfig]) -> None:
    """The configs must differ only in seed and data.seed (one program trains them all), and
    name distinct runs."""
    def without_seeds(c: TrainConfig) -> TrainConfig:
        return dataclasses.replace(c, seed=0, data=dataclasses.replace(c.data, seed=0))

    for config in configs[1:]:
        if without_seeds(config) != without_seeds(configs[0]):
            raise ConfigError("seeds: the runs trained together may differ only in seed and "
                              "data.seed")
    pairs = [(c.seed, c.data.seed) for c in configs]
    if len(set(pairs)) != len(pairs):
        raise ConfigError(f"seeds: (seed, data.seed) repeats among {pairs}")


class _StackedStream:
    """The seeds' data streams as one: `batch_at(step)` stacks each seed's batch (S, B, ...)."""

    def __init__(self, streams: Sequence[data_lib.BatchIterator]):
        self.streams = streams

    def batch_at(self, step: int) -> dict[str, np.ndarray]:
        return _stack_batches([stream.batch_at(step) for stream in self.streams])


def _stack_batches(batches: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {key: np.stack([b[key] for b in batches]) for key in batches[0]}


@dataclasses.dataclass
class _Seed:
    """One seed's run: its config, workdir, stream, checkpoint manager and where it starts."""

    config: TrainConfig
    workdir: pathlib.Path
    stream: data_lib.BatchIterator
    mngr: Any = None
    start: int = 0
    state: Any = None  # the restored state, None for a fresh run

    @property
    def paths(self) -> tuple[pathlib.Path, pathlib.Path]:
        return self.workdir / logs.METRICS_FILE, self.workdir / logs.EVAL_FILE

    def resume(self, abstract: Any) -> None:
        """The newest readable checkpoint (the logs cut back to it), or a fresh start at 0 (the
        logs emptied), as `loop.train` does."""
        metrics_path, eval_path = self.paths
        restored = checkpointing.restore_latest(self.mngr, abstract)
        if restored is None:
            logs.truncate_jsonl(metrics_path, 0)
            logs.truncate_jsonl(eval_path, 0)
            return
        self.start, self.state, data_state = restored
        if int(self.state["step"]) != self.start:
            raise ValueError(f"checkpoint {self.start} holds a state of step "
                             f"{int(self.state['step'])}")
        self.stream.restore(data_state)
        logs.truncate_jsonl(metrics_path, self.start)
        logs.truncate_jsonl(eval_path, self.start + 1)


def _stack(trees: Sequence[Any], sharding: NamedSharding) -> Any:
    return jax.device_put(jax.tree.map(lambda *xs: jnp.stack(xs), *trees), sharding)


def _save_all(fns: SeedsCompiled, group: Sequence[_Seed], val_batches, step: int, state,
              only: Sequence[int] | None = None) -> str:
    """Evaluates every seed (one vmapped call) and saves each seed's slice of the stacked state
    as its checkpoint `step` (only the seeds `only` when given); returns the note's text."""
    vals = jax.device_get(fns.eval(state["params"], val_batches))
    for i, seed in enumerate(group):
        if only is not None and i not in only:
            continue
        seed.stream.position = step
        checkpointing.save(seed.mngr, step, jax.tree.map(lambda x, i=i: x[i], state),
                           seed.stream.state())
        with open(seed.paths[1], "a") as f:
            logs.append_jsonl(f, {"step": step, "val_loss": float(vals[i])})
    return "val loss " + " ".join(f"{v:.4f}" for v in vals)


def _train_group(group: Sequence[_Seed], progress: Progress, log_every: int) -> None:
    """Trains the seeds of `group` (all at the same start step) together to config.steps."""
    config, start = group[0].config, group[0].start
    fns = compile_seeds(config, len(group))
    val_batches = jax.device_put(_stack_batches(
        [s.stream.validation_batch(config.eval_batch_size) for s in group]), fns.batch_sharded)
    save_steps = set(checkpointing.checkpoint_steps(config.steps, config.checkpoint_every))
    fresh = [i for i, s in enumerate(group) if s.state is None]  # no checkpoint yet
    state = _stack([fns.init(s.config.seed) if s.state is None else s.state for s in group],
                   fns.stacked)
    for s in group:
        s.state = None  # the stacked copy is the state now
    if fresh:
        _save_all(fns, group, val_batches, 0, state, only=fresh)
    names = ",".join(str(s.config.seed) for s in group)
    bar = progress.bar(config.steps, f"train {config.objective} seeds {names}", initial=start)
    if start:
        progress.note(f"seeds {names}: resuming from checkpoint step {start}")
    batches = Prefetch(_StackedStream([s.stream for s in group]), fns.batch_sharded, start,
                       config.steps)
    try:
        with contextlib.ExitStack() as files:
            metric_logs = [files.enter_context(open(s.paths[0], "a")) for s in group]
            readback = Readback(metric_logs, bar, config.data.batch_size * config.data.seq_len,
                                [s.workdir for s in group], stacked=True)
            run_steps(fns.step, state, batches, readback, start, config.steps, save_steps,
                      functools.partial(_save_all, fns, group, val_batches), progress, log_every)
    finally:
        batches.close()
        bar.close()


def train_seeds(configs: Sequence[TrainConfig], workdirs: Sequence[str | pathlib.Path], *,
                progress: Progress = SILENT, analyses: Sequence[AnalysisConfig | None] | None = None,
                log_every: int = LOG_EVERY) -> list[TrainSummary]:
    """Trains (or resumes) the run of configs[i] in workdirs[i] for every i, the seeds that
    start at the same checkpoint as one vmapped program; returns their summaries (in order).

    The configs may differ only in seed and data.seed (ConfigError otherwise). Everything else is
    as `loop.train` for each run: config.json (with analyses[i]), the same logs and checkpoints,
    ConfigError for a workdir holding another config, FloatingPointError naming the seed's workdir
    on a non-finite step (no seed saves past it), `protocol.Interrupted` on Ctrl-C.
    """
    check_same_run(configs)
    check_devices(configs[0])
    analyses = list(analyses) if analyses is not None else [None] * len(configs)
    seeds = []
    for config, workdir, analysis in zip(configs, workdirs, analyses):
        workdir = pathlib.Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        logs.check_same_config(workdir, config)
        logs.write_config(workdir, config, analysis)
        seeds.append(_Seed(config, workdir, data_lib.BatchIterator(config.data)))
    progress.note(attention_core_note(configs[0].model, jax.default_backend()))
    abstract = abstract_state(configs[0])[0]
    with contextlib.ExitStack() as managers:
        groups: dict[int, list[_Seed]] = collections.defaultdict(list)
        for seed in seeds:
            seed.mngr = managers.enter_context(checkpointing.manager(seed.workdir / "checkpoints"))
            seed.resume(abstract)
            if seed.start < seed.config.steps:
                groups[seed.start].append(seed)
        for start in sorted(groups):
            _train_group(groups[start], progress, log_every)
    return [summarize(seed.config, seed.workdir) for seed in seeds]
