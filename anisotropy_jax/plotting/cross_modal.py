"""The cross-modal figure (Godey et al. 2023's comparison; docs/CROSS_MODAL.md): per-layer average
cosine of several models of several modalities on one axis against relative depth (0 = embedding
output, 1 = last state), each model one colour, trained solid, its untrained re-initialisation
dashed in the same colour (the mean over the untrained seeds, shaded between their min and max);
one marker per modality."""
from __future__ import annotations

from typing import Any, Mapping

from anisotropy_jax.plotting import figure_legend, new_figure

MARKERS = {"text": "o", "image": "s", "audio": "^"}


def cross_modal_figure(models: Mapping[str, Mapping[str, Any]], title: str = ""):
    """`models`: {name: {"modality", "architecture", "depth", "trained"? , "untrained"}} (the
    output of studies.cross_modal.collect)."""
    if not models:
        raise ValueError("cross_modal_figure: no models")
    fig, axes = new_figure(width=8.0, height=5.0)
    ax = axes[0][0]
    for k, (name, m) in enumerate(models.items()):
        color, marker = f"C{k % 10}", MARKERS.get(m["modality"], "x")
        label = f"{name} ({m['modality']}, {m['architecture']})"
        if m.get("trained") is not None:
            ax.plot(m["depth"], m["trained"], color=color, marker=marker, ms=4, label=label)
        ax.plot(m["depth"], m["untrained"], color=color, marker=marker, ms=3, linestyle="--",
                alpha=0.7, label=None if m.get("trained") is not None else f"{label}, untrained")
        spread = m.get("per_layer", {}).get("average_cosine")
        if spread is not None and len(m.get("untrained_seeds", ())) > 1:
            ax.fill_between(m["depth"], spread["untrained_min"], spread["untrained_max"],
                            color=color, alpha=0.15, linewidth=0)
    ax.plot([], [], color="0.3", label="trained (solid)")
    ax.plot([], [], color="0.3", linestyle="--",
            label="untrained re-initialisations: mean (dashed), min–max over seeds (shaded)")
    ax.set_xlabel("relative depth (0 = embedding output, 1 = last state)")
    ax.set_ylabel("average cosine similarity")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    figure_legend(fig, fontsize="x-small")
    ax.set_title(title or "Average cosine per layer across modalities")
    return fig
