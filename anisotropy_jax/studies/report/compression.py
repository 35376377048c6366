"""Li et al.'s compression verdict (`verdicts_compression`, its rule fixed before the runs) from a
normalisation-grid results folder and an embeddings-study results folder.

  byte models  the grid's runs of one attention normalisation (softmax) over every dataset it
               holds (all byte-level: |V| ≤ 256 < d), one run per (dataset, seed), from
               GRID/results.json ("runs") or, before that is written, from
               GRID/<dataset>/<normalization>/seed_<s>/grid_run.json
  BPE control  the embeddings study's seeds at one width (default: the smallest, which in
               :gpu is the grid's d = 128; |V| = 8,192 above every width), from
               EMBEDDINGS/results.json ("last_block")

Both give per-seed runs {"steps", "series": {"rankme_last", "alpha_req_last"}} (the last block's
output, one value per analysed checkpoint).

  python -m anisotropy_jax.studies.report.compression GRID_DIR EMBEDDINGS_DIR [--width=D]

prints the verdict, its numbers, the sensitivity entry and the verdict at every width of the
control. `table(folder)` is the doc table (`anisotropy_jax.doc_tables`, kind `compression`) of a
folder that holds both: FOLDER/normalizations/ and FOLDER/embeddings/.
"""
from __future__ import annotations

import math
import pathlib
import sys
from typing import Any, Mapping

from anisotropy_jax import results
from anisotropy_jax.studies.report import verdicts_compression as C
from anisotropy_jax.studies.report.verdict import NOT_MEASURED, Verdict

RESULTS = "results.json"
GRID_RUN = "grid_run.json"  # normalizations.grid.RUN_FILE


def _floats(values) -> list[float]:
    """JSON numbers with results.to_jsonable's "nan" / "inf" strings (and nulls) as floats."""
    return [math.nan if v is None else float(v) for v in values]


def _run(steps, rankme, alpha) -> dict[str, Any]:
    return {"steps": [int(s) for s in steps],
            "series": {C.RANK_SERIES: _floats(rankme), C.ALPHA_SERIES: _floats(alpha)}}


def byte_runs(grid: str | pathlib.Path, normalization: str = "softmax"
              ) -> list[dict[str, Any]] | None:
    """The grid's runs of `normalization` (every dataset, each seed) with the last block's
    series; None where the folder has none, or runs without the series (older runs)."""
    grid = pathlib.Path(grid)
    if (grid / RESULTS).is_file():
        by_dataset = results.read_results(grid / RESULTS).get("runs", {})
        docs = [r for d in sorted(by_dataset) for r in by_dataset[d].get(normalization, [])]
    else:
        files = sorted(grid.glob(f"*/{normalization}/seed_*/{GRID_RUN}"),
                       key=lambda f: (f.parent.parent.parent.name,
                                      int(f.parent.name.split("_")[1])))
        docs = [results.read_results(f) for f in files]
    if not docs or any(C.RANK_SERIES not in d["series"] for d in docs):
        return None
    return [_run(d["steps"], d["series"][C.RANK_SERIES], d["series"][C.ALPHA_SERIES])
            for d in docs]


def _embeddings_doc(folder: str | pathlib.Path) -> dict[str, Any] | None:
    path = pathlib.Path(folder) / RESULTS
    doc = results.read_results(path) if path.is_file() else None
    return doc if doc and doc.get("last_block") else None


def bpe_runs(embeddings: str | pathlib.Path | Mapping[str, Any], width: int | None = None
             ) -> list[dict[str, Any]] | None:
    """The embeddings study's seeds at `width` (None: the smallest) as runs; None where its
    results.json has no last_block (a run before the series were logged)."""
    doc = embeddings if isinstance(embeddings, Mapping) else _embeddings_doc(embeddings)
    if doc is None or not doc.get("last_block"):
        return None
    widths = list(doc["widths"])
    width = min(widths) if width is None else width
    if width not in widths:
        raise ValueError(f"--width: {width} is not one of the embeddings study's widths {widths}")
    w, block = widths.index(width), doc["last_block"]
    return [_run(doc["steps"], block["rankme"][w][s], block["alpha_req"][w][s])
            for s in range(len(doc["seeds"]))]


def verdict(grid: str | pathlib.Path, embeddings: str | pathlib.Path, width: int | None = None,
            normalization: str = "softmax") -> Verdict:
    """`verdicts_compression.compression_phase` of the two folders, with its sensitivity."""
    byte, bpe = byte_runs(grid, normalization), bpe_runs(embeddings, width)
    result = C.compression_phase(byte, bpe)
    if result.verdict == NOT_MEASURED:
        return result
    return Verdict(result.key, result.criterion, result.verdict, result.numbers,
                   sensitivity=C.sensitivity(byte, bpe))


def by_width(grid: str | pathlib.Path, embeddings: str | pathlib.Path) -> dict[int, str]:
    """{width of the BPE control: the verdict with the control at that width}."""
    doc = _embeddings_doc(embeddings)
    if doc is None:
        return {}
    byte = byte_runs(grid)
    return {int(w): C.compression_phase(byte, bpe_runs(doc, int(w))).verdict
            for w in doc["widths"]}


def _row(grid, embeddings, width: int | None) -> str:
    v = verdict(grid, embeddings, width)
    widths = by_width(grid, embeddings)
    chosen = (min(widths) if width is None else width) if widths else None
    sens = v.sensitivity_entry
    others = ", ".join(f"d = {w}: {x}" for w, x in widths.items()) or "–"
    return (f"| Li et al. (compression phase) | **{v.verdict}** | {'; '.join(v.numbers)} | "
            f"{chosen if chosen is not None else '–'} | {sens} | {others} |")


def table_of(grid: str | pathlib.Path, embeddings: str | pathlib.Path,
             width: int | None = None) -> str:
    """The markdown table: the verdict with the control at `width`, and at every width."""
    return "\n".join([
        "| account | verdict | numbers (95% t-intervals over seeds) | control width | "
        "sensitivity | verdict by control width |",
        "| --- | --- | --- | --- | --- | --- |", _row(grid, embeddings, width)]) + "\n"


def table(folder: str | pathlib.Path) -> str:
    """`table_of` FOLDER/normalizations and FOLDER/embeddings (the doc table)."""
    folder = pathlib.Path(folder)
    return table_of(folder / "normalizations", folder / "embeddings")


def main(argv: list[str]) -> int:
    width = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--width=")), None)
    folders = [a for a in argv if not a.startswith("--")]
    if len(folders) != 2:
        print("usage: python -m anisotropy_jax.studies.report.compression GRID_DIR "
              "EMBEDDINGS_DIR [--width=D]", file=sys.stderr)
        return 2
    print(C.CRITERION + "\n")
    print(table_of(*folders, width=width), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
