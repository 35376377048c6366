"""Figures of the training-dynamics analysis (anisotropy_jax.studies.train). The trajectory,
scatter and heatmap figures take a mapping with "steps", "heads", "layers" and optionally
"correlation" and "objective"; the loss figure takes the loss curves as arrays.

Steps span decades and start at 0, so the step axis is symlog (linear below 1, logarithmic above).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from matplotlib import colors

from anisotropy_jax.plotting import figure_legend, new_figure


def _step_axis(ax) -> None:
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(left=0)
    ax.set_xlabel("training step (symlog)")


def _layer_colors(n: int):
    import matplotlib

    cmap = matplotlib.colormaps["viridis"]
    return [cmap(i / max(n - 1, 1)) for i in range(n)]


HEAD_PANELS = (("mean_query_norm", "‖mean q‖"), ("mean_key_norm", "‖mean k‖"),
               ("mean_query_key_cosine", "cos(mean q, mean k)"),
               ("mean_query_key_dot_softmax_invariant",
                "mean q · mean k / √d_head\n(softmax-invariant)"),
               ("key_term_std", "std over keys of\nmean q · (k_j − mean k) / √d_head"),
               ("key_term_share", "key term's share of\nthe logit variance over keys"),
               ("attention_entropy_normalized", "attention entropy / ln(visible keys)"),
               ("first_position_mass", "attention mass on position 0"),
               ("attention_query_agreement", "query argmax agreement"),
               ("attention_row_cosine", "cosine between attention rows"),
               ("attention_query_key_information", "I(query; key) (nats)"),
               ("delta_entropy_key_term", "Δ entropy / ln(visible keys)\nkey term removed"),
               ("delta_entropy_control", "Δ entropy / ln(visible keys)\npermuted key term "
                                         "removed (control)"))
_LAYER_PANELS = (("cross_sequence_cosine", "cross-sequence avg cosine"),
                 ("relative_drift", "‖mean h‖ / mean ‖h‖"))


def _head_panel(ax, steps, values, palette) -> None:
    """Block i's heads in the colour of its output state, i + 1 (the hidden-state panels')."""
    for layer in range(values.shape[1]):
        ax.plot(steps, values[:, layer, :], color=palette[layer + 1], lw=0.6, alpha=0.5)
        ax.plot(steps, values[:, layer, :].mean(-1), color=palette[layer + 1], lw=2.0,
                label=f"block {layer}")


def trajectories_figure(analysis: dict[str, Any]):
    """Per-head query/key geometry, logit terms, sharpness and per-layer anisotropy vs step.

    Thin lines: individual heads; thick: mean over the heads of a block. One colour per block,
    its heads' and its output state's alike (the embeddings have their own); one legend.
    Panels of HEAD_PANELS whose metric the analysis lacks are left out.
    """
    steps = np.asarray(analysis["steps"])
    heads, layers = analysis["heads"], analysis["layers"]
    panels = [(name, label) for name, label in HEAD_PANELS if name in heads]
    ncols = 4
    nrows = -(-(len(panels) + len(_LAYER_PANELS)) // ncols)
    fig, axes = new_figure(ncols=ncols, nrows=nrows, width=4.0, height=3.2)
    num_layers = np.shape(heads["mean_query_norm"])[1]  # arrays, or lists from results.json
    palette = _layer_colors(num_layers + 1)
    for ax, (name, label) in zip(axes.flat, panels):
        _head_panel(ax, steps, np.asarray(heads[name]), palette)  # (S, layers, H)
        if name == "mean_query_key_cosine":
            ax.axhline(0.0, color="grey", lw=0.8, ls=":")
        ax.set_ylabel(label, fontsize=8)
        _step_axis(ax)
    layer_axes = axes.flat[len(panels):len(panels) + len(_LAYER_PANELS)]
    for ax, (name, label) in zip(layer_axes, _LAYER_PANELS):
        values = np.asarray(layers[name])  # (S, layers + 1)
        for i in range(values.shape[1]):
            ax.plot(steps, values[:, i], color=palette[i], lw=1.5,
                    label="embeddings" if i == 0 else f"block {i - 1}")
        ax.set_ylabel(f"hidden states: {label}", fontsize=8)
        _step_axis(ax)
    for ax in axes.flat[len(panels) + len(_LAYER_PANELS):]:
        ax.set_visible(False)
    figure_legend(fig, handles=_block_key(palette),
                  labels=["embeddings"] + [f"block {i}" for i in range(num_layers)])
    fig.suptitle(f"{analysis.get('objective', '')}: query/key dynamics along training")
    return fig


def _block_key(palette):
    """Legend handles: the embeddings' colour, then each block's (thick: the heads' mean)."""
    from matplotlib.lines import Line2D

    return [Line2D([], [], color=color, lw=2.0) for color in palette]


def entropy_vs_logit_terms_figure(analysis: dict[str, Any]):
    """Left two panels: normalised entropy of every (checkpoint, layer, head) against the
    key-dependent term and against the softmax-invariant |q̄·k̄|/√d_head, coloured by step. Right:
    Spearman ρ across the heads of each checkpoint (never pooled over steps) against the step."""
    steps = np.asarray(analysis["steps"])
    heads = analysis["heads"]
    entropy = np.asarray(heads["attention_entropy_normalized"])
    step_grid = np.broadcast_to(steps[:, None, None], entropy.shape)
    norm = colors.LogNorm(vmin=1, vmax=max(int(steps.max()), 2) + 1)
    fig, axes = new_figure(ncols=3, width=4.8, height=3.8)
    for ax, name, label in (
            (axes[0, 0], "key_term_std", "std over keys of mean q·(k_j − mean k)/√d_head"),
            (axes[0, 1], "mean_query_key_dot_softmax_invariant",
             "|mean q · mean k| / √d_head (softmax-invariant)")):
        x = np.abs(np.asarray(heads[name])).reshape(-1)
        points = ax.scatter(x, entropy.reshape(-1), c=step_grid.reshape(-1) + 1, norm=norm,
                            s=10, cmap="plasma")
        ax.set_xlabel(label, fontsize=8)
        ax.set_ylabel("attention entropy / ln(visible keys)")
        if np.all(x > 0):
            ax.set_xscale("log")
    fig.colorbar(points, ax=axes[0, 1], label="training step + 1")
    corr = analysis.get("correlation") or {}
    ax = axes[0, 2]
    for name, value in corr.items():
        if isinstance(value, dict):
            ax.plot(steps, np.asarray(value["rho"]), "o-", ms=3, label=name)
    ax.axhline(0.0, color="grey", lw=0.8, ls=":")
    ax.set_ylabel(f"Spearman ρ(entropy, ·) across {corr.get('n', '?')} heads")
    ax.set_ylim(-1.05, 1.05)
    _step_axis(ax)
    figure_legend(fig)
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
    figure_legend(fig, where="bottom")
    return fig


# The range each seeds quantity can take (by the last part of its name): its t-interval band is
# clipped to it (an interval of a bounded quantity, ρ or a cosine, can run past its bounds).
_UNIT_INTERVAL = ("entropy_normalized", "attention_max", "query_agreement", "row_cosine",
                  "abs_mean_query_key_cosine", "partition_isotropy", "first_position",
                  "unmatched_fraction", "undefined_fraction")
_NON_NEGATIVE = ("norm", "std", "share", "abs_", "loss", "information", "drift")


def metric_range(name: str) -> tuple[float, float]:
    """(low, high) bounds of a seeds quantity (`seeds_figure`); (-inf, inf) where unbounded."""
    last = name.rsplit("/", 1)[-1]
    if name.startswith(("spearman", "partial")):
        return -1.0, 1.0
    if name.startswith("heads_fraction/"):
        return 0.0, 1.0
    if last.startswith("delta_") or "deficit_share" in last:  # changes, shares of one: signed
        return -np.inf, np.inf
    if any(key in name for key in _UNIT_INTERVAL):
        return 0.0, 1.0
    if "cosine" in last:
        return -1.0, 1.0
    if any(key in last for key in _NON_NEGATIVE) or last.endswith("_var"):
        return 0.0, np.inf
    return -np.inf, np.inf


# The seeds figures, one per group of quantities (`seeds_group`): name → title.
SEEDS_GROUPS = {
    "query_key": "mean query and mean key (Godey 4a)",
    "attention": "attention sharpness",
    "logit_variance": "the logits' variance over keys and its parts",
    "intervention": "Δ when a logit term is removed (rows: statistic; columns: the removal)",
    "contrasts": "Δ with the key term removed − Δ with a control removed",
    "deficit_share": "share of the entropy deficit recovered (Godey 4b), the matched control",
    "correlations": "correlations across the heads of each checkpoint",
    "anisotropy": "hidden-state and embedding anisotropy (Godey 4c), validation loss",
}
_LOGIT_PARTS = ("key_term_var", "query_specific_var", "key_query_covariance", "logit_var")
_MATCH = ("matched_control_unmatched_fraction", "matched_control_shortfall")
_PREFIXES = {"heads_mean": "mean over heads", "heads_fraction": "fraction of heads",
             "spearman_across_heads": "Spearman ρ across heads",
             "partial_within_layers": "partial ρ within layers",
             "embedding_partition_isotropy": "embedding partition isotropy"}


def seeds_group(name: str) -> str:
    """The SEEDS_GROUPS key of a seeds quantity (by its name; "anisotropy" for the rest)."""
    last = name.rsplit("/", 1)[-1]
    if name.startswith(("spearman_across_heads/", "partial_within_layers/")):
        return "correlations"
    if "deficit_share" in last or last in _MATCH:
        return "deficit_share"
    if last.startswith("delta_"):
        return "contrasts" if "_minus_" in last else "intervention"
    if last in _LOGIT_PARTS:
        return "logit_variance"
    if name.startswith("heads_mean/"):
        return "attention" if last.startswith("attention_") else "query_key"
    return "anisotropy"


def seeds_figure(summary: dict[str, Any], names: Sequence[str] | None = None, title: str = "",
                 ncols: int = 3):
    """The quantities `names` of a seeds summary (`studies.train.seeds.aggregate`; default:
    all) against the step, one panel each (4 × 3 inches): thin lines the seeds, thick the mean,
    band the 95% t-interval over seeds, clipped to the quantity's range (`metric_range`)."""
    steps = np.asarray(summary["steps"])
    names = list(summary["quantities"] if names is None else names)
    ncols = min(ncols, len(names))
    fig, axes = new_figure(ncols=ncols, nrows=-(-len(names) // ncols), width=4.0, height=3.0)
    for ax, name in zip(axes.flat, names):
        q = summary["quantities"][name]
        ax.plot(steps, np.asarray(q["per_seed"], float).T, color="grey", lw=0.6)
        ax.plot(steps, np.asarray(q["mean"], float), color="C0", lw=2.0)
        low, high = metric_range(name)
        ax.fill_between(steps, np.clip(np.asarray(q["low"], float), low, high),
                        np.clip(np.asarray(q["high"], float), low, high), color="C0", alpha=0.25,
                        lw=0)
        prefix, _, last = name.rpartition("/")
        ax.set_title(last.replace("_", " "), fontsize=9)
        ax.set_ylabel(_PREFIXES.get(prefix, prefix.replace("_", " ")), fontsize=8)
        _step_axis(ax)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    seeds = ", ".join(str(s) for s in summary["seeds"])
    fig.suptitle(f"{title + chr(10) if title else ''}mean (thick), seeds {seeds} (thin), 95% "
                 f"interval over seeds (band)", fontsize=10)
    return fig


def seeds_figures(summary: dict[str, Any]) -> dict[str, Any]:
    """{group: Figure} of a seeds summary: one figure per SEEDS_GROUPS group it has, each
    quantity in the figure of its `seeds_group` (the intervention's Δ as statistic × removal,
    four to a row)."""
    groups: dict[str, list[str]] = {}
    for name in summary["quantities"]:
        groups.setdefault(seeds_group(name), []).append(name)
    if "intervention" in groups:  # a row per statistic (delta_<stat>_<removal>)
        stats = list(dict.fromkeys(n.split("delta_", 1)[1].split("_")[0]
                                   for n in groups["intervention"]))
        groups["intervention"].sort(key=lambda n: stats.index(
            n.split("delta_", 1)[1].split("_")[0]))
    return {group: seeds_figure(summary, names, SEEDS_GROUPS[group], ncols=_columns(len(names)))
            for group, names in sorted(groups.items(), key=lambda g: list(SEEDS_GROUPS).index(
                g[0]))}


def _columns(n: int) -> int:
    """Panels to a row: 2 for 4, 4 from 10, else up to 3."""
    return 2 if n == 4 else 4 if n >= 10 else min(n, 3)
