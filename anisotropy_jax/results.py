"""Writing results: atomic JSON / npz / figure files with provenance (a bottom layer: it imports
only the package version).

Every writer goes through a temporary file in the destination folder and `os.replace`, so an
interrupted run leaves either the previous complete file or none, never half a file.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import math
import os
import pathlib
import subprocess
import tempfile
import time
from typing import Any, Iterator

import numpy as np

import anisotropy_jax


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[pathlib.Path]:
    """Yields a temporary path next to `path`; renames it onto `path` only if the block succeeds."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = pathlib.Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def to_jsonable(obj: Any) -> Any:
    """Converts arrays, numpy scalars, dataclasses, tuples and non-finite floats for JSON.

    Non-finite floats become the strings "nan", "inf", "-inf" (JSON has no such numbers), so a
    reader sees them explicitly instead of a parse error.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "to_dict") and callable(obj.to_dict):  # ml_collections.ConfigDict
        return to_jsonable(obj.to_dict())
    if isinstance(obj, (np.ndarray, np.generic)) or type(obj).__module__.startswith("jax"):
        return to_jsonable(np.asarray(obj).tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    return obj


def write_text(path: str | os.PathLike, text: str) -> pathlib.Path:
    """Writes UTF-8 text, atomically."""
    path = pathlib.Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


def write_json(path: str | os.PathLike, obj: Any) -> pathlib.Path:
    """Writes `obj` as indented JSON, atomically."""
    path = pathlib.Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(to_jsonable(obj), indent=1, allow_nan=False) + "\n")
    return path


def write_npz(path: str | os.PathLike, arrays: dict[str, Any]) -> pathlib.Path:
    """Writes arrays to a compressed .npz, atomically."""
    path = pathlib.Path(path)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **{k: np.asarray(v) for k, v in arrays.items()})
    return path


def save_figure(fig: Any, path: str | os.PathLike, dpi: int = 120) -> pathlib.Path:
    """Saves a matplotlib Figure as PNG atomically and closes it."""
    import matplotlib.pyplot as plt

    path = pathlib.Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi, bbox_inches=None if fig.get_layout_engine() else "tight")
    plt.close(fig)
    return path


def _git(*args: str) -> str | None:
    try:
        root = pathlib.Path(__file__).resolve().parent.parent
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=5,
                             check=True)
        return out.stdout
    except (OSError, subprocess.SubprocessError):
        return None


GIT_COMMIT_ENV = "ANISOTROPY_JAX_GIT_COMMIT"


def _git_commit() -> str | None:
    """HEAD, with "+modified" when tracked files differ from it (the code that ran is then not
    exactly that commit's). A tree that is not a git checkout of its own (e.g. `git archive`
    output, possibly inside another repository, whose HEAD is not this code's) records
    $ANISOTROPY_JAX_GIT_COMMIT, or None."""
    if os.environ.get(GIT_COMMIT_ENV):
        return os.environ[GIT_COMMIT_ENV]
    top = (_git("rev-parse", "--show-toplevel") or "").strip()
    if not top or pathlib.Path(top).resolve() != pathlib.Path(__file__).resolve().parent.parent:
        return None
    head = (_git("rev-parse", "HEAD") or "").strip()
    if not head:
        return None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return head + ("+modified" if status and status.strip() else "")


class Provenance:
    """Collects what `results.json["provenance"]` must hold; call `finish()` at the end."""

    def __init__(self):
        self._start_wall = time.time()
        self._start = time.perf_counter()

    def finish(self) -> dict[str, Any]:
        import flax
        import jax

        return {
            "package": "anisotropy_jax",
            "package_version": anisotropy_jax.__version__,
            "git_commit": _git_commit(),
            "jax_version": jax.__version__,
            "flax_version": flax.__version__,
            "backend": jax.default_backend(),
            "devices": [str(d) for d in jax.devices()],
            "device_kind": jax.devices()[0].device_kind,
            "process_count": jax.process_count(),
            "start_time": dt.datetime.fromtimestamp(self._start_wall, dt.timezone.utc).isoformat(),
            "end_time": dt.datetime.now(dt.timezone.utc).isoformat(),
            "wall_seconds": time.perf_counter() - self._start,
        }
