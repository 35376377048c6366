"""Files and the printed table of the extreme-token study (docs/EXTREME.md).

`write(result, workdir, provenance)` writes, each atomically (`anisotropy_jax.results`):
  config.json     the ExtremeConfig
  summary.md      `format_report`: per model and input kind, per layer, trained against the
                  untrained seeds' mean
  figures/<kind>_by_layer.png  per input kind: sink rate, largest |activation| / median and
                  top-PC share per layer, one line per model beside its untrained seeds' band
                  (`plotting.extreme`)
  results.json    LAST: provenance, extreme_config, models (name → model, data, seeds, timing,
                  storage_bytes, inputs: kind → trained / untrained, `summary.input_summary`),
                  skipped (name → why), epsilon
"""
from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Mapping

from anisotropy_jax import results as results_lib
from anisotropy_jax.plotting import extreme as plots

# (part, metric, column title, format, what the title abbreviates) of the printed table.
COLUMNS = (("attention", "sink_rate", "sink", "{:.2f}", "sink rate (α_0 > ε)"),
           ("attention", "free_sink_rate", "free", "{:.2f}",
            "position-free sink rate (max_k α_k > ε)"),
           ("attention", "noop_score", "noop", "{:.2f}", "no-op score α_0·‖v_0‖ / mean ‖v‖"),
           ("attention", "shared_share_sink_heads", "shared/exc", "{:.2f}",
            "the shared term's share of key 0's logit excess in the sink heads"),
           ("states", "massive_top_ratio", "top/med", "{:.0f}",
            "largest |activation| / its sequence's median"),
           ("states", "kurtosis", "kurt", "{:.1f}", "kurtosis of the activations"),
           ("states", "inf_norm", "inf", "{:.1f}", "∞-norm of the activations"),
           ("states", "cc_top_share", "cc_top", "{:.2f}",
            "top-3 dimensions' share of the average cosine"),
           ("states", "top_pc_share", "pc1", "{:.2f}", "top principal component's share of variance"),
           ("states", "top_pc_share_without_first", "pc1-first", "{:.2f}",
            "pc1 without each sequence's first token"),
           ("states", "twonn_dimension", "TwoNN", "{:.1f}", "TwoNN intrinsic dimension"))
# The line under the tables: each abbreviated column title and what it stands for.
COLUMN_LEGEND = ("Columns: " + "; ".join(f"{c[2]} = {c[4]}" for c in COLUMNS)
                 + " (docs/EXTREME.md, \"What is measured, per layer\"); – = undefined.")


def summary(result: Mapping[str, Any], provenance: dict[str, Any]) -> dict[str, Any]:
    """The results.json dict."""
    config = result["config"]
    return {"provenance": provenance, "extreme_config": dataclasses.asdict(config),
            "epsilon": config.epsilon, "models": result["models"], "skipped": result["skipped"]}


def _cell(values: list[Any] | None, i: int, fmt: str) -> str:
    if values is None or i >= len(values) or values[i] is None:
        return "–"
    return fmt.format(values[i])


def _table(entry: Mapping[str, Any], labels: list[str]) -> list[str]:
    """Rows per state: trained (untrained mean); attention layer i is state i's block (state 0,
    the embeddings, has none)."""
    trained = entry.get("trained")
    mean = entry["untrained"]["mean"]
    lines = ["| state | " + " | ".join(c[2] for c in COLUMNS) + " |",
             "|" + "---|" * (len(COLUMNS) + 1)]
    for s, label in enumerate(labels):
        cells = []
        for part, key, _, fmt, _ in COLUMNS:
            i = s - 1 if part == "attention" else s
            if i < 0:
                cells.append("")
                continue
            ours = _cell(trained[part].get(key), i, fmt) if trained else "–"
            cells.append(f"{ours} ({_cell(mean[part].get(key), i, fmt)})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def format_report(doc: Mapping[str, Any], workdir: Any = None) -> str:
    """Per model and input kind, the per-state table: trained (mean of the untrained seeds);
    the attention columns of a state are those of the block that produced it; COLUMN_LEGEND
    under the tables."""
    lines = [f"Extreme tokens, ε = {doc['epsilon']}; cells: trained (untrained mean)"]
    for name, model in doc["models"].items():
        m = model["model"]
        lines.append(f"\n## {name} ({m['family']}, {m['modality']}, seeds {model['seeds']}; "
                     f"{model['storage_bytes']['per_model']:,} bytes of statistics)")
        for kind, entry in model["inputs"].items():
            lines += [f"\n### {kind} ({entry.get('num_tokens')} tokens)", ""]
            lines += _table(entry, m["state_labels"])
    if doc["models"]:
        lines += ["", COLUMN_LEGEND]
    for name, why in doc["skipped"].items():
        lines.append(f"\nskipped {name}: {why}")
    return "\n".join(lines)


INTERVENTION_LEGEND = (
    "Cells: the mean over sequences; μ over positions ≥ 1, every token rescaled to its norm "
    "(fixed_norm). \\|μ\\|/\\|h\\| = ‖μ‖ / the mean token norm (positions ≥ 1); \\|h0\\|/\\|h\\| = "
    "position 0's mean norm / the same; H = the unmodified H/ln n; ΔH, Δmax, Δcos = the change "
    "of H/ln n, of the largest weight and of the row cosine with the common component removed, "
    "then the random control's mean [min, max over directions]; ×0.5, ×2, own = ΔH with the "
    "component scaled by 0.5, by 2, or replaced by each sequence's own mean.")


def _intervention_rows(model: Mapping[str, Any]) -> list[str]:
    """One row per block of one model (INTERVENTION_LEGEND)."""
    lines = ["| block | \\|μ\\|/\\|h\\| | \\|h0\\|/\\|h\\| | H | ΔH | ΔH random | Δmax | "
             "Δmax random | Δcos | Δcos random | ×0.5 | ×2 | own |", "|" + "---|" * 13]

    def mean(values):
        return sum(values) / len(values)

    for layer in model["layers"]:
        arms, rnd = layer["arms"], layer["random"]["without_first/fixed_norm"]
        cells = [f"{layer['mean_norm']['without_first'] / layer['token_norm']:.3f}",
                 f"{layer['first_token_norm'] / layer['token_norm']:.1f}",
                 f"{mean(layer['baseline']['entropy']):.3f}"]
        for metric in ("entropy", "max_weight", "row_cosine"):
            each = rnd["per_direction"][metric]
            cells += [f"{mean(arms['remove_mean/without_first/fixed_norm'][metric]):+.4f}",
                      f"{mean(each):+.4f} [{min(each):+.4f}, {max(each):+.4f}]"]
        cells += [f"{mean(arms[f'{op}/without_first/fixed_norm']['entropy']):+.4f}"
                  for op in ("scale_0.5", "scale_2", "own_mean")]
        lines.append(f"| {layer['layer']} | " + " | ".join(cells) + " |")
    return lines


def format_intervention(doc: Mapping[str, Any]) -> str:
    """Per model, the intervention's per-block table (`_intervention_rows`)."""
    lines = ["Godey 3 inside trained networks: the common component of each block's input, "
             "and that block's attention"]
    for name, model in doc["models"].items():
        m = model["model"]
        lines += [f"\n## {name} ({m['family']}, {len(model['layers'])} blocks; "
                  f"{model['num_sequences']} sequences × ≤ {model['seq_len']} tokens, "
                  f"{model['num_tokens']} real; {model['num_directions']} random directions; "
                  f"{model['seconds']:.0f} s)", ""] + _intervention_rows(model)
    lines += ["", INTERVENTION_LEGEND]
    for name, why in doc["skipped"].items():
        lines.append(f"\nskipped {name}: {why}")
    return "\n".join(lines)


def is_intervention(doc: Mapping[str, Any]) -> bool:
    """Whether a results.json dict (or a study's result) holds the intervention's measurement."""
    config = doc.get("extreme_config", doc.get("config"))
    measure = config.get("measure") if isinstance(config, Mapping) else config.measure
    return measure == "intervention"


def write(result: Mapping[str, Any], workdir: Any, provenance: results_lib.Provenance
          ) -> dict[str, Any]:
    """config.json, summary.md, the figures (not for the intervention), results.json (last);
    returns the results.json dict."""
    workdir = pathlib.Path(workdir)
    results_lib.write_json(workdir / "config.json", result["config"])
    doc = results_lib.to_jsonable(summary(result, provenance.finish("extreme")))
    if is_intervention(doc):
        results_lib.write_text(workdir / "summary.md", format_intervention(doc) + "\n")
        results_lib.write_json(workdir / "results.json", doc)
        return doc
    results_lib.write_text(workdir / "summary.md", format_report(doc) + "\n")
    for kind, fig in plots.figures(doc["models"]).items():
        results_lib.save_figure(fig, workdir / "figures" / f"{kind}_by_layer.png")
    results_lib.write_json(workdir / "results.json", doc)
    return doc


def storage_table(folder: Any) -> str:
    """Per model of the results under `folder` (`claims.load`): layers, the bytes of per-layer
    statistics per forward and per model (`storage_bytes`), the size of its results.json on
    disk, and the wall time of the trained forward and of each untrained seed (s, compilation
    included). The table of docs/EXTREME.md "Storage" (doc_tables kind
    `extreme_storage`)."""
    from anisotropy_jax.studies.extreme import claims

    sizes = {}  # of the file `claims.load` takes a model's entry from: its shallowest
    for path in sorted(pathlib.Path(folder).rglob("results.json"), key=lambda p: (len(p.parts), p)):
        for name in results_lib.read_results(path)["models"]:
            sizes.setdefault(name, path.stat().st_size)
    lines = ["| model | layers | per forward (bytes) | per model (bytes) | results.json (bytes) "
             "| wall (s): trained; untrained seeds |", "|---|---|---|---|---|---|"]
    for name, model in claims.load(folder).items():
        timing, stored = model["timing"], model["storage_bytes"]
        seeds = ", ".join(f"{timing[f'untrained_seed_{s}_seconds']:.0f}" for s in model["seeds"])
        lines.append(f"| {name} | {model['model']['num_layers']} | {stored['per_forward']:,} | "
                     f"{stored['per_model']:,} | {sizes[name]:,} | "
                     f"{timing['trained_seconds']:.0f}; {seeds} |")
    return "\n".join(lines) + "\n"


def _dimension_cells(values: list[Any]) -> str:
    """'embeddings → largest over the states i ≥ 1 (state i) → last' of one run's per-state
    estimates; '–' where undefined."""
    found = [(i, v) for i, v in enumerate(values) if v is not None and i > 0]
    if not found:
        return "–"
    peak = max(found, key=lambda iv: iv[1])
    first = "–" if values[0] is None else f"{values[0]:.1f}"
    last = "–" if values[-1] is None else f"{values[-1]:.1f}"
    return f"{first} → {peak[1]:.1f} (state {peak[0]}) → {last}"


def dimension_table(folder: Any) -> str:
    """Per model of the results under `folder`, natural inputs: TwoNN and GRIDE (8, 16) of the
    embeddings, their largest value over the later states (and where), and the last state; trained,
    and the mean over the untrained seeds (doc_tables kind `extreme_dimensions`)."""
    from anisotropy_jax.studies.extreme import claims

    lines = ["| model | TwoNN, trained | TwoNN, untrained mean | GRIDE (8, 16), trained | "
             "GRIDE (8, 16), untrained mean |", "|---|---|---|---|---|"]
    for name, model in claims.load(folder).items():
        entry = model["inputs"]["natural"]
        trained, mean = entry["trained"]["states"], entry["untrained"]["mean"]["states"]
        if "twonn_dimension" not in trained:
            continue
        lines.append(f"| {name} | " + " | ".join(_dimension_cells(run[key]) for key in (
            "twonn_dimension", "gride_dimension") for run in (trained, mean)) + " |")
    return "\n".join(lines) + "\n"


# The quantisation control's columns (benchmarks/quantisation_control.py "headline"): key,
# title, format; the first three also show their change from the float32 weights.
QUANTISATION_COLUMNS = (("max_kurtosis", "kurtosis", "{:,.1f}"),
                        ("max_abs_activation", "max \\|activation\\|", "{:,.1f}"),
                        ("max_top_ratio", "top/median", "{:,.0f}×"),
                        ("max_sink_rate", "max sink rate", "{:.2f}"),
                        ("mean_sink_rate", "mean sink rate", "{:.3f}"),
                        ("sink_blocks", "blocks > 0.5", "{}"))


def quantisation_table(folder: Any) -> str:
    """Per model of every *.json under `folder` (benchmarks/quantisation_control.py) and per
    weight type: the share of the parameters quantised, their relative RMS error, and the
    headline metrics over the states i ≥ 1 and the blocks, the first three with their change
    from float32 (docs/EXTREME.md "Quantisation control"; doc_tables kind
    `extreme_quantisation`)."""
    from anisotropy_jax.models import packaged

    titles = " | ".join(title for _, title, _ in QUANTISATION_COLUMNS)
    lines = [f"| model | weights | quantised | weight error | {titles} |",
             "|---|---|---|---|" + "---|" * len(QUANTISATION_COLUMNS)]
    for path in sorted(pathlib.Path(folder).glob("*.json")):
        for name, model in results_lib.read_results(path)["models"].items():
            base, entry = model["kinds"]["float32"]["headline"], packaged.find(name)
            name = entry.title if entry is not None else name  # the offline model's own name
            for kind, entry in model["kinds"].items():
                counts, head = entry["parameters"], entry["headline"]
                share = ("–" if counts is None else
                         f"{counts['quantised'] / (counts['quantised'] + counts['kept']):.1%}")
                error = "–" if counts is None else f"{counts['rel_rmse']:.4f}"
                cells = []
                for i, (key, _, fmt) in enumerate(QUANTISATION_COLUMNS):
                    cell = fmt.format(head[key])
                    if i < 3 and counts is not None:
                        cell += f" ({head[key] / base[key] - 1:+.1%})"
                    cells.append(cell)
                lines.append(f"| {name} | {kind} | {share} | {error} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"
