"""Per-layer anisotropy of several models side by side, each beside its untrained
re-initialisation (notebooks/03_across_models.py).

A run is the results.json dict of the pretrained study (`studies.pretrained.report.summary`:
"model" {"state_labels"}, "layers", "metrics" {"trained"/"untrained": {name: [...]}}), of any
modality; `layer_curves` reads one metric of it into {"labels", "trained", "untrained"}.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from anisotropy_jax.plotting import figure_legend, new_figure
from anisotropy_jax.plotting.pretrained import LABELS, STYLES

Run = Mapping[str, Any]


def layer_curves(run: Run, metric: str = "average_cosine") -> dict[str, Any]:
    """{"labels": state names, "trained": [...], "untrained": [...] (when measured)} of one
    run."""
    labels = (run.get("model") or {}).get("state_labels") or [str(i) for i in run["layers"]]
    curves = {name: list(values[metric]) for name, values in run["metrics"].items()}
    return {"labels": list(labels), **curves}


def across_models_figure(runs: Mapping[str, Run], metric: str = "average_cosine",
                         ncols: int = 3):
    """One panel per model: `metric` against the hidden state (0 = embedding output), the trained
    weights (solid) beside the untrained re-initialisation (dashed)."""
    if not runs:
        raise ValueError("across_models_figure: no runs")
    ncols = min(ncols, len(runs))
    nrows = math.ceil(len(runs) / ncols)
    fig, axes = new_figure(ncols=ncols, nrows=nrows, width=4.2, height=3.2)
    for ax, (name, run) in zip(axes.flat, runs.items()):
        curves = layer_curves(run, metric)
        states = np.arange(len(curves["labels"]))
        for kind in ("trained", "untrained"):
            if kind in curves:
                ax.plot(states, curves[kind], label=kind, **STYLES[kind])
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("hidden state (0 = embedding output)", fontsize=8)
        ax.set_ylabel(LABELS.get(metric, metric), fontsize=8)
        ax.set_ylim(min(-0.05, ax.get_ylim()[0]), max(1.05, ax.get_ylim()[1]))
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(runs):]:
        ax.set_visible(False)
    figure_legend(fig)
    fig.suptitle(f"{LABELS.get(metric, metric)} per layer: trained vs untrained")
    return fig
