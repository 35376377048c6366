"""Figures of the training-dynamics analysis (anisotropy_jax.studies.dynamics). The trajectory,
scatter and heatmap figures take a mapping with "steps", "heads", "layers" and optionally
"correlation" and "objective"; the loss figure takes the loss curves as arrays.

Steps span decades and start at 0, so the step axis is symlog (linear below 1, logarithmic above).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from matplotlib import colors

from anisotropy_jax.plotting import new_figure


def _step_axis(ax) -> None:
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(left=0)
    ax.set_xlabel("training step (symlog)")


def _layer_colors(n: int):
    import matplotlib

    cmap = matplotlib.colormaps["viridis"]
    return [cmap(i / max(n - 1, 1)) for i in range(n)]


def trajectories_figure(analysis: dict[str, Any]):
    """Per-head query/key geometry, sharpness and per-layer anisotropy vs training step.

    Thin lines: individual heads (coloured by layer); thick: mean over the heads of a layer.
    """
    steps = np.asarray(analysis["steps"])
    heads, layers = analysis["heads"], analysis["layers"]
    panels = [("mean_query_norm", "‖mean q‖"), ("mean_key_norm", "‖mean k‖"),
              ("mean_query_key_cosine", "cos(mean q, mean k)"),
              ("mean_query_key_dot", "mean q · mean k / √d_head"),
              ("attention_entropy_normalized", "attention entropy / ln(visible keys)"),
              ("first_position_mass", "attention mass on position 0")]
    fig, axes = new_figure(ncols=4, nrows=2, width=4.0, height=3.2)
    num_layers = heads["mean_query_norm"].shape[1]
    palette = _layer_colors(num_layers + 1)
    for ax, (name, label) in zip(axes.flat, panels):
        values = np.asarray(heads[name])  # (S, layers, H)
        for layer in range(num_layers):
            ax.plot(steps, values[:, layer, :], color=palette[layer], lw=0.6, alpha=0.5)
            ax.plot(steps, values[:, layer, :].mean(-1), color=palette[layer], lw=2.0,
                    label=f"layer {layer}")
        if name == "mean_query_key_cosine":
            ax.axhline(0.0, color="grey", lw=0.8, ls=":")
        ax.set_ylabel(label)
        _step_axis(ax)
    axes.flat[0].legend(fontsize=7)
    for ax, (name, label) in zip(axes.flat[6:], [("cross_sequence_cosine",
                                                   "cross-sequence avg cosine"),
                                                  ("relative_drift", "‖mean h‖ / mean ‖h‖")]):
        values = np.asarray(layers[name])  # (S, layers + 1)
        for i in range(values.shape[1]):
            ax.plot(steps, values[:, i], color=palette[i], lw=1.5,
                    label="embeddings" if i == 0 else f"block {i - 1} out")
        ax.set_ylabel(f"hidden states: {label}")
        _step_axis(ax)
    axes.flat[6].legend(fontsize=7)
    fig.suptitle(f"{analysis.get('objective', '')}: query/key dynamics along training")
    return fig


def cosine_vs_entropy_figure(analysis: dict[str, Any]):
    """Per-head |cos(mean q, mean k)| and |mean q·mean k|/√d against normalised entropy, one
    point per (checkpoint, layer, head), coloured by step (log colour scale)."""
    steps = np.asarray(analysis["steps"])
    heads = analysis["heads"]
    entropy = np.asarray(heads["attention_entropy_normalized"])
    step_grid = np.broadcast_to(steps[:, None, None], entropy.shape)
    norm = colors.LogNorm(vmin=1, vmax=max(int(steps.max()), 2) + 1)
    fig, axes = new_figure(ncols=2, width=4.8, height=3.8)
    for ax, name, label in ((axes[0, 0], "mean_query_key_cosine", "|cos(mean q, mean k)|"),
                            (axes[0, 1], "mean_query_key_dot", "|mean q · mean k| / √d_head")):
        x = np.abs(np.asarray(heads[name])).reshape(-1)
        points = ax.scatter(x, entropy.reshape(-1), c=step_grid.reshape(-1) + 1, norm=norm,
                            s=10, cmap="plasma")
        ax.set_xlabel(label)
        ax.set_ylabel("attention entropy / ln(visible keys)")
        if name == "mean_query_key_dot" and np.all(x > 0):
            ax.set_xscale("log")
    corr = analysis.get("correlation")
    if corr is not None:
        axes[0, 1].set_title(f"Spearman ρ (pooled) = {corr['pooled']:.2f}", fontsize=9)
    fig.colorbar(points, ax=axes[0, 1], label="training step + 1")
    return fig


def anisotropy_heatmap_figure(analysis: dict[str, Any], metric: str = "cross_sequence_cosine"):
    """Layer × checkpoint heatmap of a hidden-state metric (default: cross-sequence cosine)."""
    steps = np.asarray(analysis["steps"])
    values = np.asarray(analysis["layers"][metric]).T  # (layers + 1, S)
    fig, axes = new_figure(width=max(5.0, 0.35 * len(steps) + 2), height=3.4)
    ax = axes[0, 0]
    image = ax.imshow(values, aspect="auto", origin="lower", cmap="magma")
    ax.set_xticks(range(len(steps)), [str(s) for s in steps], rotation=90, fontsize=7)
    ax.set_yticks(range(values.shape[0]),
                  ["emb"] + [f"block {i}" for i in range(values.shape[0] - 1)], fontsize=8)
    ax.set_xlabel("checkpoint step")
    ax.set_ylabel("hidden state")
    fig.colorbar(image, ax=ax, label=metric.replace("_", " "))
    return fig


def loss_figure(steps_T: Sequence[int], loss_T: Sequence[float], val_steps_E: Sequence[int],
                val_loss_E: Sequence[float]):
    """Training loss per step and validation loss at the checkpoints (nats per byte)."""
    fig, axes = new_figure()
    ax = axes[0, 0]
    if len(steps_T):
        ax.plot(np.asarray(steps_T), np.asarray(loss_T), lw=0.8, label="train (batch)")
    if len(val_steps_E):
        ax.plot(np.asarray(val_steps_E), np.asarray(val_loss_E), "o-", ms=3, label="validation")
    ax.axhline(np.log(256), color="grey", ls=":", lw=0.8, label="uniform over 256 bytes")
    _step_axis(ax)
    ax.set_ylabel("cross-entropy (nats / byte)")
    ax.legend(fontsize=8)
    return fig
