"""Layer-wise curves of a pretrained model against its untrained re-initialisation.

Input is the results.json dict of experiments/pretrained.py (in process,
`studies.pretrained.report.summary(result)`): {"layers": [...], "metrics": {"trained":
{name: [...]}, "untrained": {...}}, "correlations": {...}}. Every function returns a matplotlib
Figure; save it with `results.save_figure`.
"""
from __future__ import annotations

from typing import Any, Sequence

from anisotropy_jax.plotting import figure_legend, new_figure

LABELS = {
    "average_cosine": "average cosine (all pairs)",
    "centered_average_cosine": "centred average cosine (h − μ)",
    "centering_removed_share": "share of the cosine centring removes",
    "cross_sequence_cosine": "cross-sentence cosine",
    "within_sequence_cosine": "within-sentence cosine",
    "sampled_pair_cosine": "sampled-pair cosine",
    "drift_norm": "drift ‖mean h‖",
    "relative_drift": "relative drift ‖mean h‖ / mean ‖h‖",
    "mean_norm": "mean ‖h‖",
    "isoscore": "IsoScore",
    "effective_rank": "effective rank (raw)",
    "effective_rank_centered": "effective rank (centred)",
    "top_pc_variance_ratio": "top-PC variance share",
}
# Image and audio models measure inputs (images, utterances), not sentences.
MEDIA_MODALITIES = ("image", "audio")
STYLES = {"trained": dict(color="C0", marker="o"), "untrained": dict(color="C1", marker="s",
                                                                      linestyle="--")}


def axis_label(name: str, results: dict[str, Any] | None = None) -> str:
    """The axis label of a metric; "input" for "sentence" where `results` are of an image or
    audio model (its data's modality)."""
    text = LABELS.get(name, name)
    if ((results or {}).get("data") or {}).get("modality") in MEDIA_MODALITIES:
        text = text.replace("sentence", "input")
    return text


def layer_curves(results: dict[str, Any], names: Sequence[str], title: str = "",
                 ncols: int | None = None):
    """One panel per metric in `names`: value against layer (0 = embedding output), one line
    per run ("trained", "untrained": the mean over the untrained seeds, shaded between their
    min and max when `results` has "untrained_seeds"). A metric no run has (a results.json
    from before it existed) gets no panel."""
    names = [n for n in names if any(n in values for values in results["metrics"].values())]
    ncols = ncols or min(len(names), 3)
    nrows = (len(names) + ncols - 1) // ncols
    fig, axes = new_figure(ncols=ncols, nrows=nrows, width=4.2, height=3.2)
    layers = results["layers"]
    for i, name in enumerate(names):
        ax = axes[i // ncols][i % ncols]
        for run, values in results["metrics"].items():
            ax.plot(layers, values[name], label=run, **STYLES.get(run, {}))
        spread = (results.get("untrained_seeds") or {}).get("interval", {}).get(name)
        if spread is not None and len(results["untrained_seeds"]["seeds"]) > 1:
            nan = float("nan")  # a state without a value is a gap
            ax.fill_between(layers, [nan if v is None else v for v in spread["min"]],
                            [nan if v is None else v for v in spread["max"]],
                            color=STYLES["untrained"]["color"], alpha=0.2,
                            label="untrained: min–max over seeds")
        ax.set_xlabel("layer (0 = embeddings)")
        ax.set_ylabel(axis_label(name, results))
        ax.set_xticks(layers)
        ax.grid(alpha=0.3)
    for j in range(len(names), nrows * ncols):
        axes[j // ncols][j % ncols].set_visible(False)
    figure_legend(fig)
    if title:
        fig.suptitle(title)
    return fig


def cosine_by_layer(results: dict[str, Any], title: str = ""):
    """The three cosine estimates, the centred average cosine and the within-sentence
    (within-input) cosine per layer."""
    return layer_curves(results, ("average_cosine", "centered_average_cosine",
                                  "cross_sequence_cosine", "sampled_pair_cosine",
                                  "within_sequence_cosine"), title)


def drift_by_layer(results: dict[str, Any], title: str = ""):
    """Drift, relative drift and mean norm per layer."""
    return layer_curves(results, ("drift_norm", "relative_drift", "mean_norm"), title)


def isotropy_by_layer(results: dict[str, Any], title: str = ""):
    """IsoScore, effective ranks and top-PC share per layer."""
    return layer_curves(results, ("isoscore", "effective_rank", "effective_rank_centered",
                                  "top_pc_variance_ratio"), title, ncols=2)


def drift_vs_cosine(results: dict[str, Any], cosine: str = "average_cosine",
                    drift: str = "drift_norm", title: str = ""):
    """Scatter of drift against a cosine, one point per layer (annotated), one colour per run,
    with the Spearman/Pearson coefficients in the legend when `results` has them."""
    fig, axes = new_figure(width=5.0, height=4.0)
    ax = axes[0][0]
    for run, values in results["metrics"].items():
        label = run
        corr = results.get("correlations", {}).get(run, {}).get(f"{drift}_vs_{cosine}")
        if corr and "seeds" in corr:  # the untrained seeds' mean ρ (no one p for them)
            label += (f" (Spearman {corr['spearman']:+.2f}, Pearson {corr['pearson']:+.2f}: "
                      f"means over {corr['seeds']} seeds)")
        elif corr:
            label += (f" (Spearman {corr['spearman']:+.2f}, p={corr['spearman_p']:.2g}; "
                      f"Pearson {corr['pearson']:+.2f}, p={corr['pearson_p']:.2g})")
        style = dict(STYLES.get(run, {}))
        style.pop("linestyle", None)
        ax.plot(values[drift], values[cosine], linestyle=":", label=label, **style)
        for layer, x, y in zip(results["layers"], values[drift], values[cosine]):
            ax.annotate(str(layer), (x, y), textcoords="offset points", xytext=(4, 4),
                        fontsize="small")
    ax.set_xlabel(axis_label(drift, results))
    ax.set_ylabel(axis_label(cosine, results))
    ax.grid(alpha=0.3)
    figure_legend(fig, where="bottom", ncols=1)
    if title:
        ax.set_title(title)
    return fig
