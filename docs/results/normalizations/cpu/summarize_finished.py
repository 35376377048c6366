"""The summary of the finished cells of a normalisation-grid workdir (those whose every seed has
its grid_run.json), with the study's own functions: for a grid that did not finish every cell.

  .venv/bin/python docs/results/normalizations/cpu/summarize_finished.py WORKDIR OUT
writes OUT/results.json (cells, runs), OUT/results.md, OUT/figures/normalizations.png and copies
each finished run's grid_run.json and eval.jsonl to OUT/<dataset>/<normalization>/seed_<s>/.
"""
import pathlib
import shutil
import sys

from anisotropy_jax import results
from anisotropy_jax.configs.normalizations import grid_config_from_mapping
from anisotropy_jax.configs import normalizations as normalization_settings
from anisotropy_jax.studies.normalizations import grid as grid_lib, summary

workdir, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
grid = grid_config_from_mapping(normalization_settings.get_config("cpu"))
cells, runs, missing = {}, {}, []
for dataset in grid.datasets:
    for norm in grid.normalizations:
        paths = [grid_lib.run_dir(workdir, dataset, norm, s) for s in grid.seeds]
        docs = [grid_lib.read_run(p, getattr(grid, dataset).steps) for p in paths]
        if None in docs:
            missing.append(f"{dataset}/{norm}")
            continue
        cells.setdefault(dataset, {})[norm] = summary.cell_summary(docs)
        runs.setdefault(dataset, {})[norm] = docs
        for p, s in zip(paths, grid.seeds):
            dest = out / dataset / norm / f"seed_{s}"
            dest.mkdir(parents=True, exist_ok=True)
            for name in (grid_lib.RUN_FILE, "eval.jsonl"):
                shutil.copy(p / name, dest / name)
doc = {"provenance": results.Provenance().finish(), "variant": "cpu",
       "units": summary.UNITS, "interval": summary.INTERVAL, "metrics": grid_lib.METRICS,
       "not_finished": missing, "cells": cells, "runs": runs}
results.write_text(out / "results.md", summary.markdown_table(cells))
results.save_figure(summary.figure(cells), out / "figures" / "normalizations.png")
results.write_json(out / "results.json", doc)
print(summary.markdown_table(cells)); print("not finished:", missing)
