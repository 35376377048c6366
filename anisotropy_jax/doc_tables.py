"""Tables in the docs bound to the committed raw results they quote: no hand-typed numbers.

  python -m anisotropy_jax.doc_tables [--update] [DOC.md ...]   (default: every docs/*.md)

A doc embeds a generated table between `<!-- table: KIND PATH -->` and `<!-- end table -->`, PATH
relative to the repository root (a results.json, or for `claims` a bundled report folder).
`render(KIND, PATH)` regenerates it with the study's own formatter; `--update` rewrites the
tables in place, and without it the command lists every table that differs from its result and
exits 1 (tests/test_doc_tables.py runs the check over every doc).

KINDS (each a study's formatter, imported when used):
  control, default, closed_forms, ...  the bias sweep's (`studies.sweep.tables.TABLES`)
  seeds        a training objective's summary over seeds (`studies.train.seeds.format_table`)
  depth        the depth study's table (`studies.depth.report.markdown_table`)
  modalities   the vision/speech comparison (`studies.cross_modal.table`)
  embeddings_loss, embeddings_isotropy, embeddings_unitnorm, embeddings_gain
               the embedding study's tables (`studies.embeddings.report.format_*`)
  claims       the reproduction's verdicts recomputed from a bundled report folder
               (`studies.report.report.claims_table_from_bundle`)
  godey_2      the claims table's row of Godey 2 recomputed from a folder of pretrained runs
               (<model>/results.json), with its sensitivity entry (`verdicts.godey_2`)
  extreme_claims  the extreme-token study's pre-registered claims recomputed from a folder of extreme-token
               results.json files, each with its sensitivity entry
               (`studies.extreme.sensitivity.table`)
  extreme_storage, extreme_dimensions  the bytes and wall times, and the intrinsic dimensions,
               per model of the same folder (`studies.extreme.report.storage_table`,
               `dimension_table`)
  extreme_quantisation  the quantisation control: extreme-token metrics of float32 weights and
               of the same weights through GGUF types, from a folder of its JSON files
               (`studies.extreme.report.quantisation_table`)
  intervention_claims  Godey 3 inside trained networks: the verdicts of 3s and 3c and the
               per-block differences, from a folder of the intervention's results.json files
               (`studies.report.verdicts_intervention.table`)
  normalization_grid  the normalisation grid's table per dataset
               (`studies.normalizations.summary.markdown_table`)
  outlier_accounts  the outlier accounts' verdicts recomputed from a folder of the grid's device
               archives (`studies.report.outlier_accounts.table`)
  compression  Li et al.'s compression verdict from a folder holding normalizations/ (a grid's
               results) and embeddings/ (the embeddings study's) (`studies.report.compression`)
"""
from __future__ import annotations

import pathlib
import re
import sys
from typing import Callable

from anisotropy_jax import results

ROOT = pathlib.Path(__file__).resolve().parent.parent
MARKER = re.compile(r"<!-- table: (\w+) (\S+) -->\n(.*?)<!-- end table -->", re.S)



def _seeds(doc):
    from anisotropy_jax.studies.train import seeds
    return seeds.format_table(doc)


def _depth(doc):
    from anisotropy_jax.studies.depth import report
    return report.markdown_table(doc)


def _modalities(doc):
    from anisotropy_jax.studies import cross_modal
    return cross_modal.table(doc["models"])


def _embeddings(name: str):
    def formatter(doc):
        from anisotropy_jax.studies.embeddings import report
        return getattr(report, name)(doc)
    return formatter


def _claims(folder: pathlib.Path):
    from anisotropy_jax.studies.report import report
    return report.claims_table_from_bundle(folder)


def _godey_2(folder: pathlib.Path):
    from anisotropy_jax.studies.report import report, verdicts
    docs = {path.parent.name: results.read_results(path)
            for path in sorted(folder.glob("*/results.json"))}
    return report.claims_table([verdicts.godey_2(docs)])


def _extreme_claims(folder: pathlib.Path):
    from anisotropy_jax.studies.extreme import sensitivity
    return sensitivity.table(folder)


def _extreme_storage(folder: pathlib.Path):
    from anisotropy_jax.studies.extreme import report
    return report.storage_table(folder)


def _extreme_dimensions(folder: pathlib.Path):
    from anisotropy_jax.studies.extreme import report
    return report.dimension_table(folder)


def _extreme_quantisation(folder: pathlib.Path):
    from anisotropy_jax.studies.extreme import report
    return report.quantisation_table(folder)


def _intervention_claims(folder: pathlib.Path):
    from anisotropy_jax.studies.report import verdicts_intervention
    return verdicts_intervention.table(folder)


def _outlier_accounts(folder: pathlib.Path):
    from anisotropy_jax.studies.report import outlier_accounts
    return outlier_accounts.table(folder)


def _compression(folder: pathlib.Path):
    from anisotropy_jax.studies.report import compression
    return compression.table(folder)


def _normalization_grid(doc):
    from anisotropy_jax.studies.normalizations import summary
    return summary.markdown_table(doc["cells"])


# kind → formatter of the loaded results.json (for `claims`, `extreme_*` and
# `intervention_claims`, of the folder).
_FORMATTERS = {"seeds": _seeds, "depth": _depth, "modalities": _modalities, "claims": _claims,
               "godey_2": _godey_2,
               "extreme_claims": _extreme_claims, "extreme_storage": _extreme_storage,
               "extreme_dimensions": _extreme_dimensions,
               "extreme_quantisation": _extreme_quantisation,
               "intervention_claims": _intervention_claims,
               "normalization_grid": _normalization_grid,
               "outlier_accounts": _outlier_accounts, "compression": _compression,
               "embeddings_loss": _embeddings("format_loss_table"),
               "embeddings_isotropy": _embeddings("format_table"),
               "embeddings_unitnorm": _embeddings("format_unitnorm_table"),
               "embeddings_gain": _embeddings("format_gain_table")}


def _formatter(kind: str) -> Callable:
    if kind in _FORMATTERS:
        return _FORMATTERS[kind]
    from anisotropy_jax.studies.sweep import tables
    if kind in tables.TABLES:
        return tables.TABLES[kind]
    raise ValueError(f"unknown table {kind!r}; choose one of "
                     f"{sorted(set(_FORMATTERS) | set(tables.TABLES))}")


def render(kind: str, path: str | pathlib.Path) -> str:
    """The table of `kind` from the results at `path` (relative to the repository root), ending in
    one newline."""
    full = ROOT / path
    if not full.exists():
        raise FileNotFoundError(f"{path}: no such results file or folder")
    formatter = _formatter(kind)
    table = formatter(full if full.is_dir() else results.read_results(full))
    return table.rstrip("\n") + "\n"


def embedded(markdown: str) -> list[tuple[str, str, str]]:
    """[(kind, path, table as written)] of every generated table in a markdown text."""
    return [match.groups() for match in MARKER.finditer(markdown)]


def drifted(doc: pathlib.Path) -> list[str]:
    """'DOC: KIND PATH' for every embedded table of `doc` that differs from its regeneration."""
    return [f"{doc.relative_to(ROOT)}: {kind} {path}"
            for kind, path, written in embedded(doc.read_text()) if written != render(kind, path)]


def update(doc: pathlib.Path) -> int:
    """Rewrites every embedded table of `doc` from its results; returns how many changed."""
    text, changed = doc.read_text(), 0

    def fresh(match: re.Match) -> str:
        nonlocal changed
        kind, path, written = match.groups()
        table = render(kind, path)
        changed += table != written
        return f"<!-- table: {kind} {path} -->\n{table}<!-- end table -->"

    new = MARKER.sub(fresh, text)
    if new != text:
        results.write_text(doc, new)
    return changed


def main(argv: list[str]) -> int:
    write = "--update" in argv
    docs = [pathlib.Path(a).resolve() for a in argv if a != "--update"] or sorted(
        (ROOT / "docs").glob("*.md"))
    if write:
        for doc in docs:
            print(f"{doc.relative_to(ROOT)}: {update(doc)} table(s) rewritten")
        return 0
    bad = [line for doc in docs for line in drifted(doc)]
    print("\n".join(bad) if bad else f"{len(docs)} doc(s): every table matches its results")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
