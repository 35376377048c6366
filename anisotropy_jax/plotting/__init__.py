"""Matplotlib figures, returned as `Figure` objects (no global pyplot state is left behind).

One module per study: `sweep` (untrained-block bias sweep), `dynamics` (training checkpoints),
`pretrained` (layer-wise curves of pretrained models), `extreme` (sinks and massive activations
per layer). Save with `results.save_figure`.

Legends never sit on the data: a figure's legend is one legend of the figure, outside every
panel (`figure_legend`), its entries gathered from the panels and each label listed once.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import matplotlib

matplotlib.use("Agg")  # headless by default; notebooks may switch backends before importing.

from matplotlib.figure import Figure  # noqa: E402


def new_figure(ncols: int = 1, nrows: int = 1, width: float = 5.0, height: float = 3.6):
    """(Figure, axes) without touching pyplot's global figure registry."""
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def legend_entries(axes: Iterable[Any]) -> tuple[list[Any], list[str]]:
    """(handles, labels) of every labelled artist of `axes`, each label once, in drawing order."""
    handles, labels = [], []
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    return handles, labels


def figure_legend(fig: Any, axes: Iterable[Any] | None = None, where: str = "right",
                  handles: Sequence[Any] | None = None, labels: Sequence[str] | None = None,
                  **kwargs: Any):
    """One legend for the figure, outside its panels: to the right of them (`where="right"`,
    one column) or below them (`where="bottom"`, in rows). Its entries are `handles` and
    `labels`, or those of `axes` (default: every axes of the figure) each label once. The
    figure's constrained layout makes room for it. None when there is nothing to name."""
    if handles is None:
        handles, labels = legend_entries(fig.axes if axes is None else axes)
    if not handles:
        return None
    options = {"fontsize": 8, "frameon": False}
    if where == "bottom":
        options.update(loc="outside lower center", ncols=min(len(handles), 4))
    else:
        options.update(loc="outside right center")
    options.update(kwargs)
    return fig.legend(list(handles), list(labels), **options)
