"""The grid's summary: per dataset and normalisation, each metric of the last checkpoint as a
mean with a 95% Student-t interval over the seeds (the seeds are the independent units), the
markdown table and the figure (metric against normalisation, one column per dataset)."""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from anisotropy_jax.metrics.correlation import t_interval
from anisotropy_jax.plotting import new_figure
from anisotropy_jax.studies.normalizations.grid import METRICS

UNITS = "seeds: independent training runs (initialisation and data stream change with the seed)"
INTERVAL = ("95% Student-t interval over seeds of the last checkpoint's value: mean ± "
            "t(0.975, n−1)·s/√n")
# Table columns: (metric, header, format). A results file that predates a metric lacks its
# column (`columns`).
COLUMNS = (("val_loss", "val loss", "{:.3f}"), ("cross_sequence_cosine", "cross-seq cos", "{:.3f}"),
           ("centered_average_cosine", "centred cos", "{:.3f}"), ("sink_rate", "sink rate", "{:.2f}"),
           ("massive_top_ratio", "max/median", "{:.1f}"), ("kurtosis", "kurtosis", "{:.1f}"),
           ("abs_cos_qk", "abs cos(q̄,k̄)", "{:.3f}"),
           ("attention_entropy_normalized", "H/ln n", "{:.3f}"),
           ("attention_max", "max weight", "{:.3f}"),
           ("attention_query_agreement", "agreement", "{:.3f}"),
           ("attention_mass", "mass", "{:.3f}"), ("attention_zero_mass_share", "zero-mass", "{:.3f}"),
           ("rankme_last", "RankMe (last)", "{:.1f}"), ("alpha_req_last", "α-ReQ (last)", "{:.2f}"))


def columns(cell: Mapping[str, Any]) -> tuple[tuple[str, str, str], ...]:
    """The COLUMNS that `cell` (a cell of results.json) has."""
    return tuple(c for c in COLUMNS if c[0] in cell)


def _plain(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def cell_summary(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """{metric: {per_seed, mean, low, high, n}} of the seeds' last checkpoints, and the loss
    floor (mean over seeds; None for text) and the step."""
    out: dict[str, Any] = {"seeds": [r["seed"] for r in runs], "step": runs[0]["steps"][-1]}
    for name in METRICS:
        per_seed = np.array([r["series"][name][-1] for r in runs], np.float64)
        stats = t_interval(per_seed)
        out[name] = {"per_seed": [_plain(v) for v in per_seed], "mean": _plain(stats["mean"]),
                     "low": _plain(stats["low"]), "high": _plain(stats["high"]),
                     "n": stats["n"]}
    floors = [r["loss_floor"] for r in runs]
    out["loss_floor"] = None if None in floors else float(np.mean(floors))
    return out


def _cell_text(cell: Mapping[str, Any], name: str, fmt: str) -> str:
    entry = cell[name]
    if entry["mean"] is None:
        return "nan"
    if entry["low"] is None:
        return fmt.format(entry["mean"])
    return f"{fmt.format(entry['mean'])} [{fmt.format(entry['low'])}, {fmt.format(entry['high'])}]"


def markdown_table(cells: Mapping[str, Mapping[str, Any]]) -> str:
    """One table per dataset: a row per normalisation, mean [95% t-interval] per metric."""
    lines = []
    for dataset, by_norm in cells.items():
        first = next(iter(by_norm.values()))
        floor = first.get("loss_floor")
        extra = f"; loss floor {floor:.3f} nats/token" if floor is not None else ""
        shown = columns(first)
        lines += [f"### {dataset} (step {first['step']}, {len(first['seeds'])} seeds{extra})", "",
                  "| normalisation | " + " | ".join(h for _, h, _ in shown) + " |",
                  "| --- |" + " --- |" * len(shown)]
        for norm, cell in by_norm.items():
            lines.append(f"| {norm} | " + " | ".join(_cell_text(cell, n, f) for n, _, f in shown)
                         + " |")
        lines.append("")
    return "\n".join(lines)


def figure(cells: Mapping[str, Mapping[str, Any]]):
    """Each metric (rows) against the normalisation, one column per dataset: the seeds' mean
    with its 95% t-interval, and each seed as a dot."""
    datasets = list(cells)
    shown = columns(next(iter(cells[datasets[0]].values())))
    fig, axes = new_figure(ncols=len(datasets), nrows=len(shown), width=4.2, height=2.0)
    for col, dataset in enumerate(datasets):
        norms = list(cells[dataset])
        x = np.arange(len(norms))
        for row, (name, header, _) in enumerate(shown):
            ax = axes[row, col]
            entries = [cells[dataset][n][name] for n in norms]
            mean = np.array([np.nan if e["mean"] is None else e["mean"] for e in entries])
            low = np.array([np.nan if e["low"] is None else e["low"] for e in entries])
            high = np.array([np.nan if e["high"] is None else e["high"] for e in entries])
            ax.errorbar(x, mean, yerr=[mean - low, high - mean], fmt="o", capsize=4, color="C0")
            for i, e in enumerate(entries):
                seeds = [v for v in e["per_seed"] if v is not None]
                ax.plot(np.full(len(seeds), i + 0.15), seeds, ".", color="0.5", ms=4)
            ax.set_xticks(x, norms if row == len(shown) - 1 else [""] * len(norms),
                          rotation=30)
            ax.set_ylabel(header)
            if row == 0:
                ax.set_title(dataset)
    fig.suptitle("Last checkpoint: mean and 95% t-interval over seeds (grey: seeds)")
    return fig
