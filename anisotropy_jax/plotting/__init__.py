"""Matplotlib figures, returned as `Figure` objects (no global pyplot state is left behind).

One module per study: `sweep` (untrained-block bias sweep), `dynamics` (training checkpoints),
`pretrained` (layer-wise curves of pretrained models). Save with `results.save_figure`.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # headless by default; notebooks may switch backends before importing.

from matplotlib.figure import Figure  # noqa: E402


def new_figure(ncols: int = 1, nrows: int = 1, width: float = 5.0, height: float = 3.6):
    """(Figure, axes) without touching pyplot's global figure registry."""
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes
