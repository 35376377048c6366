"""The depth sweep as a study of the protocol (`anisotropy_jax.protocol`;
experiments/depth.py).

  validate  the DepthConfig and the process options (jax.distributed)
  run       every chunk, one line each; the first process keeps them in workdir/chunks/
            (`report.ChunkStore`: a killed run computes only the missing chunks)
  write     `report.write` in the first process; nothing in the others
  format_report  the table, then the files written
"""
from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Mapping

import jax

from anisotropy_jax import results
from anisotropy_jax.configs.depth import DepthConfig, depth_config_from_mapping
from anisotropy_jax.protocol import Progress
from anisotropy_jax.studies.depth import grid, report


@dataclasses.dataclass(frozen=True)
class Plan:
    """The validated sweep and how to run it; `config` is the config as given (results.json)."""

    depth: DepthConfig
    config: Any
    workdir: pathlib.Path
    distributed: bool = False  # jax.distributed.initialize(...) first
    coordinator_address: str | None = None  # HOST:PORT, else auto-detected
    num_processes: int | None = None
    process_id: int | None = None


def validate(config: Any, workdir: pathlib.Path, distributed: bool = False,
             coordinator_address: str | None = None, num_processes: int | None = None,
             process_id: int | None = None) -> Plan:
    return Plan(depth_config_from_mapping(config), config, pathlib.Path(workdir), distributed,
                coordinator_address, num_processes, process_id)


@dataclasses.dataclass(frozen=True)
class Job:
    plan: Plan
    result: grid.DepthResult
    writer: bool  # the first process: it writes


def run(plan: Plan, progress: Progress) -> Job:
    cfg = plan.depth
    if plan.distributed:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU processes
        jax.distributed.initialize(plan.coordinator_address, plan.num_processes, plan.process_id)
    writer = jax.process_index() == 0
    store = report.ChunkStore(plan.workdir, cfg) if writer else None
    progress.say(f"depth sweep: {len(cfg.architectures)} architecture(s) × {len(cfg.widths)} "
                 f"width(s), {cfg.num_layers} layers, on {jax.device_count()} device(s) in "
                 f"{jax.process_count()} process(es); workdir {plan.workdir}")
    result = grid.run(cfg, store=store, progress=progress.within("depth"))
    return Job(plan, result, writer)


def write(job: Job, workdir: pathlib.Path, provenance: results.Provenance) -> dict | None:
    if not job.writer:
        return None
    return report.write(job.result, workdir, provenance, job.plan.config)


def format_report(doc: Mapping[str, Any], workdir: pathlib.Path) -> str:
    return (f"{report.format_table(doc)}\n"
            f"\nwrote {workdir}/results.json, results.npz, figures/ in {doc['seconds']:.1f} s "
            f"({doc['chunks_computed']} chunks computed, {doc['chunks_loaded']} loaded)")
