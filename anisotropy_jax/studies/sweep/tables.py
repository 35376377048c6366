"""Markdown tables of committed bias-sweep results, so that the docs quote numbers generated from a
results.json instead of typed by hand.

  python -m anisotropy_jax.studies.sweep.tables KIND RESULTS_JSON

KIND is `control` (biased inputs against the norm-matched control, one row per s of `ROWS` in the
grid), `default` (the first run's key curves) or `closed_forms` (each closed form's largest
deviation). docs/BIAS_SWEEP.md embeds tables between `<!-- table: KIND PATH -->` and
`<!-- end table -->`; tests/test_sweep.py regenerates every one of them from its file and fails
when a number differs.
"""
from __future__ import annotations

import json
import pathlib
import re
import sys
from typing import Any, Mapping

# The s of the docs tables (those present in a run's grid are shown).
ROWS = (0.0, 4.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0, 4096.0)
CONTROL_COLUMNS = (("H/ln L", "attention_entropy_normalized"), ("max p", "attention_max"),
                   ("agreement", "attention_query_agreement"),
                   ("information (nats)", "attention_query_key_information"),
                   ("row cosine", "attention_row_cosine"))
DEFAULT_COLUMNS = (("input cos", "input_cosine"), ("output cos", "output_cosine"),
                   ("H/ln L", "attention_entropy_normalized"), ("max p", "attention_max"),
                   ("agreement", "attention_query_agreement"),
                   ("information (nats)", "attention_query_key_information"),
                   ("‖q‖", "query_norm"))
MARKER = re.compile(r"<!-- table: (\w+) (\S+) -->\n(.*?)<!-- end table -->", re.S)


def _rows(run: Mapping[str, Any]) -> list[int]:
    norms = run["bias_norms"]
    return [norms.index(s) for s in ROWS if s in norms]


def _cell(metric: Mapping[str, Any], i: int) -> str:
    mean, std = metric["mean"][i], metric["std"][i]
    return f"{mean:.3g} ± {std:.1g}" if len(metric["per_seed"]) > 1 else f"{mean:.4g}"


def _markdown(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body]) + "\n"


def control_table(doc: Mapping[str, Any]) -> str:
    """Per s: each metric for the biased inputs and the norm-matched control (mean ± sample std
    over seeds), from a `:control` results.json."""
    runs = doc["runs"]
    biased, control = runs["inputs=biased"], runs["inputs=norm_matched"]
    header = ["s"] + [f"{name}, {kind}" for name, _ in CONTROL_COLUMNS
                      for kind in ("biased", "control")]
    body = [[f"{biased['bias_norms'][i]:g}"]
            + [_cell(run["metrics"][key], i) for _, key in CONTROL_COLUMNS
               for run in (biased, control)]
            for i in _rows(biased)]
    return _markdown(header, body)


def default_table(doc: Mapping[str, Any]) -> str:
    """Per s: the first run's key curves (mean ± sample std over seeds)."""
    run = next(iter(doc["runs"].values()))
    body = [[f"{run['bias_norms'][i]:g}"] + [_cell(run["metrics"][key], i)
                                             for _, key in DEFAULT_COLUMNS]
            for i in _rows(run)]
    return _markdown(["s"] + [name for name, _ in DEFAULT_COLUMNS], body)


def closed_forms_table(doc: Mapping[str, Any]) -> str:
    """Each closed form of the first run: the largest |measured − predicted| and where."""
    run = next(iter(doc["runs"].values()))
    body = []
    for form in run["closed_forms"].values():
        rel = form["max_rel_deviation"]
        body.append([form["formula"], f"{form['max_abs_deviation']:.2g}",
                     "" if rel is None else f"{rel:.2%}", f"{form['worst_s']:g}"])
    return _markdown(["closed form", "max abs deviation", "max relative", "at s"], body)


TABLES = {"control": control_table, "default": default_table, "closed_forms": closed_forms_table}


def render(kind: str, path: str | pathlib.Path) -> str:
    """The table of `kind` from the results.json at `path`."""
    if kind not in TABLES:
        raise ValueError(f"unknown table {kind!r}; choose one of {sorted(TABLES)}")
    return TABLES[kind](json.loads(pathlib.Path(path).read_text()))


def embedded_tables(markdown: str) -> list[tuple[str, str, str]]:
    """[(kind, path, table as written)] of every generated table in a markdown text."""
    return [match.groups() for match in MARKER.finditer(markdown)]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    print(render(*argv), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
