"""Writing results: atomic JSON / npz / figure files with provenance; and reading them back,
re-exported from the layers below: `read_results` (an older schema under the current names,
`anisotropy_jax.schema`) and `load` (a workdir as one pandas DataFrame, `anisotropy_jax.frames`).

Every writer goes through a temporary file in the destination folder and `os.replace`, so an
interrupted run leaves either the previous complete file or none, never half a file.
`FigureWorkers` draws and saves figures in separate processes, started early so that their
matplotlib import overlaps the run and the figures are drawn in parallel (they import the plotting
module they are given by name: nothing above this layer is imported here).
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import importlib
import json
import math
import os
import pathlib
import pickle
import select
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Iterator, NamedTuple, Sequence

import numpy as np

import anisotropy_jax
# Reading results, re-exported: a workdir as one table (`frames.load`), the schema's upgrade.
from anisotropy_jax.frames import load  # noqa: F401
from anisotropy_jax.schema import (RESULTS_SCHEMA_VERSION, SCHEMA_1_METRIC_NAMES,  # noqa: F401
                                   SCHEMA_2_NORMALIZATION_NAMES, read_results, schema_version,
                                   upgrade)


def _umask() -> int:
    """The process's umask, read without changing it where Linux tells it (setting it to read
    it back would race with the threads that write checkpoints)."""
    with contextlib.suppress(OSError, ValueError):
        for line in pathlib.Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[pathlib.Path]:
    """Yields a temporary path next to `path`; renames it onto `path` only if the block succeeds.
    The file gets the mode a plain `open` would give it (0o666 less the umask), not the 0600 of
    a temporary file. An OSError in the block (a full disk) names `path`, not the temporary file,
    which is removed."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as error:
        raise OSError(error.errno, error.strerror, str(path)) from error
    os.close(fd)
    tmp_path = pathlib.Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~_umask())
        os.replace(tmp_path, path)
    except OSError as error:
        if error.errno is None or error.filename not in (None, str(tmp_path)):
            raise
        raise OSError(error.errno, error.strerror, str(path)) from error
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


class FigureJob(NamedTuple):
    """`module.function(*args)` returns a matplotlib Figure, to be saved as PNG at `path`."""

    module: str
    function: str
    args: tuple
    path: pathlib.Path


def draw_figure(job: FigureJob) -> pathlib.Path:
    """Draws and saves one job in this process."""
    return save_figure(getattr(importlib.import_module(job.module), job.function)(*job.args),
                       job.path)


def _figure_worker(modules: Sequence[str]) -> None:
    """A `FigureWorkers` process: imports `modules`, then answers every pickled `FigureJob` read
    from stdin with a pickled error text (None when saved) on the original stdout, until EOF."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a print in a plotting function must not corrupt the answers
    for module in modules:
        importlib.import_module(module)
    while True:
        try:
            job = pickle.load(sys.stdin.buffer)
        except EOFError:
            return
        try:
            draw_figure(job)
            error = None
        except OSError as e:  # a full disk, a read-only folder: the parent raises the OSError
            error = (e.errno, e.strerror, str(job.path))
        except Exception:  # noqa: BLE001 - the parent raises it, naming the figure
            error = traceback.format_exc()
        pickle.dump(error, answers)
        answers.flush()


class FigureWorkers:
    """`processes` Python processes that import `modules` (e.g. the plotting module and with it
    matplotlib) as soon as they start and then draw `FigureJob`s: `save(jobs)` hands each idle
    process the next job and returns when all are saved. Use as a context manager (the processes
    exit at EOF on their stdin, i.e. also when this process dies). A job whose process died, or
    that found no process (processes = 0, or they could not start), is drawn in this process; a
    job that raised raises RuntimeError naming it and the worker's traceback (an OSError, such as
    a full disk, is raised as that OSError)."""

    def __init__(self, modules: Sequence[str], processes: int):
        code = ("import sys; from anisotropy_jax import results; "
                "results._figure_worker(sys.argv[1:])")
        self._procs: list[subprocess.Popen] = []
        for _ in range(processes):
            try:
                self._procs.append(subprocess.Popen(
                    [sys.executable, "-c", code, *modules], stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL))
            except OSError:
                break

    def __enter__(self) -> "FigureWorkers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """EOF to every process, which then exits; not waited for (its teardown takes ~0.1 s;
        `subprocess` reaps it later)."""
        for proc in self._procs:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        self._procs = []

    def save(self, jobs: Sequence[FigureJob]) -> None:
        """Saves every job: the next pending job goes to the first idle process (`jobs` longest
        first keeps the processes finishing together); returns when all are written."""
        pending, idle, busy, orphans = list(jobs), list(self._procs), {}, []
        while pending or busy:
            while pending and idle:
                proc, job = idle.pop(), pending.pop(0)
                try:
                    pickle.dump(job, proc.stdin)
                    proc.stdin.flush()
                    busy[proc.stdout.fileno()] = (proc, job)
                except OSError:  # the process is gone: its job is drawn here
                    orphans.append(job)
            if not busy:
                break
            for fd in select.select(list(busy), [], [])[0]:
                proc, job = busy.pop(fd)
                try:
                    error = pickle.load(proc.stdout)
                except (EOFError, pickle.UnpicklingError):
                    orphans.append(job)
                    continue
                if isinstance(error, tuple):  # an OSError in the worker (`_figure_worker`)
                    raise OSError(*error)
                if error is not None:
                    raise RuntimeError(f"figure {job.path.name}: {error}")
                idle.append(proc)
        for job in orphans + pending:
            draw_figure(job)


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
    """Collects what `results.json["provenance"]` must hold (with the RESULTS_SCHEMA_VERSION of
    the document); call `finish()` at the end.
    `command` is the command line that made the results (for the studies that record it)."""

    def __init__(self, command: str = ""):
        self.command = command
        self._start_wall = time.time()
        self._start = time.perf_counter()

    def finish(self, study: str) -> dict[str, Any]:
        """The provenance of a results document of `study`: the command whose report reads it
        (`anisotropy-jax show` reads it from here), or the name of the benchmark that wrote it."""
        import flax
        import jax

        return {
            "schema_version": RESULTS_SCHEMA_VERSION,
            "study": study,
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
