"""Figures of the embedding-isotropy study (docs/EMBEDDINGS.md), returned as `Figure`.

`isotropy` and `training` take the study's results.json dict: `widths`, `steps`, `isotropy`
{key: {"per_seed": (W, S, C)}}, `stats` {key: (W, S, C)}, `val_loss` (W, S, C). `svd_grid` takes
one width's projections {"<matrix>_<raw|centered>": (C, V, 2)}. Colour = width; x = training step
on a symlog axis (0 = the init).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
from matplotlib import colormaps

from anisotropy_jax.plotting import figure_legend, new_figure

Doc = Mapping[str, Any]
MATRICES = ("input", "output", "output_scaled")
ROWS = MATRICES + ("output_meangain",)  # + the control: output × mean gain
VARIANTS = ("raw", "centered")
CONVENTIONS = {"one_sign": "-", "sign_free": "--"}


def _colors(n: int):
    return colormaps["viridis"](np.linspace(0, 0.85, max(n, 1)))


def _band(ax, steps, values_SxC, color, style, label) -> None:
    """Mean over seeds, with the min–max range shaded when there are several seeds."""
    values = np.asarray(values_SxC, float)
    ax.plot(steps, values.mean(axis=0), color=color, linestyle=style, label=label)
    if values.shape[0] > 1:
        ax.fill_between(steps, values.min(axis=0), values.max(axis=0), color=color, alpha=0.15,
                        linewidth=0)


def _step_axis(ax) -> None:
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(left=0)
    ax.set_xlabel("training step (symlog)")
    ax.grid(True, alpha=0.3)


def _y_scale(ax) -> None:
    """Log y when the curves span more than a decade, else linear (values near 1)."""
    low, high = ax.get_ylim()
    if low > 0 and high / low > 10:
        ax.set_yscale("log")


def isotropy(doc: Doc):
    """Partition isotropy against the step: rows = matrix (the last: the output × mean gain
    control), columns = raw, centred, and raw rescaled to mean row norm 1 (control); solid =
    one-sign convention (Machina & Mercer's), dashed = sign-free, dotted = an isotropic Gaussian
    of the raw matrix's norm (sign-free)."""
    widths, steps, iso = doc["widths"], np.asarray(doc["steps"], float), doc["isotropy"]
    columns = ("raw", "centered", "unitnorm_raw")
    fig, axes = new_figure(ncols=len(columns), nrows=len(ROWS), width=4.2, height=2.8)
    for row, matrix in enumerate(ROWS):
        for col, variant in enumerate(columns):
            ax = axes[row, col]
            if f"{matrix}_{variant}_sign_free" not in iso:
                ax.axis("off")
                continue
            for i, (width, color) in enumerate(zip(widths, _colors(len(widths)))):
                for convention, style in CONVENTIONS.items():
                    _band(ax, steps, iso[f"{matrix}_{variant}_{convention}"]["per_seed"][i],
                          color, style, f"D={width}, {convention.replace('_', ' ')}")
                gaussian = iso.get(f"{matrix}_gaussian_raw_sign_free")
                if variant == "raw" and gaussian is not None:
                    _band(ax, steps, gaussian["per_seed"][i], color, ":",
                          f"D={width}, Gaussian of equal norm")
            _y_scale(ax)
            ax.set_title(f"{matrix.replace('_', ' ')}, {variant.replace('_', ' ')}", fontsize=10)
            ax.set_ylabel("partition isotropy")
            _step_axis(ax)
    figure_legend(fig)
    return fig


def training(doc: Doc):
    """Validation loss, mean row norm and relative drift ‖mean row‖ / mean ‖row‖ of the input
    (solid) and output (dashed) embeddings against the step."""
    widths, steps = doc["widths"], np.asarray(doc["steps"], float)
    fig, axes = new_figure(ncols=3, nrows=1, width=4.2, height=3.2)
    for i, (width, color) in enumerate(zip(widths, _colors(len(widths)))):
        _band(axes[0, 0], steps, doc["val_loss"][i], color, "-", f"D={width}")
        for matrix, style in (("input", "-"), ("output", "--")):
            for ax, stat in ((axes[0, 1], "mean_norm"), (axes[0, 2], "relative_drift")):
                _band(ax, steps, doc["stats"][f"{matrix}_{stat}"][i], color, style,
                      f"D={width}, {matrix}")
    for ax, title in zip(axes[0], ("validation loss (nats/token)", "mean row norm",
                                   "relative drift of the rows")):
        ax.set_title(title, fontsize=10)
        _step_axis(ax)
    axes[0, 1].set_yscale("log")
    figure_legend(fig)
    return fig


def pick_columns(num_steps: int, max_columns: int) -> list[int]:
    """Indices of at most `max_columns` steps, evenly spread, first and last included."""
    if num_steps <= max_columns:
        return list(range(num_steps))
    return sorted({int(round(x)) for x in np.linspace(0, num_steps - 1, max_columns)})


def svd_grid(projections: Mapping[str, np.ndarray], steps, width: int, counts=None,
             max_columns: int = 6):
    """Machina & Mercer's 2-D SVD view: each embedding matrix's rows on its two leading right
    singular vectors; rows = matrix (raw, centred), columns = checkpoints. Points are coloured by
    log10(1 + the token's count in the training stream) when `counts` (V,) is given."""
    names = [f"{m}_{v}" for m in MATRICES for v in VARIANTS]
    cols = pick_columns(len(steps), max_columns)
    color = None if counts is None else np.log10(1.0 + np.asarray(counts, float))
    fig, axes = new_figure(ncols=len(cols), nrows=len(names), width=2.1, height=2.0)
    for r, name in enumerate(names):
        for c, j in enumerate(cols):
            xy = np.asarray(projections[name][j])
            ax = axes[r, c]
            points = ax.scatter(xy[:, 0], xy[:, 1], s=0.5, alpha=0.5, c=color, cmap="plasma",
                                rasterized=True)
            ax.axhline(0, color="grey", linewidth=0.5)
            ax.axvline(0, color="grey", linewidth=0.5)
            ax.tick_params(labelsize=6)
            if r == 0:
                ax.set_title(f"D={width}, step {int(steps[j])}", fontsize=8)
            if c == 0:
                ax.set_ylabel(name.replace("_", " "), fontsize=8)
    if color is not None:
        fig.colorbar(points, ax=axes[:, -1], shrink=0.3, label="log10(1 + training count)")
    return fig
