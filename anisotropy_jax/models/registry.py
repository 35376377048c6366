"""Model families by Hugging Face `model_type`, and loading a local checkpoint of any of them.

A family is a `models.family.Family` value, `FAMILY`, at the end of a module of
`anisotropy_jax.models.families`; the registry finds it by importing every module of that package
(pkgutil), so a new family needs no edit here (docs/EXTENDING.md).

`read_config(model_dir)` reads a checkpoint's config once, into a `Checkpoint`: a Hugging Face
directory (config.json; the family by its model_type), or a file of a native format that a family
declares (`Family.native_formats`: a GGUF file / a directory holding exactly one .gguf and no
config.json, an ONNX file, a CTranslate2 directory: model.bin or its parts), the family found by
what the file holds (GGUF architecture, CTranslate2 spec). The registry names no family and no
format's content. An installed offline model can be named instead of a path (`resolve`:
"minilm-l6", "smollm2", "gemma3", ...; models/packaged.py). `load(checkpoint or model_dir)` then
reads the weights (safetensors, one file or shards, or the native file) and returns a
`LoadedModel`. Files only: nothing is compiled.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import pathlib
import pkgutil
from typing import Any

import jax
import numpy as np

from anisotropy_jax.models import packaged
from anisotropy_jax.models.family import Family, TextEncoder
from anisotropy_jax.models.formats import checkpoint
from anisotropy_jax.models.formats.checkpoint import CONFIG_FILE, NativeFormat, PretrainedError

__all__ = ["Checkpoint", "Family", "LoadedModel", "PretrainedError", "TextEncoder", "families",
           "family", "installed", "load", "modality", "read_config", "resolve", "text_encoder"]

# The offline models by name (models/packaged.py): `resolve("smollm2")` is the installed
# package's file, `installed()` the names installed here.
installed = packaged.installed
resolve = packaged.resolve


@functools.lru_cache(maxsize=1)
def _discover() -> dict[str, Family]:
    """model_type → Family, over every module of anisotropy_jax.models.families with a `FAMILY`
    value.
    RuntimeError when two families claim one model_type."""
    package = importlib.import_module("anisotropy_jax.models.families")
    found: dict[str, Family] = {}
    for info in pkgutil.iter_modules(package.__path__):
        value = getattr(importlib.import_module(f"{package.__name__}.{info.name}"), "FAMILY", None)
        if not isinstance(value, Family):
            continue
        for model_type in value.model_types:
            if model_type in found:
                raise RuntimeError(f"model_type {model_type!r} claimed twice ({value.name}, "
                                   f"{found[model_type].name})")
            found[model_type] = value
    return found


def families() -> dict[str, Family]:
    """model_type → Family, for every family of anisotropy_jax.models.families."""
    return dict(_discover())


def family(hf_config: dict[str, Any], source: str = CONFIG_FILE) -> Family:
    """The family of a parsed config.json (PretrainedError naming an unknown type)."""
    model_type = hf_config.get("model_type")
    known = _discover()
    if model_type not in known:
        raise PretrainedError(
            f"{source}: unsupported architecture model_type={model_type!r} (architectures="
            f"{list(hf_config.get('architectures') or [])}); supported: {', '.join(sorted(known))}")
    return known[model_type]


def text_encoder(fam: Family, hf_config: dict[str, Any]) -> TextEncoder | None:
    """The family's own text encoder for this checkpoint, or None (use tokenizer.json)."""
    return None if fam.text_encoder is None else fam.text_encoder(hf_config)


def modality(fam: Family) -> str:
    """"text", "image" or "audio": what the family's hidden_states_fn takes."""
    return fam.modality


def _native(path: pathlib.Path) -> tuple[Family, NativeFormat, pathlib.Path] | None:
    """(family, native format, file) of `path` when it is a file of a format some family
    declares; None for a Hugging Face directory. PretrainedError for a file of such a format
    that no family reads (e.g. an unsupported GGUF architecture)."""
    declared = [(fam, f) for fam in dict.fromkeys(_discover().values()) for f in fam.native_formats]
    for fmt in dict.fromkeys(f.format for _, f in declared):
        found = fmt.probe(path)
        if found is None:
            continue
        file, key = found
        readers = [(fam, f) for fam, f in declared if f.format is fmt and f.key in (None, key)]
        if not readers:
            keys = sorted(f.key for _, f in declared if f.format is fmt)
            raise PretrainedError(f"{file}: unsupported {fmt.name} {key!r} (supported: {keys})")
        return (*readers[0], file)
    return None


@dataclasses.dataclass(frozen=True)
class LoadedModel:
    """A checkpoint read from disk: its family module, config, parameters, the parsed
    config.json (for GGUF: the equivalent mapping), the tensors not used, and the tokenizer:
    `tokenizer_file` (tokenizer.json) or `tokenizer_json` (a JSON string, from GGUF)."""

    model_dir: pathlib.Path
    family: Family
    config: Any
    params: Any
    hf_config: dict[str, Any]
    unused_tensors: list[str]
    tokenizer_file: pathlib.Path | None
    tokenizer_json: str | None = None
    weights_file: str = ""
    text_encoder: TextEncoder | None = None

    @property
    def num_parameters(self) -> int:
        return int(sum(np.size(x) for x in jax.tree.leaves(self.params)))

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(self.family.state_labels(self.config))


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A checkpoint's config, read once (`read_config`): its location, family, the family's
    config, the parsed config.json (of a native format: the equivalent mapping), the file the
    config came from, and the native format and file (None for a Hugging Face directory).
    `load` takes it and reads the weights only."""

    path: pathlib.Path
    family: Family
    config: Any
    hf_config: dict[str, Any]
    source: str
    native: NativeFormat | None = None
    native_file: pathlib.Path | None = None


def read_config(model_dir: str | pathlib.Path, precision: str = "highest") -> Checkpoint:
    """The `Checkpoint` of a directory or native file, or of an installed offline model named
    as `resolve` takes it ("minilm-l6", "smollm2", "gemma3", ...), reading its config only (a
    native format whose config comes from the tensor shapes reads those, kept for `load`).
    PretrainedError naming the file on any problem, including a config.json key the family
    does not handle, or one line listing the installed names for an unknown name."""
    path = resolve(model_dir)
    native = _native(path)
    if native is not None:
        fam, fmt, file = native
        hf_config = fmt.read_config(file)
        source = str(file)
    else:
        hf_config = checkpoint.read_hf_config(path)
        source = str(path / CONFIG_FILE)
        fam, fmt, file = family(hf_config, source), None, None
    return Checkpoint(path, fam, fam.read_config(hf_config, precision=precision, source=source),
                      hf_config, source, fmt, file)


def load(model: str | pathlib.Path | Checkpoint, precision: str = "highest") -> LoadedModel:
    """A local checkpoint (module docstring) or the name of an installed offline model
    (`read_config`), or a `Checkpoint` already read (whose config was read at its precision),
    → LoadedModel. Raises PretrainedError (one line, naming the file)
    when a file is missing, unreadable or truncated, the model_type is not supported, or a
    tensor is missing or misshapen. Nothing is compiled."""
    ckpt = model if isinstance(model, Checkpoint) else read_config(model, precision)
    fam, cfg, hf_config, path = ckpt.family, ckpt.config, ckpt.hf_config, ckpt.path
    if ckpt.native is not None:
        fmt, file = ckpt.native, ckpt.native_file
        convert = fam.convert if fmt.convert is None else fmt.convert
        params, unused = convert(fmt.read_tensors(file, hf_config), cfg, source=str(file))
        tokenizer = None if fmt.tokenizer_json is None else fmt.tokenizer_json(file)
        return LoadedModel(path, fam, cfg, params, hf_config, unused, None, tokenizer, str(file))
    tensors = checkpoint.load_state_dict(path)
    params, unused = fam.convert(tensors, cfg, source=str(path / checkpoint.WEIGHTS_FILE))
    tokenizer = path / checkpoint.TOKENIZER_FILE
    return LoadedModel(path, fam, cfg, params, hf_config, unused,
                       tokenizer if tokenizer.is_file() else None, None,
                       str(path / checkpoint.WEIGHTS_FILE), text_encoder(fam, hf_config))
