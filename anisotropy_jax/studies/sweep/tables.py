"""Markdown tables of committed bias-sweep results, so that the docs quote numbers generated from a
results.json instead of typed by hand.

  python -m anisotropy_jax.studies.sweep.tables KIND RESULTS_JSON

KIND is `control` (biased inputs against the norm-matched control, one row per s of `ROWS` in the
grid), `default` (the first run's key curves), `closed_forms` (each closed form's largest
deviation), `closed_forms_all` (the same for every run), `controls_entropy` /
`controls_agreement` (one column per inputs kind of a `:controls` run, rows `CONTROL_ROWS`),
`controls_differences` (each control minus the biased inputs at the operating points, paired over
seeds), `controls_identities` (each control's exact identity and its largest deviation), or
`normalizations` / `normalizations_control` (a `:normalizations` run: per normalisation and s, the
biased inputs or the norm-matched control, mean [95% interval over seeds]).
docs/SWEEP.md embeds tables between `<!-- table: KIND PATH -->` and `<!-- end table -->`;
tests/test_sweep.py regenerates every one of them from its file and fails when a number differs.
"""
from __future__ import annotations

import pathlib
import re
import sys
from typing import Any, Mapping

from anisotropy_jax import results

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
# The controls' tables: s = 0, the operating range of d = 768 (input cosine 0.1-0.6: s = 11.3 … 32)
# and beyond.
CONTROL_ROWS = (0.0, 8.0, 2 ** 3.5, 16.0, 2 ** 4.5, 32.0, 2 ** 5.5, 64.0, 256.0, 1024.0, 4096.0)
MARKER = re.compile(r"<!-- table: (\w+) (\S+) -->\n(.*?)<!-- end table -->", re.S)


def _rows(run: Mapping[str, Any]) -> list[int]:
    norms = run["bias_norms"]
    return [norms.index(s) for s in ROWS if s in norms]


def _cell(metric: Mapping[str, Any], i: int, digits: int = 3) -> str:
    """mean ± sample std over seeds; the mean alone with one seed (its std is undefined)."""
    mean, std = metric["mean"][i], metric["std"][i]
    return f"{mean:.{digits}g} ± {std:.1g}" if len(metric["per_seed"]) > 1 else f"{mean:.4g}"


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


def closed_forms_all_table(doc: Mapping[str, Any]) -> str:
    """Every run's closed forms: the largest |measured − predicted| and where."""
    body = []
    for label, run in doc["runs"].items():
        for form in run["closed_forms"].values():
            rel = form["max_rel_deviation"]
            body.append([label, form["formula"], f"{form['max_abs_deviation']:.2g}",
                         "" if rel is None else f"{rel:.2%}", f"{form['worst_s']:g}"])
    return _markdown(["run", "closed form", "max abs deviation", "max relative", "at s"], body)


def _controls_metric_table(doc: Mapping[str, Any], key: str) -> str:
    """Per s of CONTROL_ROWS: the biased inputs' input cosine, then `key` for every run."""
    runs = list(doc["runs"].values())
    norms = runs[0]["bias_norms"]
    rows = [norms.index(s) for s in CONTROL_ROWS if s in norms]
    header = ["s", "input cos (biased)"] + [run["inputs"] for run in runs]
    body = [[f"{norms[i]:.3g}", f"{runs[0]['metrics']['input_cosine']['mean'][i]:.3g}"]
            + [_cell(run["metrics"][key], i, 4) for run in runs] for i in rows]
    return _markdown(header, body)


def controls_entropy_table(doc: Mapping[str, Any]) -> str:
    return _controls_metric_table(doc, "attention_entropy_normalized")


def controls_agreement_table(doc: Mapping[str, Any]) -> str:
    return _controls_metric_table(doc, "attention_query_agreement")


def _interval(diff: Mapping[str, Any], i: int) -> str:
    return f"{diff['mean'][i]:+.3g} [{diff['low'][i]:+.3g}, {diff['high'][i]:+.3g}]"


def controls_differences_table(doc: Mapping[str, Any]) -> str:
    """At each operating point (input cosine 0.1-0.6): every control minus the biased inputs,
    mean over seeds [95% t-interval of the paired differences]."""
    body = []
    for entry in doc["controls"].values():
        for label, control in entry["runs"].items():
            for i, s in zip(entry["operating_points"], entry["operating_bias_norms"]):
                body.append([control["inputs"], f"{s:.3g}"]
                            + [_interval(control["minus_biased"][key], i)
                               for key in ("attention_entropy_normalized",
                                           "attention_query_agreement")])
    return _markdown(["control", "s", "Δ H/ln L", "Δ agreement"], body)


def controls_identities_table(doc: Mapping[str, Any]) -> str:
    """Each control's exact identity and its largest deviation over seeds and s."""
    body = []
    for entry in doc["controls"].values():
        for control in entry["runs"].values():
            found = control["identity"]
            if found is None:
                body.append([control["inputs"], "none (equal in distribution only)", ""])
                continue
            body.append([control["inputs"], found["statement"], ", ".join(
                f"{v:.2g}" for v in found["max_abs_deviation"].values())])
    return _markdown(["control", "identity", "max abs deviation"], body)


NORMALIZATION_COLUMNS = (("input cos", "input_cosine"), ("H/ln L", "attention_entropy_normalized"),
                         ("mass", "attention_mass"), ("attn out cos", "attention_output_cosine"),
                         ("output cos", "output_cosine"), ("sink rate", "attention_sink_rate"),
                         ("agreement", "attention_query_agreement"))


def _seed_interval(metric: Mapping[str, Any], i: int) -> str:
    """mean [95% t-interval over seeds]; the mean alone with one seed."""
    if len(metric["per_seed"]) < 2:
        return f"{metric['mean'][i]:.3g}"
    return f"{metric['mean'][i]:.3g} [{metric['low'][i]:.3g}, {metric['high'][i]:.3g}]"


def _normalizations_table(doc: Mapping[str, Any], inputs: str) -> str:
    """Per normalisation (the gate as '+ gate') and s of ROWS, runs of `inputs`: the
    NORMALIZATION_COLUMNS, mean [95% t-interval over seeds], from a `:normalizations` run."""
    body = []
    for label, run in doc["runs"].items():
        fields = dict(part.split("=", 1) for part in label.split(", "))
        if fields.get("inputs") != inputs:
            continue
        name = fields["attention_normalization"]
        name += " + gate" if fields.get("attention_output_gate") == "True" else ""
        body += [[name, f"{run['bias_norms'][i]:g}"]
                 + [_seed_interval(run["metrics"][key], i) for _, key in NORMALIZATION_COLUMNS]
                 for i in _rows(run)]
    return _markdown(["normalisation", "s"] + [n for n, _ in NORMALIZATION_COLUMNS], body)


def normalizations_table(doc: Mapping[str, Any]) -> str:
    return _normalizations_table(doc, "biased")


def normalizations_control_table(doc: Mapping[str, Any]) -> str:
    return _normalizations_table(doc, "norm_matched")


SINK_ROWS = (0.0, 16.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0)


def _seed_range(metric: Mapping[str, Any], i: int) -> str:
    """mean [min, max] over the seeds: a share bounded by 0 and 1 gets the seeds' range, not a
    t-interval that can leave [0, 1]."""
    seeds = [run[i] for run in metric["per_seed"]]
    return f"{metric['mean'][i]:.3f} [{min(seeds):.3f}, {max(seeds):.3f}]"


def _softmax_run(doc: Mapping[str, Any], inputs: str) -> Mapping[str, Any]:
    """The softmax run without the output gate on `inputs` (the labels of a `:control` or a
    `:normalizations` results.json)."""
    for label, run in doc["runs"].items():
        fields = dict(part.split("=", 1) for part in label.split(", "))
        if (fields.get("inputs") == inputs and fields.get("attention_normalization",
                                                          "softmax") == "softmax"
                and fields.get("attention_output_gate", "False") == "False"):
            return run
    raise KeyError(f"no softmax run on {inputs!r} inputs among {list(doc['runs'])}")


def sink_rates_table(doc: Mapping[str, Any]) -> str:
    """Is categorical attention a sink? Per s (SINK_ROWS), for softmax on the biased inputs: Gu
    et al.'s rate on key 0, the position-free rate and the query agreement; on the norm-matched
    control: the position-free rate and the largest weight; mean [min, max] over seeds."""
    biased, control = _softmax_run(doc, "biased"), _softmax_run(doc, "norm_matched")
    norms = doc["bias_norms"]
    body = []
    for s in SINK_ROWS:
        if s not in norms:
            continue
        i = norms.index(s)
        m, c = biased["metrics"], control["metrics"]
        body.append([f"{s:g}", f"{round(m['input_cosine']['mean'][i], 3) + 0.0:.3f}"] + [_seed_range(m[k], i) for k in (
            "attention_sink_rate", "attention_free_sink_rate", "attention_query_agreement")]
            + [_seed_range(c[k], i) for k in ("attention_free_sink_rate", "attention_max")])
    return _markdown(["s", "input cos", "sink rate, key 0", "position-free sink rate",
                      "query agreement", "control: position-free sink rate",
                      "control: largest weight"], body)


# "Categorical attention is a sink": where it holds. A point of the sweep is in the sink regime
# when the seeds' mean position-free sink rate exceeds SINK_REGIME; the operating range is the
# input cosines that trained models have (controls.INPUT_COSINE_RANGE).
SINK_REGIME = 0.5
SINK_SCOPE_RULE = (f"a point is a sink (categorical attention on one key, in Gu et al.'s sense) "
                   f"when the seeds' mean position-free sink rate (ε = 0.3) is > {SINK_REGIME}; "
                   f"the claim is scoped to the input cosines where that is so, and the rate is "
                   f"read at the input cosines of trained models (0.1–0.6)")


def sink_scope_table(doc: Mapping[str, Any]) -> str:
    """Where "Godey's categorical attention is a sink" holds in one sweep (softmax, biased inputs):
    the smallest input cosine (and s) of the sink regime (SINK_SCOPE_RULE), and the largest
    position-free rate (seeds' mean and single seeds) over the operating range of trained models'
    input cosines (`controls.INPUT_COSINE_RANGE`)."""
    from anisotropy_jax.studies.sweep.controls import INPUT_COSINE_RANGE

    m = _softmax_run(doc, "biased")["metrics"]
    cos, rate = m["input_cosine"]["mean"], m["attention_free_sink_rate"]
    norms = doc["bias_norms"]
    sinks = [i for i in range(len(norms)) if rate["mean"][i] > SINK_REGIME]
    low, high = INPUT_COSINE_RANGE
    inside = [i for i in range(len(norms)) if low <= cos[i] <= high]
    first = (f"input cosine ≥ {cos[sinks[0]]:.3f} (s ≥ {norms[sinks[0]]:g}; rate "
             f"{rate['mean'][sinks[0]]:.3f})" if sinks else "at no s of the grid")
    seeds_max = max((run[i] for run in rate["per_seed"] for i in inside), default=float("nan"))
    mean_max = max((rate["mean"][i] for i in inside), default=float("nan"))
    in_range = (f"s = {norms[inside[0]]:.3g}–{norms[inside[-1]]:.3g} (input cosine "
                f"{cos[inside[0]]:.3f}–{cos[inside[-1]]:.3f}): largest position-free rate "
                f"{mean_max:.3f} (seeds' mean), {seeds_max:.3f} (any seed)" if inside
                else "no s of the grid")
    return _markdown(["claim", "rule", "sink regime", "at trained models' input cosines "
                      f"({low}–{high})"],
                     [["categorical attention (one untrained post-LN block, common bias) is a "
                       "sink", SINK_SCOPE_RULE, first, in_range]])


TABLES = {"control": control_table, "default": default_table, "closed_forms": closed_forms_table,
          "closed_forms_all": closed_forms_all_table, "controls_entropy": controls_entropy_table,
          "controls_agreement": controls_agreement_table,
          "controls_differences": controls_differences_table,
          "controls_identities": controls_identities_table,
          "normalizations": normalizations_table,
          "normalizations_control": normalizations_control_table,
          "sink_rates": sink_rates_table, "sink_scope": sink_scope_table}


def render(kind: str, path: str | pathlib.Path) -> str:
    """The table of `kind` from the results.json at `path`."""
    if kind not in TABLES:
        raise ValueError(f"unknown table {kind!r}; choose one of {sorted(TABLES)}")
    return TABLES[kind](results.read_results(path))


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
