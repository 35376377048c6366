"""Figures of the depth study (docs/DEPTH.md), one claim per figure, returned as `Figure`.

Every function takes the depth sweep's results.json dict: `bias_norms`, `num_layers` and `stacks`
{name: {"architecture", "width", "curves": {metric: {"mean", "std"}: (s, layers 0..N)},
"depth_to_cosine_0.9": {...}, "theory": {...}}}. Colour = bias norm, line style = width.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
from matplotlib import colormaps

from anisotropy_jax.plotting import figure_legend, legend_entries, new_figure

Doc = Mapping[str, Any]
_STYLES = ("-", "--", "-.", ":", (0, (1, 3)), (0, (5, 1)))


def _layout(doc: Doc):
    archs = list(dict.fromkeys(st["architecture"] for st in doc["stacks"].values()))
    widths = sorted({st["width"] for st in doc["stacks"].values()})
    colors = colormaps["viridis"](np.linspace(0, 0.9, max(1, len(doc["bias_norms"]))))
    return archs, widths, colors


def _curves(ax, doc: Doc, arch: str, metric: str, log: bool = False) -> None:
    archs, widths, colors = _layout(doc)
    layers = np.arange(doc["num_layers"] + 1)
    for st in doc["stacks"].values():
        if st["architecture"] != arch:
            continue
        style = _STYLES[widths.index(st["width"]) % len(_STYLES)]
        mean = np.asarray(st["curves"][metric]["mean"], float)
        std = np.asarray(st["curves"][metric]["std"], float)
        for j, s in enumerate(doc["bias_norms"]):
            ax.plot(layers, mean[j], color=colors[j], linestyle=style,
                    label=f"s={s:g}, D={st['width']}")
            ax.fill_between(layers, mean[j] - std[j], mean[j] + std[j], color=colors[j],
                            alpha=0.12, linewidth=0)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("depth (0 = input)")
    ax.set_title(f"{arch}: {metric.replace('_', ' ')}")
    ax.grid(True, alpha=0.3)


def _legend_columns(fig) -> int:
    """Two legend columns where the figure names more than 12 (bias norm, width) pairs."""
    return 2 if len(legend_entries(fig.axes)[1]) > 12 else 1


def cosine_and_rank(doc: Doc):
    """Average cosine and effective rank (per sequence) against depth, per architecture (rows)
    and bias norm (colour); mean over seeds ± 1 std."""
    archs, _, _ = _layout(doc)
    fig, axes = new_figure(ncols=2, nrows=len(archs))
    for row, arch in enumerate(archs):
        _curves(axes[row, 0], doc, arch, "average_cosine")
        axes[row, 0].axhline(0.9, color="grey", linewidth=0.8, linestyle=":")
        _curves(axes[row, 1], doc, arch, "effective_rank")
    figure_legend(fig, ncols=_legend_columns(fig))
    return fig


def depth_to_cosine(doc: Doc):
    """First depth whose mean cosine reaches 0.9, against width, per (architecture, bias norm);
    stacks that never reach it are drawn at N + 1 with an open marker."""
    archs, widths, colors = _layout(doc)
    n = doc["num_layers"]
    fig, axes = new_figure(ncols=len(archs))
    for col, arch in enumerate(archs):
        ax = axes[0, col]
        for j, s in enumerate(doc["bias_norms"]):
            xs, ys, never = [], [], []
            for st in doc["stacks"].values():
                if st["architecture"] == arch:
                    d = st["depth_to_cosine_0.9"]["mean_curve"][j]
                    (xs if d is not None else never).append(st["width"])
                    if d is not None:
                        ys.append(d)
            order = np.argsort(xs)
            ax.plot(np.asarray(xs)[order], np.asarray(ys)[order], "o-", color=colors[j],
                    label=f"s={s:g}")
            ax.plot(never, [n + 1] * len(never), "o", mfc="none", color=colors[j])
        ax.set_xscale("log", base=2)
        ax.set_xticks(widths, [str(w) for w in widths])
        ax.set_ylim(-0.5, n + 1.5)
        ax.set_xlabel("width D")
        ax.set_ylabel("depth where cosine ≥ 0.9 (N + 1 = never)")
        ax.set_title(arch)
        ax.grid(True, alpha=0.3)
    figure_legend(fig)
    return fig


def theory(doc: Doc):
    """Left: pre-LN mean squared token norm against depth with the closed-form band c ∈ [1/L, 1].
    Right: pure attention's rank-1 residual with the cubic recursion fitted on layers 1–2."""
    _, widths, colors = _layout(doc)
    fig, axes = new_figure(ncols=2)
    for st in doc["stacks"].values():
        style = _STYLES[widths.index(st["width"]) % len(_STYLES)]
        for j, entry in enumerate(st["theory"].get("pre_ln_norm_growth", {})
                                  .get("per_bias_norm", [])):
            layers = np.arange(len(entry["measured_sq"]))
            axes[0, 0].plot(layers, entry["measured_sq"], color=colors[j], linestyle=style,
                            label=f"s={entry['bias_norm']:g}, D={st['width']}")
            axes[0, 0].fill_between(layers, entry["lower"], entry["upper"], color=colors[j],
                                    alpha=0.15, linewidth=0)
        for j, entry in enumerate(st["theory"].get("pure_attention_collapse", [])):
            layers = np.arange(1, len(entry["measured"]) + 1)
            axes[0, 1].plot(layers, entry["measured"], color=colors[j], linestyle=style,
                            label=f"s={entry['bias_norm']:g}, D={st['width']}")
            if "predicted" in entry:
                pred = np.asarray(entry["predicted"], float)
                keep = pred > 0
                axes[0, 1].plot(layers[keep], pred[keep], "x", color=colors[j])
    axes[0, 0].set_title("pre-LN: mean ||x_l||² (band: closed form)")
    axes[0, 1].set_title("pure attention: rank-1 residual (x: cubic recursion)")
    axes[0, 1].set_yscale("log")
    for ax in axes[0]:
        ax.set_xlabel("depth")
        ax.grid(True, alpha=0.3)
    figure_legend(fig, ncols=_legend_columns(fig))
    return fig


FIGURES = {"cosine_rank_vs_depth": cosine_and_rank, "depth_to_cosine_vs_width": depth_to_cosine,
           "theory": theory}
