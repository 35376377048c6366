"""The normalisation grid as a study of the protocol: validate → run → write → format_report.

  validate  the grid config (config/normalizations.py); every normalisation must be one of
            models/attention.py NORMALIZATIONS, every training config valid on these devices, its
            data readable and no finished run in the workdir of another normalisation (an older
            version's 'sigmoid') — before anything is compiled
  run       cell by cell (dataset, normalisation): the seeds trained as one program, analysed at
            every checkpoint (`grid.run_cell`; resumable: finished runs are kept)
  write     results.json (summary over seeds per cell, last), results.md, figures/normalizations.png
"""
from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Mapping

from anisotropy_jax import data as data_lib, results
from anisotropy_jax.config import ConfigError
from anisotropy_jax.configs.normalizations import NormalizationGridConfig, grid_config_from_mapping
from anisotropy_jax.models.attention import NORMALIZATIONS
from anisotropy_jax.protocol import Progress, Study
from anisotropy_jax.studies import training
from anisotropy_jax.studies.normalizations import grid as grid_lib, summary


@dataclasses.dataclass(frozen=True)
class Plan:
    grid: NormalizationGridConfig
    workdir: pathlib.Path


def validate(config: Any, workdir: pathlib.Path) -> Plan:
    grid = grid_config_from_mapping(config)
    missing = [n for n in grid.normalizations if n not in NORMALIZATIONS]
    if missing:
        raise ConfigError(f"normalizations: {missing} not in models/attention.py NORMALIZATIONS "
                          f"{tuple(NORMALIZATIONS)}")
    for dataset in grid.datasets:
        for norm in grid.normalizations:
            train = grid.train_config(dataset, norm, grid.seeds[0])  # validates the block
            training.check_devices(train)
        data_lib.BatchIterator(getattr(grid, dataset).data)  # the corpus is readable
    grid_lib.check_workdir(grid, pathlib.Path(workdir))
    return Plan(grid, pathlib.Path(workdir))


def run(plan: Plan, progress: Progress) -> dict[str, Any]:
    """{"cells": {dataset: {normalization: cell summary}}, "runs": the seeds' grid_run.json}."""
    grid, cells, runs = plan.grid, {}, {}
    total = len(grid.datasets) * len(grid.normalizations)
    for dataset in grid.datasets:
        cells[dataset], runs[dataset] = {}, {}
        for norm in grid.normalizations:
            index = len(runs[dataset]) + grid.datasets.index(dataset) * len(grid.normalizations)
            progress.say(f"cell {index + 1}/{total}: {dataset}, {norm}, seeds "
                         f"{','.join(map(str, grid.seeds))}")
            docs = grid_lib.run_cell(grid, plan.workdir, dataset, norm, progress)
            runs[dataset][norm] = docs
            cells[dataset][norm] = summary.cell_summary(docs)
            progress.say(f"  val loss {cells[dataset][norm]['val_loss']['mean']:.4f}, sink rate "
                         f"{cells[dataset][norm]['sink_rate']['mean']:.3f}")
    return {"grid": grid, "cells": cells, "runs": runs}


def write(result: Mapping[str, Any], workdir: pathlib.Path, provenance: results.Provenance
          ) -> dict[str, Any]:
    workdir = pathlib.Path(workdir)
    doc = {"provenance": provenance.finish("normalizations"),
           "grid_config": dataclasses.asdict(result["grid"]),
           "units": summary.UNITS, "interval": summary.INTERVAL, "metrics": grid_lib.METRICS,
           "layout": "<dataset>/<normalization>/seed_<s>/ (training run, dynamics.npz, "
                     f"{grid_lib.RUN_FILE}: the metrics per checkpoint)",
           "cells": result["cells"],
           "runs": {d: {n: [{k: r[k] for k in ("seed", "steps", "loss_floor", "series")}
                            for r in docs] for n, docs in by.items()}
                    for d, by in result["runs"].items()}}
    results.write_text(workdir / "results.md", summary.markdown_table(result["cells"]))
    results.save_figure(summary.figure(result["cells"]), workdir / "figures" / "normalizations.png")
    results.write_json(workdir / "results.json", doc)
    return doc


def format_report(doc: Mapping[str, Any], workdir: pathlib.Path) -> str:
    return (f"{summary.markdown_table(doc['cells'])}\nwrote {pathlib.Path(workdir) / 'results.json'}"
            f", results.md, figures/normalizations.png")


STUDY = Study(validate, run, write, format_report, quiet_logs=True)
