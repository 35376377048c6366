"""Results as tables: `load(workdir)` reads a finished workdir of any study (its results.json,
through `schema.read_results`, so every schema reads under the current names, and results.npz or
the run's own files where they hold more) into one tidy pandas DataFrame: one row per study,
model, seed, layer or state, and s or step — whichever apply — and one column per metric, under
the name every study gives it (`metrics.LAYER_METRICS` for the per-layer metrics; the sweep's
site names, "output_cosine", for its block; the attention sinks as "attention_sink_rate",
"attention_free_sink_rate", "attention_noop_score" wherever measured). The index columns and
their meanings: `table.INDEX`. A folder without results.json whose subfolders hold results (a
report, docs/results/train/) is every subfolder's table, its path in the column "part".

pandas is optional (the `tables` and `test` extras): only `load` needs it.
"""
from __future__ import annotations

import json
import os
import pathlib
from typing import Any, Callable

from anisotropy_jax.frames import grids, models, runs
from anisotropy_jax.frames.table import INDEX, assemble, pandas
from anisotropy_jax.schema import RESULTS_SCHEMA_VERSION, read_results, schema_version

__all__ = ["INDEX", "SCHEMA_1_KEYS", "identify", "load", "pandas", "parts"]

# How results.json files of schema 1, written before provenance named the study, are told apart:
# the keys that only one study's document has, checked in this order. Newer files name their
# study (`provenance["study"]`) and are never guessed.
SCHEMA_1_KEYS = (("sweep", ("closed_forms", "runs")), ("depth", ("depth_config", "stacks")),
                 ("embeddings", ("embeddings_config",)), ("seeds", ("quantities", "interval")),
                 ("dynamics", ("objects", "heads")), ("series", ("checkpoints", "state_labels")),
                 ("extreme", ("extreme_config", "models")),
                 ("normalizations", ("grid_config", "cells")),
                 ("normalizations", ("cells", "not_finished")),  # summarised from finished runs
                 ("cross_modal", ("models", "skipped")),
                 ("pretrained", ("layers", "correlations", "model")))


def identify(doc: Any) -> str | None:
    """The study a results document is of: `provenance["study"]`, or for a file of schema 1 the
    study its keys tell (SCHEMA_1_KEYS); None when neither says."""
    if not isinstance(doc, dict):
        return None
    provenance = doc.get("provenance")
    if isinstance(provenance, dict) and "study" in provenance:
        name = provenance["study"]
        return name if isinstance(name, str) else None
    return next((name for name, keys in SCHEMA_1_KEYS if all(k in doc for k in keys)), None)


def _readers(read: Callable[[pathlib.Path], Any]) -> dict[str, Callable[..., list[Any]]]:
    """Study → f(doc, workdir) → blocks of rows."""
    return {
        "sweep": grids.sweep, "depth": grids.depth,
        "train": runs.training, "dynamics": lambda d, w: runs.training(d, w, study="train"),
        "series": lambda d, w: runs.training(d, w, study="series"),
        "seeds": lambda d, w: runs.seeds(d, w, read),
        "normalizations": lambda d, w: runs.normalizations(d, w, read),
        "embeddings": runs.embeddings, "pretrained": models.pretrained,
        "cross_modal": lambda d, w: models.cross_modal(d, w, read), "extreme": models.extreme,
    }


def parts(workdir: pathlib.Path) -> list[pathlib.Path]:
    """The subfolders (two levels at most) that hold a results.json, outermost first."""
    found = sorted(p.parent for p in workdir.glob("*/results.json"))
    found += sorted(p.parent for p in workdir.glob("*/*/results.json")
                    if p.parent.parent not in found)
    return found


def _blocks(workdir: pathlib.Path) -> list[Any]:
    path = workdir / "results.json"
    if not path.is_file():
        found = parts(workdir)
        if not found:
            raise FileNotFoundError(f"{workdir}: no results.json: not a finished run (a run "
                                    "writes it last), nor a folder of runs")
        frames = []
        for part in found:
            frames += [frame.assign(part=str(part.relative_to(workdir)))
                       for frame in _blocks(part)]
        return frames
    try:
        doc = read_results(path)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: unreadable ({error})") from None
    if schema_version(doc) > RESULTS_SCHEMA_VERSION:
        raise ValueError(f"{path}: results schema {schema_version(doc)}, newer than this "
                         f"anisotropy_jax reads (up to {RESULTS_SCHEMA_VERSION}); upgrade it")
    study = identify(doc)
    readers = _readers(read_results)
    if study not in readers:
        raise ValueError(f"{path}: not the results of a study of this package"
                         + (f" ({study!r})" if study else ""))
    try:
        return readers[study](doc, workdir)
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise ValueError(f"{path}: cannot read these {study} results as a table "
                         f"({type(error).__name__}: {error})") from None


def load(workdir: str | os.PathLike) -> Any:
    """A finished workdir (or a folder of them) as one tidy pandas DataFrame (module
    docstring). FileNotFoundError without results; ValueError, one line naming the file, for
    results of no study of this package or of a layout it cannot read."""
    workdir = pathlib.Path(workdir)
    if not workdir.is_dir():
        raise FileNotFoundError(f"{workdir}: no such folder")
    pandas()  # the one error that says how to install it, before any reading
    return assemble(_blocks(workdir))
