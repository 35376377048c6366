"""Figures of the extreme-token study (docs/EXTREME.md), one per input kind: per layer, Gu et
al.'s sink rate, the largest |activation| over its sequence's median (Sun et al.'s massive
activations are > 1,000×) and the top principal component's share of variance; one panel per
metric, one line per model (its trained weights), beside the band of its untrained seeds (min–max,
shaded in the model's colour). The legend is the figure's, beside the panels.

`models` is results.json's "models" ({name: {"model": {"state_labels", ...}, "inputs": {kind:
{"trained", "untrained": {"min", "max", ...}}}}}). The attention of block i belongs to state i,
so every panel has the states on its x axis: the state index where every model has as many, else
the relative depth i / N (0 = embeddings, 1 = last state).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
from matplotlib.patches import Patch

from anisotropy_jax.plotting import figure_legend, legend_entries, new_figure

Models = Mapping[str, Mapping[str, Any]]
MASSIVE_RATIO = 1000.0  # Sun et al.'s massive activation: > 1,000× the median (and > 100)
# (part, metric, y label, y scale) of each panel.
PANELS = (("attention", "sink_rate", "sink rate (share of (sequence, head) pairs, ε = 0.3)",
           "linear"),
          ("states", "massive_top_ratio", "largest |activation| / its sequence's median", "log"),
          ("states", "top_pc_share", "top principal component's share of variance", "linear"))


def input_kinds(models: Models) -> list[str]:
    """Every input kind of any model, in the order the models first have them."""
    return list(dict.fromkeys(kind for model in models.values() for kind in model["inputs"]))


def _values(values: Any) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in (values or [])], float)


def _states(model: Mapping[str, Any], part: str, count: int, relative: bool) -> np.ndarray:
    """The states of `count` values of `part`: 0, 1, … (states), 1, 2, … (attention: block i's
    at state i); as a share of the last state where `relative`."""
    states = np.arange(count, dtype=float) + (part == "attention")
    last = max(len(model["model"]["state_labels"]) - 1, 1)
    return states / last if relative else states


def _panel(ax, models: Models, kind: str, part: str, key: str, relative: bool) -> None:
    for i, (name, model) in enumerate(models.items()):
        entry = model["inputs"].get(kind)
        if entry is None or entry.get("trained") is None:
            continue
        trained = _values(entry["trained"][part].get(key))
        x = _states(model, part, len(trained), relative)
        color = f"C{i % 10}"
        ax.plot(x, trained, marker="o", ms=3, color=color, label=name)
        low = _values(entry["untrained"]["min"][part].get(key))
        high = _values(entry["untrained"]["max"][part].get(key))
        if low.size == trained.size:
            ax.fill_between(x, low, high, color=color, alpha=0.15, lw=0)


def layers_figure(models: Models, kind: str = "natural"):
    """The three panels (PANELS) of one input kind; a model without that kind is left out."""
    shown = {name: m for name, m in models.items() if kind in m["inputs"]}
    if not shown:
        raise ValueError(f"layers_figure: no model has the input kind {kind!r}")
    relative = len({len(m["model"]["state_labels"]) for m in shown.values()}) > 1
    fig, axes = new_figure(ncols=len(PANELS), width=4.6, height=3.6)
    for ax, (part, key, label, scale) in zip(axes[0], PANELS):
        _panel(ax, shown, kind, part, key, relative)
        ax.set_yscale(scale)
        ax.set_ylabel(label, fontsize=8)
        ax.set_xlabel("relative depth (0 = embeddings, 1 = last state)" if relative
                      else "state (0 = embeddings; block i's attention at state i)", fontsize=8)
        ax.grid(alpha=0.3)
        if key == "massive_top_ratio":
            ax.axhline(MASSIVE_RATIO, color="k", ls=":", lw=1, label="1,000× (massive)")
        elif scale == "linear":
            ax.set_ylim(-0.03, 1.03)
    handles, labels = legend_entries(axes[0])
    handles.append(Patch(color="0.5", alpha=0.3, lw=0))
    labels.append("untrained seeds: min–max\n(shaded, in the model's colour)")
    figure_legend(fig, handles=handles, labels=labels)
    fig.suptitle(f"Extreme tokens per layer, {kind} inputs: trained (line) beside the untrained "
                 f"seeds (band)", fontsize=10)
    return fig


def figures(models: Models) -> dict[str, Any]:
    """{kind: `layers_figure`} for every input kind of any model."""
    return {kind: layers_figure(models, kind) for kind in input_kinds(models)}
