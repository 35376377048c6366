"""Pretrained models as rows: a row per (model, weights, seed, state) for the hidden states' metrics,
per (model, weights, seed, layer[, head]) for the attention metrics (extreme-token study), and
per (model, weights, seed) for the embedding matrices and the correlations across states.

"weights" is "trained" or "untrained" (the family's init, one row per untrained seed where the
file holds them; without them the untrained mean, seed empty).
"""
from __future__ import annotations

import pathlib
from typing import Any, Callable

from anisotropy_jax.frames.runs import renamed
from anisotropy_jax.frames.table import block, is_numeric, numbers


def _name(doc: dict[str, Any], workdir: pathlib.Path) -> str:
    """The model's name: its folder's (as the report names it), else the workdir's."""
    model_dir = pathlib.Path(str((doc.get("model") or {}).get("model_dir", "")))
    name = model_dir.name if model_dir.name not in ("model", "data", "") else model_dir.parent.name
    return name or workdir.name


def _states(metrics: dict[str, Any], labels: list[str] | None, **where: Any) -> Any:
    num_states = numbers(next(iter(metrics.values()))).shape[-1]
    frame = block([("state", range(num_states))], metrics, **where)
    if labels is not None and len(labels) == num_states:
        frame = frame.assign(label=list(labels))
    return frame


def _flat_scalars(groups: dict[str, Any]) -> dict[str, Any]:
    """{"<correlation>/<statistic>": number} of the correlations, {name: number} of the rest."""
    out = {}
    for name, value in groups.items():
        if isinstance(value, dict):
            out.update({f"{name}/{k}": v for k, v in value.items() if is_numeric(v)
                        and numbers(v).shape == ()})
        elif is_numeric(value) and numbers(value).shape == ():
            out[name] = value
    return out


def pretrained(doc: dict[str, Any], workdir: pathlib.Path, study: str = "pretrained",
               **where: Any) -> list[Any]:
    """The pretrained study: per state, trained and untrained (per seed where recorded); the
    embedding matrices' isotropy and the correlations across states per weights (and seed)."""
    where = {"model": _name(doc, workdir), **where}
    labels = (doc.get("model") or {}).get("state_labels")
    metrics, frames = doc.get("metrics") or {}, []
    seeds = doc.get("untrained_seeds") or {}
    for weights, values in metrics.items():
        if weights == "untrained" and seeds.get("metrics"):
            continue
        frames.append(_states(values, labels, study=study, weights=weights, **where))
        scalars = {**_flat_scalars((doc.get("correlations") or {}).get(weights, {})),
                   **_flat_scalars((doc.get("embeddings") or {}).get(weights, {}))}
        frames.append(block([], scalars, study=study, weights=weights, **where))
    for index, seed in enumerate(seeds.get("seeds", []) if seeds.get("metrics") else []):
        values = {k: numbers(v)[index] for k, v in seeds["metrics"].items()}
        frames.append(_states(values, labels, study=study, weights="untrained", seed=seed,
                              **where))
        scalars = {}
        for group in ("correlations", "embeddings"):
            per_seed = seeds.get(group) or {}
            if isinstance(per_seed, list) and index < len(per_seed):
                scalars.update(_flat_scalars(per_seed[index]))
        frames.append(block([], scalars, study=study, weights="untrained", seed=seed, **where))
    return frames


def cross_modal(doc: dict[str, Any], workdir: pathlib.Path,
                read: Callable[[pathlib.Path], Any]) -> list[Any]:
    """Every model of the cross-modal study: its pretrained analysis (the results.json in its
    subfolder) where the workdir holds it, else the summary's average cosine per state; with
    its modality, architecture and each state's relative depth."""
    frames = []
    for name, entry in (doc.get("models") or {}).items():
        where = dict(study="cross_modal", model=name, modality=entry.get("modality"),
                     architecture=entry.get("architecture"))
        labels, depth = entry.get("labels"), numbers(entry.get("depth", []))
        own = workdir / name / "results.json"
        if own.is_file():
            parts = pretrained(read(own), own.parent, **where)
        else:
            parts = [_states({"average_cosine": entry[w]}, labels, weights=w, **where)
                     for w in ("trained", "untrained") if w in entry]
        frames += [part.assign(relative_depth=depth[part["state"].to_numpy(dtype=int)])
                   if "state" in part.columns and len(depth) else part for part in parts]
    return frames


def _attention(values: dict[str, Any], **where: Any) -> list[Any]:
    """The extreme-token study's attention metrics per layer, and its head_* per head (named
    as the per-layer ones)."""
    per_layer = {k: v for k, v in values.items() if not k.startswith("head_") and is_numeric(v)}
    heads = {k.removeprefix("head_"): v for k, v in values.items() if k.startswith("head_")}
    num_layers = numbers(next(iter(per_layer.values()))).shape[0]
    frames = [block([("layer", range(1, num_layers + 1))], renamed(per_layer), **where)]
    if heads:
        num_heads = numbers(next(iter(heads.values()))).shape[1]
        frames.append(block([("layer", range(1, num_layers + 1)), ("head", range(num_heads))],
                            renamed(heads), **where))
    return frames


def _extreme_run(run: dict[str, Any], labels: list[str] | None, **where: Any) -> list[Any]:
    """One forward's attention (per layer, head) and states (per state; the top-k lists of
    massive activations and the top dimensions stay in results.json)."""
    states = {k: v for k, v in (run.get("states") or {}).items()
              if is_numeric(v) and numbers(v).ndim == 1}
    frames = _attention(run["attention"], **where) if run.get("attention") else []
    if states:
        frames.append(_states(states, labels, **where))
    return frames


def _intervention(name: str, entry: dict[str, Any]) -> list[Any]:
    """The intervention variant (`measure='intervention'`): per block (from 1) and sequence, the
    unmodified attention's entropy, max weight and row cosine (arm 'baseline'), each arm's
    change of them (arm '<arm>/<mean>/<norm>') and the random-direction control's mean change
    (arm 'random/<mean>/<norm>')."""
    frames = []
    for layer in entry["layers"]:
        arms = {"baseline": layer["baseline"], **layer["arms"],
                **{f"random/{k}": v["per_sequence"] for k, v in layer["random"].items()}}
        for arm, metrics in arms.items():
            frames.append(block([("sequence", range(len(next(iter(metrics.values())))))],
                                metrics, study="extreme", model=name,
                                layer=layer["layer"] + 1, arm=arm))
    return frames


def extreme(doc: dict[str, Any], workdir: pathlib.Path) -> list[Any]:
    """The extreme-token study: per model and input kind, the trained weights and every
    untrained seed; for the intervention variant, per block, arm and sequence."""
    frames = []
    for name, entry in (doc.get("models") or {}).items():
        if "layers" in entry and "inputs" not in entry:
            frames += _intervention(name, entry)
            continue
        labels = (entry.get("model") or {}).get("state_labels")
        for kind, measured in (entry.get("inputs") or {}).items():
            where = dict(study="extreme", model=name, inputs=kind)
            if measured.get("trained"):
                frames += _extreme_run(measured["trained"], labels, weights="trained", **where)
            untrained = measured.get("untrained") or {}
            for seed, run in zip(untrained.get("seeds", []), untrained.get("per_seed", [])):
                frames += _extreme_run(run, labels, weights="untrained", seed=seed, **where)
    return frames

