"""Figures of the untrained-block bias sweep, one claim per figure, returned as `Figure`.

Every function takes `runs`: {label: run} where a run is what results.json holds for one sweep:
{"bias_norms": [..], "metrics": {name: {"mean", "std", "per_seed"}}, "closed_forms": {..}} (the
closed forms are optional). Curves show the mean over seeds and a band for the range (min–max)
over seeds; the x-axis is symlog (logarithmic above the smallest positive s, so s = 0 stays
visible at the left edge).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np
from matplotlib import ticker

from anisotropy_jax.plotting import new_figure

Run = Mapping[str, Any]
_STYLES = ("-", "--", "-.", ":")


def _x_axis(ax, runs: Mapping[str, Run]) -> None:
    values = [s for run in runs.values() for s in run["bias_norms"]]
    positive = [s for s in values if s > 0]
    linthresh = min(positive) if positive else 1.0
    ax.set_xscale("symlog", linthresh=linthresh, linscale=0.6)
    top = max(values) if values else 1.0
    decades = range(math.ceil(math.log10(linthresh)), math.floor(math.log10(max(top, 1e-300))) + 1)
    ticks = ([0.0] if min(values, default=1.0) == 0 else []) + [10.0 ** k for k in decades]
    ax.xaxis.set_major_locator(ticker.FixedLocator(ticks))
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    ax.set_xlim(-0.15 * linthresh if min(values, default=1.0) == 0 else linthresh / 1.3, top * 1.3)
    ax.set_xlabel("bias norm s (log axis; leftmost point s = 0)")
    ax.grid(True, which="major", alpha=0.3)


def _curve(ax, run: Run, name: str, label: str, color=None, linestyle="-") -> None:
    metric = run["metrics"].get(name)
    if metric is None:
        return
    s = np.asarray(run["bias_norms"], float)
    per_seed = np.asarray(metric["per_seed"], float)
    (line,) = ax.plot(s, metric["mean"], linestyle, marker=".", ms=3, color=color, label=label)
    if per_seed.shape[0] > 1:
        ax.fill_between(s, per_seed.min(0), per_seed.max(0), color=line.get_color(), alpha=0.2,
                        lw=0)


def _closed_form(ax, run: Run, name: str, label: str) -> None:
    form = run.get("closed_forms", {}).get(name)
    if form is None:
        return
    s = np.asarray(run["bias_norms"], float)
    predicted = np.asarray(form["predicted"], float)
    keep = np.isfinite(predicted)
    if keep.sum() > 1:
        ax.plot(s[keep], predicted[keep], "k:", lw=1.5, label=label)
    elif keep.sum() == 1:
        ax.plot(s[keep], predicted[keep], "k*", ms=9, label=label)


def _finish(fig, axes, title: str):
    for ax in np.ravel(axes):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle(title + "  (band: range over seeds)", fontsize=10)
    return fig


def _runs_iter(runs: Mapping[str, Run]):
    for i, (label, run) in enumerate(runs.items()):
        prefix = f"{label}: " if len(runs) > 1 else ""
        yield prefix, _STYLES[i % len(_STYLES)], run


def cosine_figure(runs: Mapping[str, Run]):
    """Input and output average cosine vs s with F1 (left); cross-sequence cosines of the block
    output and of the attention output with F4 (right)."""
    fig, axes = new_figure(2)
    left, right = axes[0]
    first = next(iter(runs.values()))
    for prefix, ls, run in _runs_iter(runs):
        _curve(left, run, "input_cosine", f"{prefix}input", "C0", ls)
        _curve(left, run, "output_cosine", f"{prefix}block output", "C3", ls)
        _curve(right, run, "output_cross_sequence_cosine", f"{prefix}block output", "C3", ls)
        _curve(right, run, "attention_output_cross_sequence_cosine",
               f"{prefix}attention output", "C2", ls)
    _closed_form(left, first, "input_cosine", "F1: s²/(s²+d)")
    _closed_form(right, first, "attention_output_cross_sequence_cosine", "F4: s²/(s²+d/L)")
    left.set_ylabel("average cosine similarity (all pairs)")
    right.set_ylabel("cross-sequence cosine similarity")
    for ax in (left, right):
        _x_axis(ax, runs)
        ax.set_ylim(-0.05, 1.05)
    return _finish(fig, axes, "Anisotropy vs common bias")


def norms_figure(runs: Mapping[str, Run]):
    """Mean token norm of the block input, attention output and block output vs s (log y)."""
    fig, axes = new_figure(1)
    ax = axes[0, 0]
    for prefix, ls, run in _runs_iter(runs):
        _curve(ax, run, "input_norm", f"{prefix}input ‖x‖", "C0", ls)
        _curve(ax, run, "attention_output_norm", f"{prefix}attention output", "C2", ls)
        _curve(ax, run, "output_norm", f"{prefix}block output ‖y‖", "C3", ls)
    first = next(iter(runs.values()))
    _closed_form(ax, first, "output_norm", "post-LN: √d")
    _x_axis(ax, runs)
    ax.set_yscale("log")
    ax.set_ylabel("mean token norm")
    return _finish(fig, axes, "Norms vs common bias")


def attention_figure(runs: Mapping[str, Run]):
    """Normalised attention entropy H / ln L (left, F3 at s = 0) and max probability (right)."""
    fig, axes = new_figure(2)
    left, right = axes[0]
    for prefix, ls, run in _runs_iter(runs):
        _curve(left, run, "attention_entropy_normalized", f"{prefix}H / ln L", "C1", ls)
        _curve(right, run, "attention_max", f"{prefix}max_k p_k", "C4", ls)
    for label, run in runs.items():
        form = run.get("closed_forms", {}).get("attention_entropy")
        if form is not None:  # F3 is in nats; show it normalised like the curve
            seq_len = run.get("seq_len")
            if seq_len:
                scaled = dict(form, predicted=(np.asarray(form["predicted"], float)
                                               / np.log(seq_len)).tolist())
                _closed_form(left, {**run, "closed_forms": {"h": scaled}}, "h",
                             "F3 (s = 0)" + (f" {label}" if len(runs) > 1 else ""))
    left.set_ylabel("attention entropy / ln L")
    right.set_ylabel("attention max probability")
    right.set_yscale("log")
    for ax in (left, right):
        _x_axis(ax, runs)
    return _finish(fig, axes, "Attention sharpness vs common bias")


def query_key_figure(runs: Mapping[str, Run]):
    """Per-head query/key norms with F2 (left), norms of the mean query/key (middle),
    cos(mean q, mean k) and its absolute value (right); all averaged over heads."""
    fig, axes = new_figure(3)
    left, middle, right = axes[0]
    first = next(iter(runs.values()))
    for prefix, ls, run in _runs_iter(runs):
        _curve(left, run, "query_norm", f"{prefix}‖q‖", "C0", ls)
        _curve(left, run, "key_norm", f"{prefix}‖k‖", "C1", ls)
        _curve(middle, run, "mean_query_norm", f"{prefix}‖mean q‖", "C0", ls)
        _curve(middle, run, "mean_key_norm", f"{prefix}‖mean k‖", "C1", ls)
        _curve(right, run, "mean_query_key_cosine", f"{prefix}cos(mean q, mean k)", "C2", ls)
        _curve(right, run, "mean_query_key_abs_cosine", f"{prefix}|cos| (mean over heads)",
               "C5", ls)
    _closed_form(left, first, "query_norm", "F2")
    left.set_ylabel("per-head norm (mean over tokens)")
    middle.set_ylabel("norm of the mean (over tokens)")
    right.set_ylabel("cosine")
    for ax in (left, middle):
        ax.set_yscale("log")
    extent = max([0.3] + [abs(v) for run in runs.values() for name in
                          ("mean_query_key_cosine", "mean_query_key_abs_cosine")
                          for v in np.ravel(run["metrics"].get(name, {}).get("per_seed", []))])
    right.set_ylim(-min(1.05, 1.2 * extent), min(1.05, 1.2 * extent))
    right.axhline(0.0, color="k", lw=0.5)
    for ax in (left, middle, right):
        _x_axis(ax, runs)
    return _finish(fig, axes, "Queries and keys vs common bias")


def categorical_figure(runs: Mapping[str, Run]):
    """Is the sharpening categorical? Normalised entropy, query agreement, query-key information
    (log axis) and row cosine vs s, one colour per run (the `:control` and `:controls` variants
    put the biased inputs and the controls side by side). Dotted: agreement 1/L and information
    ln L of a one-to-one pattern."""
    fig, axes = new_figure(2, 2)
    panels = (("attention_entropy_normalized", "attention entropy / ln L"),
              ("attention_query_agreement", "query agreement (share on the modal argmax key)"),
              ("attention_query_key_information", "query-key information (nats)"),
              ("attention_row_cosine", "row cosine (distinct queries)"))
    for i, (prefix, ls, run) in enumerate(_runs_iter(runs)):
        for ax, (name, _) in zip(np.ravel(axes), panels):
            _curve(ax, run, name, prefix.rstrip(": ") or name, f"C{i}", ls)
    seq_len = next(iter(runs.values())).get("seq_len")
    for ax, (name, ylabel) in zip(np.ravel(axes), panels):
        ax.set_ylabel(ylabel, fontsize=8)
        _x_axis(ax, runs)
        if seq_len and name == "attention_query_agreement":
            ax.axhline(1 / seq_len, color="k", ls=":", lw=1, label="1/L (one-to-one)")
        if seq_len and name == "attention_query_key_information":
            ax.axhline(math.log(seq_len), color="k", ls=":", lw=1, label="ln L (one-to-one)")
            # Log axis: the biased runs' information (0.05 → 0.003 nats) next to a control's
            # (up to ln L) was a flat line at 0 on a linear one.
            _log_axis_of_positive_values(ax, runs, name)
    return _finish(fig, axes, "Categorical or merely sharp attention vs s")


def _log_axis_of_positive_values(ax, runs: Mapping[str, Run], name: str) -> None:
    """A log y axis down to the smallest positive value of `name` over the runs' seeds (at most
    six decades below the largest), so that no curve sits flat on the bottom."""
    values = np.asarray([v for run in runs.values() for v in np.ravel(
        np.asarray(run["metrics"].get(name, {}).get("per_seed", []), float))], float)
    positive = values[np.isfinite(values) & (values > 0)]
    if positive.size == 0:
        return
    ax.set_yscale("log")
    top = max(float(positive.max()), ax.get_ylim()[1])
    ax.set_ylim(max(float(positive.min()), top * 1e-6) / 1.5, top * 1.5)


FIGURES = {
    "cosine": cosine_figure,
    "norms": norms_figure,
    "attention": attention_figure,
    "query_key": query_key_figure,
    "categorical": categorical_figure,
}
