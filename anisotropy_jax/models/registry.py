"""Model families by Hugging Face `model_type`, and loading a local checkpoint of any of them.

A family is a `models.family.Family` value, `FAMILY`, at the end of a module of
`anisotropy_jax.models`; the registry finds it by importing every module of the package
(pkgutil), so a new family needs no edit here (docs/EXTENDING.md).

`load(model_dir)` reads a directory (config.json + model.safetensors or sharded safetensors with
model.safetensors.index.json), or a GGUF file / a directory holding exactly one .gguf and no
config.json (`models/formats/gguf.py`), or one of the native formats of `NATIVE_FORMATS` (a CTranslate2
Whisper directory: model.bin or its parts; an ONNX file holding a DINOv2 backbone), and returns a
`LoadedModel`. Files only: nothing is compiled.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import pathlib
import pkgutil
from typing import Any, Callable

import jax
import numpy as np

from anisotropy_jax.models.formats import checkpoint, gguf
from anisotropy_jax.models.families import vit, whisper
from anisotropy_jax.models.formats.checkpoint import CONFIG_FILE, PretrainedError
from anisotropy_jax.models.family import Family, TextEncoder

__all__ = ["Family", "LoadedModel", "PretrainedError", "TextEncoder", "families", "family", "load",
           "modality", "read_config", "text_encoder"]


@functools.lru_cache(maxsize=1)
def _discover() -> dict[str, Family]:
    """model_type → Family, over every module of anisotropy_jax.models with a `FAMILY` value.
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
    """model_type → Family, for every family of anisotropy_jax.models."""
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


def _ctranslate2_whisper(path: pathlib.Path, precision: str):
    return whisper.load_ctranslate2(path, precision)


def _onnx_dinov2(path: pathlib.Path, precision: str):
    try:
        return vit.load_onnx_dinov2(path, precision)
    except (KeyError, IndexError) as e:
        raise PretrainedError(f"{path}: not an ONNX DINOv2 backbone (no tensor {e}); ONNX BERT "
                              "files are converted by models/formats/onnx.py first") from None


# Checkpoints in another runtime's format: (is it one?, loader → (cfg, params, config dict,
# unused)). The config comes from the tensor shapes, so reading the config reads the weights
# (cached: one checkpoint at a time).
NATIVE_FORMATS: dict[str, tuple[Callable[[pathlib.Path], bool], Callable[..., Any]]] = {
    "ctranslate2_whisper": (whisper.is_ctranslate2_dir, _ctranslate2_whisper),
    "onnx_dinov2": (lambda p: p.is_file() and p.suffix == ".onnx", _onnx_dinov2),
}


def native_format(path: pathlib.Path) -> str | None:
    """The NATIVE_FORMATS key of `path`, or None (a Hugging Face directory or GGUF)."""
    return next((name for name, (test, _) in NATIVE_FORMATS.items() if test(path)), None)


@functools.lru_cache(maxsize=1)
def _load_native(name: str, path: str, mtime: float, precision: str):
    del mtime  # part of the cache key: a rewritten file is read again
    return NATIVE_FORMATS[name][1](pathlib.Path(path), precision)


def _native(name: str, path: pathlib.Path, precision: str):
    return _load_native(name, str(path), path.stat().st_mtime, precision)


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


def read_config(model_dir: str | pathlib.Path, precision: str = "highest"
                ) -> tuple[Family, Any, dict[str, Any]]:
    """(family, cfg, parsed config) of a checkpoint (GGUF: from its metadata), reading config
    files only, not weights. PretrainedError naming the file on any problem."""
    path = pathlib.Path(model_dir)
    native = native_format(path)
    if native is not None:
        cfg, _, hf_config, _ = _native(native, path, precision)
        return family(hf_config, str(path)), cfg, hf_config
    gguf_file = gguf.find_gguf(path)
    if gguf_file is not None:
        hf_config = gguf.read_metadata(gguf_file)
        source = str(gguf_file)
    else:
        hf_config = checkpoint.read_hf_config(path)
        source = str(path / CONFIG_FILE)
    fam = family(hf_config, source)
    return fam, fam.config_from_hf(hf_config, precision=precision, source=source), hf_config


def load(model_dir: str | pathlib.Path, precision: str = "highest") -> LoadedModel:
    """A local checkpoint (module docstring) → LoadedModel. Raises PretrainedError (one line,
    naming the file) when a file is missing, unreadable or truncated, the model_type is not
    supported, or a tensor is missing or misshapen. Nothing is compiled."""
    path = pathlib.Path(model_dir)
    fam, cfg, hf_config = read_config(path, precision)
    native = native_format(path)
    if native is not None:
        _, params, _, unused = _native(native, path, precision)
        return LoadedModel(path, fam, cfg, params, hf_config, unused, None, None, str(path))
    gguf_file = gguf.find_gguf(path)
    if gguf_file is not None:
        tensors = gguf.read_tensors(gguf_file, hf_config)
        params, unused = fam.convert(tensors, cfg, source=str(gguf_file))
        return LoadedModel(path, fam, cfg, params, hf_config, unused, None,
                           gguf.tokenizer_json(gguf_file), str(gguf_file))
    tensors = checkpoint.load_state_dict(path)
    params, unused = fam.convert(tensors, cfg, source=str(path / checkpoint.WEIGHTS_FILE))
    tokenizer = path / checkpoint.TOKENIZER_FILE
    return LoadedModel(path, fam, cfg, params, hf_config, unused,
                       tokenizer if tokenizer.is_file() else None, None,
                       str(path / checkpoint.WEIGHTS_FILE), text_encoder(fam, hf_config))
