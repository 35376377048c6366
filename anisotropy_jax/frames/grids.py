"""The untrained-block grids as rows: the bias sweep (a row per run, seed and s; its per-head
metrics per head) and the depth study (a row per stack, seed, s and layer).

The sweep's results.json holds every scalar metric per seed (the position-free sink rate
`attention_free_sink_rate` only there); results.npz the per-head vectors. The depth study's
results.npz holds every seed; its results.json only the mean over seeds (`seed` then empty), read
when the npz is absent (as in docs/results/depth/).
"""
from __future__ import annotations

import pathlib
import re
from typing import Any

import numpy as np

from anisotropy_jax.frames.table import block, numbers

# Depth: the residual-stream metrics measured on the stack's input too (layer 0).
STREAM_METRICS = ("effective_rank", "rank1_residual", "residual_rms")


def _npz(workdir: pathlib.Path, name: str) -> dict[str, np.ndarray] | None:
    path = workdir / name
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as arrays:
        return {key: arrays[key] for key in arrays.files}


def _safe_name(label: str) -> str:
    """The sweep's results.npz key prefix of a run label (studies/sweep/report.py)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_")


def sweep(doc: dict[str, Any], workdir: pathlib.Path) -> list[Any]:
    """A row per (run, seed, s): every metric's per-seed values, and `reliable` (the run's
    rounding bound below its threshold at that s); a row per head for the per-head metrics of
    results.npz."""
    runs = doc.get("runs") or {"": doc}
    arrays = _npz(workdir, "results.npz") or {}
    frames = []
    for label, run in runs.items():
        norms = numbers(run["bias_norms"])
        per_seed = {name: value["per_seed"] for name, value in run["metrics"].items()
                    if isinstance(value, dict) and "per_seed" in value}
        seeds = range(len(next(iter(per_seed.values()))))
        reliable = numbers(run["reliable"]) if "reliable" in run else np.full(len(norms), np.nan)
        frames.append(block([("seed", seeds), ("s", norms)],
                            {**per_seed, "reliable": np.broadcast_to(reliable, (len(seeds),
                                                                                len(norms)))},
                            study="sweep", run=label))
        prefix = f"{_safe_name(label)}__per_head__"
        heads = {k.removeprefix(prefix): v for k, v in arrays.items() if k.startswith(prefix)}
        if heads:
            num_heads = next(iter(heads.values())).shape[-1]
            frames.append(block([("seed", seeds), ("s", norms), ("head", range(num_heads))],
                                heads, study="sweep", run=label))
    return frames


def depth(doc: dict[str, Any], workdir: pathlib.Path) -> list[Any]:
    """A row per (stack, seed, s, layer): layer l ≥ 1 the l-th block (its input_*, attention_*,
    output_* sites and the residual-stream metrics of its output), layer 0 the stack's input
    (the residual-stream metrics); a row per head for the per-head metrics; the depth at which
    the cosine passes its threshold per (stack, seed, s)."""
    norms = numbers(doc["bias_norms"])
    arrays = _npz(workdir, "results.npz")
    frames = []
    for name, stack in doc["stacks"].items():
        where = dict(study="depth", run=name, architecture=stack.get("architecture"),
                     width=stack.get("width"))
        if arrays is not None:
            frames += _depth_seeds(arrays, name, norms, where)
        else:
            frames += _depth_means(stack, norms, where)
            exceeded = stack.get("range_exceeded_layer")
            if exceeded is not None:  # (seeds, s): the first layer past float32's range, 0 none
                frames.append(block([("seed", range(len(exceeded))), ("s", norms)],
                                    {"range_exceeded_layer": exceeded}, **where))
        for key, value in stack.items():
            if key.startswith("depth_to_cosine") and isinstance(value, dict):
                per_seed = numbers(value["per_seed"])
                frames.append(block([("seed", range(per_seed.shape[0])), ("s", norms)],
                                    {key: per_seed}, **where))
    return frames


def _depth_seeds(arrays: dict[str, np.ndarray], name: str, norms: np.ndarray,
                 where: dict[str, Any]) -> list[Any]:
    prefix = f"{name}__"
    inputs = {k.removeprefix(prefix + "input__"): v for k, v in arrays.items()
              if k.startswith(prefix + "input__")}
    heads = {k.removeprefix(prefix + "per_head__"): v for k, v in arrays.items()
             if k.startswith(prefix + "per_head__")}
    layers = {k.removeprefix(prefix): v for k, v in arrays.items()
              if k.startswith(prefix) and not k.startswith((prefix + "input__",
                                                            prefix + "per_head__"))}
    seeds_x_s = next(iter(inputs.values())).shape
    seeds, num_layers = range(seeds_x_s[0]), next(iter(layers.values())).shape[2]
    frames = [block([("seed", seeds), ("s", norms), ("layer", range(1, num_layers + 1))], layers,
                    **where),
              block([("seed", seeds), ("s", norms)],
                    {k: v for k, v in inputs.items() if k in STREAM_METRICS}, layer=0, **where),
              block([("seed", seeds), ("s", norms)],
                    {k: v for k, v in inputs.items() if k not in STREAM_METRICS}, **where)]
    if heads:
        num_heads = next(iter(heads.values())).shape[-1]
        frames.append(block([("seed", seeds), ("s", norms), ("layer", range(1, num_layers + 1)),
                             ("head", range(num_heads))], heads, **where))
    return frames


def _depth_means(stack: dict[str, Any], norms: np.ndarray, where: dict[str, Any]) -> list[Any]:
    """results.json alone: the mean over seeds per layer (seed empty), the input's
    residual-stream metrics from the curves' depth 0."""
    per_layer = stack["per_layer"]
    num_layers = numbers(next(iter(per_layer.values()))).shape[1]
    curves = {k: numbers(v["mean"])[:, 0] for k, v in stack.get("curves", {}).items()
              if k in STREAM_METRICS}
    return [block([("s", norms), ("layer", range(1, num_layers + 1))], per_layer, **where),
            block([("s", norms)], curves, layer=0, **where)]
