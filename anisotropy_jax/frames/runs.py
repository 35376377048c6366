"""Training runs and checkpoint series as rows: a row per checkpoint step and hidden state (the
layer metrics), per step, layer and head (the head metrics), per step (losses, embedding and
final-norm metrics, the correlations across heads); the seeds of a `seeds` run, the normalisation
grid's cells and the embedding study's widths as more index columns.
"""
from __future__ import annotations

import pathlib
import re
from typing import Any, Callable

import numpy as np

from anisotropy_jax.frames.table import block, is_numeric, numbers
from anisotropy_jax.schema import SCHEMA_2_NORMALIZATION_NAMES

# Names that other studies give the same quantity (the sweep's and the extreme-token study's).
SAME_QUANTITY = {"sink_rate": "attention_sink_rate", "free_sink_rate": "attention_free_sink_rate",
                 "noop_score": "attention_noop_score",
                 "abs_cos_qk": "mean_query_key_abs_cosine"}


def renamed(metrics: dict[str, Any]) -> dict[str, Any]:
    """`metrics` under the names of SAME_QUANTITY."""
    return {SAME_QUANTITY.get(name, name): value for name, value in metrics.items()}


def _per_step(doc: dict[str, Any], steps: np.ndarray) -> dict[str, Any]:
    """The per-step scalars: embeddings, final_norm (as named: before_/after_ prefixes) and the
    correlations across heads ("rho/<term>", "p/<term>")."""
    out: dict[str, Any] = {}
    for group in ("embeddings", "final_norm"):
        out.update({k: v for k, v in (doc.get(group) or {}).items() if is_numeric(v)})
    for name, value in (doc.get("correlation") or {}).items():
        if isinstance(value, dict):
            out.update({f"{key}/{name}": value[key] for key in ("rho", "p") if key in value})
    return {k: v for k, v in out.items() if numbers(v).shape == steps.shape}


def training(doc: dict[str, Any], workdir: pathlib.Path, study: str = "train",
             **where: Any) -> list[Any]:
    """A training run's per-checkpoint analysis (train, dynamics) or a checkpoint series (series):
    layers (step, state), heads (step, layer, head), the per-step scalars and the validation
    loss."""
    steps = numbers(doc["steps"])
    frames = []
    layers = doc.get("layers") or {}
    if layers:
        num_states = numbers(next(iter(layers.values()))).shape[1]
        labels = doc.get("state_labels")
        frame = block([("step", steps), ("state", range(num_states))], layers, study=study,
                      **where)
        if labels is not None and len(labels) == num_states:
            frame = frame.assign(label=np.tile(np.asarray(labels, dtype=object), len(steps)))
        frames.append(frame)
    heads = doc.get("heads") or {}
    if heads:
        _, num_layers, num_heads = numbers(next(iter(heads.values()))).shape
        frames.append(block([("step", steps), ("layer", range(1, num_layers + 1)),
                             ("head", range(num_heads))], heads, study=study, **where))
    frames.append(block([("step", steps)], _per_step(doc, steps), study=study, **where))
    val = numbers([pair for pair in (doc.get("training") or {}).get("val_loss", [])])
    if val.size:
        frames.append(block([("step", val[:, 0])], {"val_loss": val[:, 1]}, study=study,
                            **where))
    return frames


def _seed_folders(workdir: pathlib.Path) -> dict[int, pathlib.Path]:
    found = {}
    for path in workdir.glob("seed_*/results.json"):
        match = re.fullmatch(r"seed_(\d+)", path.parent.name)
        if match:
            found[int(match.group(1))] = path.parent
    return dict(sorted(found.items()))


def seeds(doc: dict[str, Any], workdir: pathlib.Path, read: Callable[[pathlib.Path], Any]
          ) -> list[Any]:
    """A `seeds` run: every seed's training analysis (WORKDIR/seed_<s>), the seed as a column;
    where those folders are absent, the per-seed values of results.json's quantities, a row
    per (seed, step)."""
    folders = _seed_folders(workdir)
    if folders:
        frames = []
        for seed, folder in folders.items():
            frames += training(read(folder / "results.json"), folder, study="seeds", seed=seed)
        return frames
    steps, quantities = numbers(doc["steps"]), doc["quantities"]
    values = {name: q["per_seed"] for name, q in quantities.items() if "per_seed" in q}
    return [block([("seed", doc["seeds"]), ("step", steps)], values, study="seeds")]


def normalizations(doc: dict[str, Any], workdir: pathlib.Path,
                   read: Callable[[pathlib.Path], Any]) -> list[Any]:
    """The normalisation grid: a row per (dataset, normalization, seed, step) from each run's
    grid_run.json (every analysed checkpoint), or, where that file is absent, per seed at the
    last step from results.json's cells."""
    frames = []
    for dataset, cells in (doc.get("cells") or {}).items():
        for normalization, cell in cells.items():
            where = dict(study="normalizations", dataset=dataset, normalization=normalization)
            for index, seed in enumerate(cell.get("seeds", [])):
                run = _grid_run(workdir / dataset, normalization, seed)
                if run is not None:
                    series = read(run)
                    frames.append(block([("step", series["steps"])],
                                        renamed(series["series"]), seed=seed, **where))
                else:
                    last = {name: numbers(value["per_seed"])[index] for name, value in
                            cell.items() if isinstance(value, dict) and "per_seed" in value}
                    frames.append(block([], renamed(last), seed=seed, step=cell.get("step"),
                                        **where))
    return frames


def _grid_run(folder: pathlib.Path, normalization: str, seed: int) -> pathlib.Path | None:
    """A cell's grid_run.json, in the folder of its normalisation's name as written then (a
    document of schema 2 or older names 'sigmoid_per_query_bias' 'sigmoid': schema.py)."""
    older = [old for old, new in SCHEMA_2_NORMALIZATION_NAMES.items() if new == normalization]
    for name in (normalization, *older):
        path = folder / name / f"seed_{seed}" / "grid_run.json"
        if path.is_file():
            return path
    return None


def embeddings(doc: dict[str, Any], workdir: pathlib.Path) -> list[Any]:
    """The embedding study: a row per (width, seed, step) with every isotropy variant, the
    gain direction's differences ("gain_direction/<raw|centered>"), the matrices' statistics
    and the losses."""
    axes = [("width", doc["widths"]), ("seed", doc["seeds"]), ("step", doc["steps"])]
    values: dict[str, Any] = {}
    values.update({k: v["per_seed"] for k, v in doc.get("isotropy", {}).items()})
    values.update({f"gain_direction/{k}": v["per_seed"]
                   for k, v in doc.get("gain_direction", {}).items()})
    values.update(doc.get("stats", {}))
    values.update({k: doc[k] for k in ("val_loss", "train_loss") if k in doc})
    frames = [block(axes, values, study="embeddings")]
    if "run_seconds" in doc:
        frames.append(block(axes[:2], {"run_seconds": doc["run_seconds"]}, study="embeddings"))
    return frames
