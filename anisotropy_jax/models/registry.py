"""Model families by Hugging Face `model_type`, and loading a local checkpoint of any of them.

A family is a module of `anisotropy_jax.models` that defines `MODEL_TYPES`; the registry finds
it by importing every module of the package (pkgutil), so a new family needs no edit here.

The family interface (every family module exposes all of it; `cfg` is the family's own frozen,
hashable config dataclass):

  MODEL_TYPES: tuple[str, ...]   the config.json "model_type" values it loads, e.g. ("llama",)
  CAUSAL: bool                   causal LM (True) or bidirectional encoder (False)
  config_from_hf(hf_config: dict, precision: str = "highest", source: str = "config.json") -> cfg
                                 PretrainedError (one line naming `source`) on an unsupported
                                 or missing setting; `precision` 'highest' | 'default' | 'bfloat16'
  convert(tensors: dict[str, np.ndarray], cfg, source: str) -> (params, unused: list[str])
                                 Hugging Face tensor names → {"params": tree}; PretrainedError
                                 naming `source` for missing or misshapen tensors
  init_params(cfg, key) -> params  the same architecture re-initialised as Hugging Face's
                                 `_init_weights` does (the untrained baseline)
  hidden_states_fn(cfg) -> f     f(params, tokens_BxL int32, token_types_BxL int32, mask_BxL bool)
                                 -> (S, B, L, D) float32 jitted; S = len(state_labels(cfg))
  state_labels(cfg) -> tuple[str, ...]
                                 "embeddings", "layer_1" … "layer_N" (each block's raw output,
                                 resid_post), then "final_norm" when the family has a final norm
                                 (so the last two entries are the anisotropy before / after it).
                                 Hugging Face's output_hidden_states is this list without
                                 "layer_N" for families with a final norm (it normalises the last
                                 layer), and exactly this list otherwise.
  apply_fn(cfg) -> f             f(params, tokens_BxL, mask_BxL) -> (final_hidden, probes): the
                                 Flax module's apply; probes {"embeddings", "blocks": [per-block
                                 probes of the contract in models/block.py], "final_hidden",
                                 "final_norm_in" (with a final norm)}
  embedding_matrices(params, cfg) -> {"input": (V, D), "output": (V, D) | None,
                                 "final_norm_scale": (D,) | None}   (numpy; "output" is the LM
                                 head / output embedding, the input one when tied, None when the
                                 checkpoint has none; encoders may give None for both extras)
  summary(cfg) -> dict           at least num_layers, d_model, num_heads, d_ff, vocab_size, max_len
                                 and "untrained_init" (one line describing init_params)
  pad_token_id(hf_config) -> int the id used to pad (padding is always masked)

Optional:
  MODALITY: "image" | "audio"    the first argument of hidden_states_fn is pixels / log-mel /
                                 waveform instead of token ids (absent: text; `modality`)
  text_encoder(hf_config) -> TextEncoder | None
                                 the family's own text → ids map, for checkpoints that ship no
                                 tokenizer.json (ByT5: UTF-8 bytes + EOS; CANINE: code points with
                                 CLS/SEP); None = use tokenizer.json. `text_encoder(fam, hf)` is
                                 the one place where this choice is made.

`load(model_dir)` reads a directory (config.json + model.safetensors or sharded safetensors with
model.safetensors.index.json), or a GGUF file / a directory holding exactly one .gguf and no
config.json (`models/gguf.py`), or one of the native formats of `NATIVE_FORMATS` (a CTranslate2
Whisper directory: model.bin or its parts; an ONNX file holding a DINOv2 backbone), and returns a
`LoadedModel`. Files only: nothing is compiled.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import pathlib
import pkgutil
from types import ModuleType
from typing import Any, Callable

import jax
import numpy as np

from anisotropy_jax.models import bert, gguf, vit, whisper
from anisotropy_jax.models.bert import CONFIG_FILE, PretrainedError

INTERFACE = ("MODEL_TYPES", "CAUSAL", "config_from_hf", "convert", "init_params",
             "hidden_states_fn", "state_labels", "apply_fn", "embedding_matrices", "summary",
             "pad_token_id")


@functools.lru_cache(maxsize=1)
def _discover() -> tuple[dict[str, ModuleType], dict[str, str]]:
    """(model_type → complete family module, model_type → what an incomplete family lacks), over
    every module of anisotropy_jax.models with MODEL_TYPES. RuntimeError when two modules claim
    one model_type."""
    package = importlib.import_module("anisotropy_jax.models")
    found: dict[str, ModuleType] = {}
    incomplete: dict[str, str] = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        types = getattr(module, "MODEL_TYPES", None)
        if not types:
            continue
        lacking = [name for name in INTERFACE if not hasattr(module, name)]
        for model_type in types:
            if model_type in found or model_type in incomplete:
                raise RuntimeError(f"model_type {model_type!r} claimed twice ({module.__name__})")
            if lacking:
                incomplete[model_type] = f"{module.__name__} lacks {', '.join(lacking)}"
            else:
                found[model_type] = module
    return found, incomplete


def families() -> dict[str, ModuleType]:
    """model_type → family module, for every module of anisotropy_jax.models that defines
    MODEL_TYPES and the whole interface (module docstring)."""
    return dict(_discover()[0])


def family(hf_config: dict[str, Any], source: str = CONFIG_FILE) -> ModuleType:
    """The family module of a parsed config.json (PretrainedError naming an unknown type)."""
    model_type = hf_config.get("model_type")
    known, incomplete = _discover()
    if model_type in incomplete:
        raise PretrainedError(f"{source}: model_type={model_type!r} is not usable yet: "
                              f"{incomplete[model_type]}")
    if model_type not in known:
        raise PretrainedError(
            f"{source}: unsupported architecture model_type={model_type!r} (architectures="
            f"{list(hf_config.get('architectures') or [])}); supported: {', '.join(sorted(known))}")
    return known[model_type]


@dataclasses.dataclass(frozen=True)
class TextEncoder:
    """A family's own tokenizer (no tokenizer.json): `encode(text)` → ids with the family's
    special tokens, the first `num_leading` and last `num_trailing` of which are special (kept when
    a sequence is truncated, as `tokenizers` keeps [CLS]/[SEP]). `ids_are_rows`: ids index an
    embedding table of `summary()["vocab_size"]` rows (ByT5); False for hashed ids (CANINE's code
    points)."""

    name: str
    encode: Callable[[str], list[int]]
    num_leading: int
    num_trailing: int
    ids_are_rows: bool = True


def text_encoder(fam: ModuleType, hf_config: dict[str, Any]) -> TextEncoder | None:
    """The family's own text encoder for this checkpoint, or None (use tokenizer.json)."""
    make = getattr(fam, "text_encoder", None)
    return None if make is None else make(hf_config)


def modality(fam: ModuleType) -> str:
    """"text", "image" or "audio": what the family's hidden_states_fn takes."""
    return getattr(fam, "MODALITY", "text")


def _ctranslate2_whisper(path: pathlib.Path, precision: str):
    return whisper.load_ctranslate2(path, precision)


def _onnx_dinov2(path: pathlib.Path, precision: str):
    try:
        return vit.load_onnx_dinov2(path, precision)
    except (KeyError, IndexError) as e:
        raise PretrainedError(f"{path}: not an ONNX DINOv2 backbone (no tensor {e}); ONNX BERT "
                              "files are converted by models/onnx_bert.py first") from None


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
    family: ModuleType
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
                ) -> tuple[ModuleType, Any, dict[str, Any]]:
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
        hf_config = bert.read_hf_config(path)
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
    tensors = bert.load_state_dict(path)
    params, unused = fam.convert(tensors, cfg, source=str(path / bert.WEIGHTS_FILE))
    tokenizer = path / bert.TOKENIZER_FILE
    return LoadedModel(path, fam, cfg, params, hf_config, unused,
                       tokenizer if tokenizer.is_file() else None, None,
                       str(path / bert.WEIGHTS_FILE), text_encoder(fam, hf_config))
