"""Files and the printed table of a checkpoint-series run (experiments/series.py).

`write(result, workdir, provenance)` writes, each atomically (`anisotropy_jax.results`):
  config.json      the resolved SeriesConfig
  sentences.txt    the sentences measured, one per line
  report.txt       `format_report(summary(result))`
  series.npz       steps, layers_<metric> (S, states), heads_<metric> (S, layers, H),
                   embeddings_<name> (S,)
  figures/layers_vs_step.png  per-layer metrics against the step, one line per hidden state
  figures/heads_vs_step.png   head metrics (mean over the heads of a layer) against the step,
                   one line per layer (with head_analysis)
  results.json     LAST: provenance, config, model, steps, checkpoints, state labels, layers,
                   heads, embeddings, correlation, data, timing
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Any

import numpy as np

from anisotropy_jax import results as results_lib
from anisotropy_jax.plotting import figure_legend, new_figure
from anisotropy_jax.studies.pretrained.report import write_measured
from anisotropy_jax.studies.series.analysis import SeriesResult

LAYER_PANELS = ("average_cosine", "cross_sequence_cosine", "sampled_pair_cosine", "drift_norm",
                "relative_drift", "isoscore")
HEAD_PANELS = ("mean_query_norm", "mean_key_norm", "mean_query_key_cosine", "key_term_std",
               "attention_entropy_normalized", "attention_query_agreement")
TABLE_LAYER = ("average_cosine", "cross_sequence_cosine", "isoscore", "relative_drift")
TABLE_HEAD = ("mean_query_norm", "mean_key_norm", "mean_query_key_cosine", "key_term_std",
              "attention_entropy_normalized")


def summary(result: SeriesResult, provenance: dict[str, Any] | None = None) -> dict[str, Any]:
    """The results.json dict."""
    return {"provenance": provenance, "config": dataclasses.asdict(result.config),
            "model": result.model, "steps": result.steps, "checkpoints": result.checkpoints,
            "state_labels": result.labels, "layers": result.layers, "heads": result.heads,
            "embeddings": result.embeddings, "correlation": result.correlation,
            "data": result.data, "timing": result.timing}


def format_report(doc: dict[str, Any]) -> str:
    """Per checkpoint of a results.json dict (`summary`): the last hidden state's metrics and the
    head metrics averaged over all heads, plus ρ(entropy, key term) across heads."""
    last, heads, correlation = doc["state_labels"][-1], doc["heads"], doc["correlation"]
    lines = [f"per checkpoint; layer metrics of state {last!r}; head metrics = mean over "
             f"{' x '.join(map(str, np.shape(next(iter(heads.values())))[1:]))} heads"
             if heads else f"per checkpoint; layer metrics of state {last!r}"]
    names = TABLE_LAYER + (TABLE_HEAD if heads else ())
    lines.append("step       " + " ".join(f"{n[:12]:>12}" for n in names)
                 + ("   rho(H,key)" if correlation else ""))
    for s, step in enumerate(doc["steps"]):
        values = [np.asarray(doc["layers"][n])[s, -1] for n in TABLE_LAYER]
        values += [float(np.mean(np.asarray(heads[n])[s])) for n in TABLE_HEAD if heads]
        row = f"{int(step):<10} " + " ".join(f"{v:>12.4f}" for v in values)
        if correlation:
            row += f"   {correlation['key_term_std']['rho'][s]:+.3f}"
        lines.append(row)
    return "\n".join(lines)


def _curves(steps: np.ndarray, series: dict[str, np.ndarray], names, labels, title: str):
    """One panel per metric: value against the step (symlog x), one line per row label."""
    fig, axes = new_figure(ncols=3, nrows=(len(names) + 2) // 3, width=4.2, height=3.2)
    for i, name in enumerate(names):
        ax = axes[i // 3][i % 3]
        values = series[name]
        values = values.mean(axis=-1) if values.ndim == 3 else values  # heads: mean over H
        for j, label in enumerate(labels):
            ax.plot(steps, values[:, j], marker="o", ms=3, label=label,
                    color=f"C{j % 10}")
        ax.set_xscale("symlog", linthresh=1)
        ax.set(title=name, xlabel="step")
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    figure_legend(fig)
    fig.suptitle(title)
    return fig


def _arrays_and_figures(result: SeriesResult, workdir: pathlib.Path) -> None:
    arrays = {"steps": result.steps}
    for group in ("layers", "heads", "embeddings"):
        arrays.update({f"{group}_{k}": v for k, v in getattr(result, group).items()})
    results_lib.write_npz(workdir / "series.npz", arrays)
    name = pathlib.Path(result.config.series_dir).name
    results_lib.save_figure(_curves(result.steps, result.layers, LAYER_PANELS, result.labels,
                                    f"{name}: per-layer metrics"),
                            workdir / "figures" / "layers_vs_step.png")
    if result.heads:
        layers = [f"layer_{i + 1}" for i in range(result.heads[HEAD_PANELS[0]].shape[1])]
        results_lib.save_figure(_curves(result.steps, result.heads, HEAD_PANELS, layers,
                                        f"{name}: heads (mean over a layer's heads)"),
                                workdir / "figures" / "heads_vs_step.png")


def write(result: SeriesResult, workdir: str | os.PathLike,
          provenance: results_lib.Provenance) -> dict[str, Any]:
    """Writes every output file (module docstring), results.json last; returns its dict
    (the files of any run on sampled sentences: `pretrained.report.write_measured`)."""
    return write_measured(result, workdir, provenance, "series", summary, format_report,
                          _arrays_and_figures)
