"""Reading a folder of extreme-token results (`load`): one results.json per model, or one of all,
and later runs in subfolders that add to a model what its first run lacks."""
from __future__ import annotations

import pathlib
from typing import Any

from anisotropy_jax import results
from anisotropy_jax.configs.extreme import EXTREME_MODELS


def add_missing(into: Any, other: Any) -> None:
    """Adds to the dict `into`, in place, every key of `other` it lacks, recursing into the dicts
    (and the lists of dicts, element by element) that both have; nothing `into` has is changed."""
    if isinstance(into, dict) and isinstance(other, dict):
        for key, value in other.items():
            if key not in into:
                into[key] = value
            else:
                add_missing(into[key], value)
    elif isinstance(into, list) and isinstance(other, list) and len(into) == len(other):
        for a, b in zip(into, other):
            if isinstance(a, dict):
                add_missing(a, b)


def load(folder: str | pathlib.Path) -> dict[str, dict[str, Any]]:
    """{model name: its results.json entry} over every results.json under `folder`, in the order
    of EXTREME_MODELS. A model in several files (a later run, in a subfolder) is its shallowest
    file's entry (then the first by path), to which each other file adds what it lacks
    (`add_missing`: input kinds, and the metrics of a kind that a later code measures); no
    number of the first entry is replaced."""
    found: dict[str, dict[str, Any]] = {}
    paths = sorted(pathlib.Path(folder).rglob("results.json"), key=lambda p: (len(p.parts), p))
    for path in paths:
        for name, entry in results.read_results(path)["models"].items():
            if name not in found:
                found[name] = entry
            else:
                add_missing(found[name]["inputs"], entry["inputs"])
    order = [n for n in EXTREME_MODELS if n in found] + sorted(set(found) - set(EXTREME_MODELS))
    return {name: found[name] for name in order}
