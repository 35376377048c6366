"""The outliers grid along training: one metric against the training step, one panel per arm
(each seed a thin line, the mean over seeds bold), from `arms` of one dataset ({arm: [run per
seed]}, a run {"steps": [...], "series": {metric: [...]}}: the grid's grid_run.json records).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from anisotropy_jax.plotting import figure_legend, new_figure


def metric_by_step(by_arm: Mapping[str, Sequence[Mapping[str, Any]]], metric: str, *,
                   label: str | None = None, log_y: bool = False, threshold: float | None = None):
    """Figure: `metric` (y) against the training step (x, symlog), one panel per arm, shared y.
    `threshold` draws a dashed line (e.g. the control's 100× for massive_top_ratio). Arms whose
    runs lack the metric get an empty panel saying so."""
    arms = list(by_arm)
    fig, axes = new_figure(ncols=len(arms), width=3.2, height=2.8)
    for ax, arm in zip(axes[0], arms):
        runs = [r for r in by_arm[arm] if metric in r["series"]]
        ax.set_title(arm)
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlabel("training step")
        if not runs:
            ax.text(0.5, 0.5, f"no {metric}", ha="center", va="center", transform=ax.transAxes)
            continue
        for i, run in enumerate(runs):
            ax.plot(run["steps"], run["series"][metric], color="0.6", lw=0.8,
                    marker="o" if len(run["steps"]) == 1 else None, ms=3,  # one checkpoint
                    label="one seed" if i == 0 else None)
        steps = runs[0]["steps"]
        same = [np.asarray(r["series"][metric], np.float64) for r in runs if r["steps"] == steps]
        ax.plot(steps, np.nanmean(same, axis=0), color="C0", lw=2,
                label=f"mean over {len(same)} seed{'s' * (len(same) > 1)}")
        if threshold is not None:
            ax.axhline(threshold, color="C3", ls="--", lw=1, label=f"{threshold:g}")
        if log_y:
            ax.set_yscale("log")
    for ax in axes[0][1:]:
        ax.sharey(axes[0][0])
    axes[0][0].set_ylabel(label or metric)
    figure_legend(fig, axes[0])
    return fig
