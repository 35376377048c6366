"""Makes the executed copies in this folder: every notebooks/NN_*.ipynb run at smoke size
(ANISOTROPY_JAX_SMOKE=1) on the CPU with nbclient, from notebooks/ as CI's nbmake runs them,
with a first markdown cell saying so. notebooks/ keeps the stripped pairs (tests/test_notebooks.py);
these copies are only for reading (CI's `pytest tests notebooks` does not collect this folder).

  .venv/bin/python docs/notebooks/execute.py            # all four
  .venv/bin/python docs/notebooks/execute.py 04_depth   # one
"""
import datetime as dt
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
SOURCE, OUT = ROOT / "notebooks", ROOT / "docs" / "notebooks"
COMMAND = ".venv/bin/python docs/notebooks/execute.py"


def header(name: str) -> str:
    from anisotropy_jax import results

    return (f"*Executed copy, **smoke size** (`ANISOTROPY_JAX_SMOKE=1`: tiny models and grids, "
            f"seconds per cell; the numbers are not the study's): made by `{COMMAND}` on a CPU, "
            f"{dt.date.today().isoformat()}, git {results._git_commit()}, from "
            f"[notebooks/{name}.ipynb]"
            f"(../../notebooks/{name}.ipynb), which holds the same cells without outputs. Run "
            f"that one (without ANISOTROPY_JAX_SMOKE) for the full-size figures.*")


def execute(name: str) -> pathlib.Path:
    import nbclient
    import nbformat

    notebook = nbformat.read(SOURCE / f"{name}.ipynb", as_version=4)
    nbclient.NotebookClient(notebook, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(SOURCE)}}).execute()
    notebook.cells.insert(0, nbformat.v4.new_markdown_cell(header(name)))
    for cell in notebook.cells:
        cell.pop("id", None)  # nbformat gives fresh random ids: keep a rerun's diff to outputs
    notebook.nbformat_minor = 4  # the minor version without cell ids
    path = OUT / f"{name}.ipynb"
    nbformat.write(notebook, path)
    return path


def main(names: list[str]) -> None:
    os.environ["ANISOTROPY_JAX_SMOKE"] = "1"  # the kernel inherits this process's environment
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.pop("MPLBACKEND", None)  # the kernel's inline backend: figures as outputs
    for name in names or sorted(p.stem for p in SOURCE.glob("[0-9][0-9]_*.ipynb")):
        print(f"wrote {execute(name).relative_to(ROOT)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
