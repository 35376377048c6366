"""The layout of a checkpoint series: one sub-folder per training step, each a Hugging Face
directory of one registered family (models/registry.py), checked before anything is compiled.

Accepted sub-folder names (case-sensitive): `step_N`, `step-N`, `stepN` (Pythia revisions such as
`step143000`), `checkpoint-N`, `checkpoint_N` (Hugging Face Trainer), or a plain integer `N`,
where N is the step. Regular files (README, export.json) and hidden entries (`.name`) are
ignored; any other folder is an error, as are two folders of one step, a folder without
config.json or weights, a GGUF folder, and checkpoints whose model_type, architecture
(`family.summary`), tensor names/shapes or tokenizer.json differ. Every error is one line
naming the folder (or file), raised as a ConfigError of the field `series_dir`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import re
from types import ModuleType
from typing import Any

from anisotropy_jax.config import ConfigError
from anisotropy_jax.models.formats import checkpoint, gguf
from anisotropy_jax.models import registry

STEP_NAME = re.compile(r"^(?:step[_-]?|checkpoint[_-])?(\d+)$")
NAME_HELP = "step_N, step-N, stepN, checkpoint-N, checkpoint_N or N"


class SeriesError(ConfigError):
    """A series directory cannot be used; one line naming the folder or file."""


def _error(message: str) -> SeriesError:
    return SeriesError(f"series_dir: {message}")


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    step: int
    path: pathlib.Path


@dataclasses.dataclass(frozen=True)
class Series:
    """Checked checkpoints by ascending step, their family, config and parsed config.json (of
    the first checkpoint; every other has the same architecture), and the tokenizer.json used."""

    directory: pathlib.Path
    checkpoints: tuple[Checkpoint, ...]
    family: ModuleType
    config: Any
    hf_config: dict[str, Any]
    tokenizer_dir: pathlib.Path

    @property
    def steps(self) -> list[int]:
        return [c.step for c in self.checkpoints]


def step_of(name: str) -> int | None:
    """The step of a sub-folder name (module docstring), None when it is not one."""
    match = STEP_NAME.match(name)
    return int(match.group(1)) if match else None


def scan(directory: str | pathlib.Path) -> list[Checkpoint]:
    """The step folders of `directory`, by ascending step (names only; SeriesError on a
    missing/empty directory, a folder that is not a step name, or a repeated step)."""
    directory = pathlib.Path(directory)
    if not directory.is_dir():
        raise _error(f"{directory}: not a directory")
    found: dict[int, pathlib.Path] = {}
    for entry in sorted(directory.iterdir()):
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        step = step_of(entry.name)
        if step is None:
            raise _error(f"{entry}: not a checkpoint folder name (expected {NAME_HELP})")
        if step in found:
            raise _error(f"{entry}: step {step} already given by {found[step]}")
        found[step] = entry
    if not found:
        raise _error(f"{directory}: no checkpoint folders (expected sub-folders {NAME_HELP})")
    return [Checkpoint(step, found[step]) for step in sorted(found)]


def tensor_shapes(model_dir: pathlib.Path) -> dict[str, tuple[int, ...]]:
    """Tensor name → shape from the safetensors headers (no data read; shards via the index).
    SeriesError naming the file when it is missing, unreadable or truncated."""
    from safetensors import safe_open  # optional dependency: extra "pretrained"

    single, index = model_dir / checkpoint.WEIGHTS_FILE, model_dir / checkpoint.WEIGHTS_INDEX_FILE
    if single.is_file():
        files = [single]
    elif index.is_file():
        try:
            weight_map = json.loads(index.read_text()).get("weight_map", {})
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as e:
            raise _error(f"{index}: not a valid index ({e})") from None
        files = [model_dir / f for f in sorted(set(weight_map.values()))]
    else:
        raise _error(f"{model_dir}: missing {checkpoint.WEIGHTS_FILE}")
    shapes: dict[str, tuple[int, ...]] = {}
    for f in files:
        try:
            with safe_open(str(f), framework="numpy") as handle:
                for name in handle.keys():
                    shapes[name] = tuple(handle.get_slice(name).get_shape())
        except Exception as e:  # safetensors raises its own error types
            raise _error(f"{f}: cannot read safetensors ({type(e).__name__}: "
                         f"{' '.join(str(e).split())})") from None
    return shapes


def _digest(path: pathlib.Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def check(directory: str | pathlib.Path, precision: str = "highest") -> Series:
    """Every check of the module docstring, reading config files and safetensors headers only."""
    checkpoints = scan(directory)
    first = None
    tokenizers: dict[str, pathlib.Path] = {}
    for ckpt in checkpoints:
        if gguf.find_gguf(ckpt.path) is not None:
            raise _error(f"{ckpt.path}: GGUF checkpoints are not supported in a series")
        try:
            read = registry.read_config(ckpt.path, precision)
            fam, cfg, hf = read.family, read.config, read.hf_config
        except ConfigError as e:
            raise _error(f"{ckpt.path}: {e}") from None
        shapes = tensor_shapes(ckpt.path)
        if first is None:
            first = (ckpt, fam, cfg, hf, shapes)
        elif fam is not first[1] or fam.summary(cfg) != fam.summary(first[2]):
            raise _error(f"{ckpt.path}: model_type {hf.get('model_type')!r} "
                         f"{fam.summary(cfg)} differs from {first[0].path} "
                         f"({first[3].get('model_type')!r} {first[1].summary(first[2])})")
        elif shapes != first[4]:
            diff = sorted(set(shapes.items()) ^ set(first[4].items()))[0]
            raise _error(f"{ckpt.path}: tensors differ from {first[0].path} (e.g. {diff[0]})")
        digest = _digest(ckpt.path / checkpoint.TOKENIZER_FILE)
        if digest is not None:
            tokenizers.setdefault(digest, ckpt.path)
        if len(tokenizers) > 1:
            raise _error(f"{ckpt.path / checkpoint.TOKENIZER_FILE}: differs from "
                         f"{next(iter(tokenizers.values())) / checkpoint.TOKENIZER_FILE}")
    if not tokenizers:
        raise _error(f"{directory}: no checkpoint has a {checkpoint.TOKENIZER_FILE}")
    ckpt, fam, cfg, hf, _ = first
    return Series(pathlib.Path(directory), tuple(checkpoints), fam, cfg, hf,
                  next(iter(tokenizers.values())))
