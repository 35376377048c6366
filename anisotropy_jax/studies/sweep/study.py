"""The bias sweep as a study of the protocol (`anisotropy_jax.protocol`): the main job,
experiments/sweep.py.

  validate  the config's sweeps (one, or a comparison of several) and the process options
  run       config.json first (what was attempted, even if the run fails), then every sweep, one
            line per chunk; the figure processes start before the sweeps, so that their imports
            overlap them, and stay with the `Job` that `write` takes
  write     `report.write` with those processes; nothing in a process other than the first
  format_report  every sweep's table, then the files written
"""
from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Callable, Mapping

import jax

from anisotropy_jax import results
from anisotropy_jax.configs.sweep import SweepConfig, sweep_configs_from_mapping
from anisotropy_jax.protocol import Progress
from anisotropy_jax.studies.sweep import grid, report


@dataclasses.dataclass(frozen=True)
class Plan:
    """The validated sweeps and how to run them; `config` is the config as given (config.json,
    results.json "config")."""

    sweeps: tuple[tuple[str, SweepConfig], ...]
    config: Any
    workdir: pathlib.Path
    distributed: bool = False  # jax.distributed.initialize() first (one process per host)
    figure_processes: int = -1  # -1: one per CPU core, at most one per figure; 0: this process


def validate(config: Any, workdir: pathlib.Path, distributed: bool = False,
             figure_processes: int = -1) -> Plan:
    return Plan(tuple(sweep_configs_from_mapping(config)), config, pathlib.Path(workdir),
                distributed, figure_processes)


@dataclasses.dataclass
class Job:
    """A finished run and the figure processes started with it (`write` uses and closes them).
    `runs` is None in a process other than the first of a multi-host run."""

    plan: Plan
    runs: dict[str, grid.SweepResult] | None
    figure_workers: results.FigureWorkers
    mark: Callable[[str], None]


def run(plan: Plan, progress: Progress) -> Job:
    if plan.distributed:
        jax.distributed.initialize()
    writer = jax.process_index() == 0
    if writer:
        report.write_config(plan.workdir, plan.config, list(plan.sweeps))
    progress.say(f"bias sweep: {len(plan.sweeps)} run(s) on {jax.device_count()} device(s) "
                 f"({jax.devices()[0].device_kind}); workdir {plan.workdir}")
    processes = report.figure_processes(plan.figure_processes) if writer else 0
    workers = results.FigureWorkers([report.PLOTTING_MODULE], processes)
    try:
        progress.mark("setup")
        runs = {label: grid.run(cfg, progress=progress.within(label))
                for label, cfg in plan.sweeps}
    except BaseException:
        workers.close()
        raise
    return Job(plan, runs if writer else None, workers, progress.mark)


def write(job: Job, workdir: pathlib.Path, provenance: results.Provenance) -> dict | None:
    with job.figure_workers:
        if job.runs is None:
            return None
        return report.write(job.runs, workdir, provenance, job.plan.config, mark=job.mark,
                            figure_workers=job.figure_workers)


def format_report(doc: Mapping[str, Any], workdir: pathlib.Path) -> str:
    tables = [report.format_table(run) for run in doc["runs"].values()]
    return "\n".join(tables + [
        f"\nwrote {workdir}/results.json, results.npz, config.json, figures/"
        f"{{cosine,norms,attention,query_key,categorical}}.png in "
        f"{doc['provenance']['wall_seconds']:.0f} s"])
