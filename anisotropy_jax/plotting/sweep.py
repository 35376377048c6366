"""Figures of the untrained-block bias sweep, one claim per figure, returned as `Figure`.

Every function takes `runs`: {label: run} where a run is what results.json holds for one sweep:
{"bias_norms": [..], "metrics": {name: {"mean", "std", "per_seed"}}, "closed_forms": {..}} (the
closed forms are optional). Curves show the mean over seeds and a band for the range (min–max)
over seeds; the x-axis is symlog (logarithmic above the smallest positive s, so s = 0 stays
visible at the left edge).

Up to four runs share a panel: colour = quantity, line style = run. With more runs (the
normalisation comparison's twelve), each quantity has its own panel and each run its own colour
and style (`run_styles`). The legend is the figure's, beside the panels, never on the data; run
labels are shortened to the fields that differ between the runs (`short_labels`).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

import numpy as np
from matplotlib import ticker
from matplotlib.lines import Line2D

from anisotropy_jax.plotting import figure_legend, legend_entries, new_figure

Run = Mapping[str, Any]
_STYLES = ("-", "--", "-.", ":")
_FALSE, _TRUE = "False", "True"


@dataclasses.dataclass(frozen=True)
class _Panel:
    """One panel: curves (metric, label, colour), its y label, closed forms (the metric they
    belong with, a function (ax, runs) drawing them), a setup (ax, runs, metrics shown) and a
    title."""

    curves: tuple[tuple[str, str, str], ...]
    ylabel: str
    forms: tuple[tuple[str, Callable[[Any, Mapping[str, Run]], None]], ...] = ()
    setup: Callable[[Any, Mapping[str, Run], tuple[str, ...]], None] | None = None
    title: str = ""


def _fields(label: str) -> dict[str, str]:
    """{field: value} of a run label "n1=v1, n2=v2" (a part without '=' is keyed by itself)."""
    parts = [p.strip() for p in label.split(", ")]
    return dict(p.split("=", 1) if "=" in p else (p, p) for p in parts)


def _varying(labels: list[str]) -> list[str]:
    fields = [_fields(label) for label in labels]
    names = list(dict.fromkeys(name for f in fields for name in f))
    return [n for n in names if len({f.get(n) for f in fields}) > 1]


def _short(field: str, value: str | None) -> str:
    if value is None or value == _FALSE:
        return ""
    if value == _TRUE:
        return field.replace("_", " ")
    try:
        float(value)
    except ValueError:
        return value
    return f"{field}={value}"


def short_labels(labels: list[str]) -> dict[str, str]:
    """{label: its short form}: the fields that differ between the runs, each as its value (a
    number as field=value, a True flag as its name, a False flag left out). The labels
    themselves where there is one run or the short forms would not be distinct."""
    varying = _varying(labels)
    if len(labels) < 2 or not varying:
        return {label: label for label in labels}
    short = {}
    for label in labels:
        fields = _fields(label)
        parts = [_short(n, fields.get(n)) for n in varying]
        short[label] = ", ".join(p for p in parts if p) or ", ".join(
            f"{n}={fields.get(n)}" for n in varying)
    if len(set(short.values())) < len(labels):
        return {label: ", ".join(f"{n}={_fields(label).get(n)}" for n in varying)
                for label in labels}
    return short


def run_styles(labels: list[str]) -> dict[str, tuple[str, str]]:
    """{label: (colour, line style)} when each run has its own look: with two or more fields that
    differ, the one with the fewest values (≤ 4; the last of equals) sets the line style and the
    others the colour; else one colour per run, solid."""
    varying = _varying(labels)
    fields = [_fields(label) for label in labels]
    counts = {n: len({f.get(n) for f in fields}) for n in varying}
    styled = min(reversed(varying), key=counts.get) if len(varying) > 1 else None
    if styled is None or counts[styled] > len(_STYLES):
        return {label: (f"C{i % 10}", "-") for i, label in enumerate(labels)}
    values = list(dict.fromkeys(f.get(styled) for f in fields))
    groups = list(dict.fromkeys(tuple(f.get(n) for n in varying if n != styled) for f in fields))
    return {label: (f"C{groups.index(tuple(f.get(n) for n in varying if n != styled)) % 10}",
                    _STYLES[values.index(f.get(styled))]) for label, f in zip(labels, fields)}


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


def _curve(ax, run: Run, name: str, label: str | None, color=None, linestyle="-") -> None:
    metric = run["metrics"].get(name)
    if metric is None:
        return
    s = np.asarray(run["bias_norms"], float)
    per_seed = np.asarray(metric["per_seed"], float)
    (line,) = ax.plot(s, metric["mean"], linestyle, marker=".", ms=3, color=color, label=label)
    if per_seed.shape[0] > 1:
        ax.fill_between(s, per_seed.min(0), per_seed.max(0), color=line.get_color(), alpha=0.2,
                        lw=0)


def _closed_form(name: str, label: str) -> Callable[[Any, Mapping[str, Run]], None]:
    """Draws the first run's closed form `name` (dotted; a star where it has one point)."""
    def draw(ax, runs: Mapping[str, Run]) -> None:
        form = next(iter(runs.values())).get("closed_forms", {}).get(name)
        if form is None:
            return
        s = np.asarray(next(iter(runs.values()))["bias_norms"], float)
        predicted = np.asarray(form["predicted"], float)
        keep = np.isfinite(predicted)
        if keep.sum() > 1:
            ax.plot(s[keep], predicted[keep], "k:", lw=1.5, label=label)
        elif keep.sum() == 1:
            ax.plot(s[keep], predicted[keep], "k*", ms=9, label=label)
    return draw


def _by_run(runs: Mapping[str, Run], panels: tuple[_Panel, ...]) -> bool:
    return len(runs) > len(_STYLES) or all(len(p.curves) == 1 for p in panels)


def _split(panel: _Panel) -> list[_Panel]:
    """One panel per curve, each with the closed forms of its metric (titled by the curve where
    the panel had several)."""
    if len(panel.curves) == 1:
        return [panel]
    return [_Panel((curve,), panel.ylabel, tuple(f for f in panel.forms if f[0] == curve[0]),
                   panel.setup, curve[1]) for curve in panel.curves]


def _draw(runs: Mapping[str, Run], panels: tuple[_Panel, ...], title: str, ncols: int = 0):
    """The figure of `panels` (module docstring: by quantity or by run), legend beside it."""
    by_run = _by_run(runs, panels)
    shown = [q for p in panels for q in _split(p)] if by_run else list(panels)
    ncols = ncols or (2 if len(shown) == 4 else min(len(shown), 3))
    fig, axes = new_figure(ncols, -(-len(shown) // ncols))
    labels = list(runs)
    short, styles = short_labels(labels), run_styles(labels)
    for ax, panel in zip(axes.flat, shown):
        for i, (label, run) in enumerate(runs.items()):
            for name, curve_label, color in panel.curves:
                if by_run:
                    _curve(ax, run, name, short[label], *styles[label])
                else:
                    _curve(ax, run, name, curve_label, color, _STYLES[i % len(_STYLES)])
        for _, form in panel.forms:
            form(ax, runs)
        if panel.title:
            ax.set_title(panel.title, fontsize=9)
        ax.set_ylabel(panel.ylabel, fontsize=9 if len(panel.ylabel) < 40 else 8)
        _x_axis(ax, runs)
        if panel.setup is not None:
            panel.setup(ax, runs, tuple(c[0] for c in panel.curves))
    for ax in axes.flat[len(shown):]:
        ax.set_visible(False)
    handles, names = legend_entries(axes.flat)
    if not by_run and len(runs) > 1:  # after the quantities' colours, the runs' line styles
        handles += [Line2D([], [], color="0.35", linestyle=_STYLES[i % len(_STYLES)])
                    for i in range(len(labels))]
        names += [short[label] for label in labels]
    figure_legend(fig, handles=handles, labels=names)
    fig.suptitle(title + "  (band: range over seeds)", fontsize=10)
    return fig


def _unit_range(ax, runs, names) -> None:
    ax.set_ylim(-0.05, 1.05)


def _log(ax, runs, names) -> None:
    ax.set_yscale("log")


def cosine_figure(runs: Mapping[str, Run]):
    """Input and output average cosine vs s with F1 (left); cross-sequence cosines of the block
    output and of the attention output with F4 (right)."""
    return _draw(runs, (
        _Panel((("input_cosine", "input", "C0"), ("output_cosine", "block output", "C3")),
               "average cosine similarity (all pairs)",
               (("input_cosine", _closed_form("input_cosine", "F1: s²/(s²+d)")),), _unit_range),
        _Panel((("output_cross_sequence_cosine", "block output", "C3"),
                ("attention_output_cross_sequence_cosine", "attention output", "C2")),
               "cross-sequence cosine similarity",
               (("attention_output_cross_sequence_cosine",
                 _closed_form("attention_output_cross_sequence_cosine", "F4: s²/(s²+d/L)")),),
               _unit_range)), "Anisotropy vs common bias")


def norms_figure(runs: Mapping[str, Run]):
    """Mean token norm of the block input, attention output and block output vs s (log y)."""
    return _draw(runs, (_Panel(
        (("input_norm", "input ‖x‖", "C0"), ("attention_output_norm", "attention output", "C2"),
         ("output_norm", "block output ‖y‖", "C3")), "mean token norm",
        (("output_norm", _closed_form("output_norm", "post-LN: √d")),), _log),),
        "Norms vs common bias")


def _entropy_form(ax, runs: Mapping[str, Run]) -> None:
    """F3 at s = 0, in nats divided by ln L like the curve, per run that has it."""
    short = short_labels(list(runs))
    for label, run in runs.items():
        form, seq_len = run.get("closed_forms", {}).get("attention_entropy"), run.get("seq_len")
        if form is None or not seq_len:
            continue
        scaled = {**run, "closed_forms": {"h": dict(form, predicted=(
            np.asarray(form["predicted"], float) / np.log(seq_len)).tolist())}}
        _closed_form("h", "F3 (s = 0)" + (f" {short[label]}" if len(runs) > 1 else ""))(
            ax, {label: scaled})


def attention_figure(runs: Mapping[str, Run]):
    """Normalised attention entropy H / ln L (left, F3 at s = 0) and max probability (right)."""
    return _draw(runs, (
        _Panel((("attention_entropy_normalized", "H / ln L", "C1"),), "attention entropy / ln L",
               (("attention_entropy_normalized", _entropy_form),)),
        _Panel((("attention_max", "max_k p_k", "C4"),), "attention max probability",
               setup=_log)), "Attention sharpness vs common bias")


def _cosine_range(ax, runs, names) -> None:
    extent = max([0.3] + [abs(v) for run in runs.values() for name in names
                          for v in np.ravel(run["metrics"].get(name, {}).get("per_seed", []))])
    ax.set_ylim(-min(1.05, 1.2 * extent), min(1.05, 1.2 * extent))
    ax.axhline(0.0, color="k", lw=0.5)


def query_key_figure(runs: Mapping[str, Run]):
    """Per-head query/key norms with F2 (left), norms of the mean query/key (middle),
    cos(mean q, mean k) and its absolute value (right); all averaged over heads."""
    return _draw(runs, (
        _Panel((("query_norm", "‖q‖", "C0"), ("key_norm", "‖k‖", "C1")),
               "per-head norm (mean over tokens)", (("query_norm", _closed_form("query_norm",
                                                                                "F2")),), _log),
        _Panel((("mean_query_norm", "‖mean q‖", "C0"), ("mean_key_norm", "‖mean k‖", "C1")),
               "norm of the mean (over tokens)", setup=_log),
        _Panel((("mean_query_key_cosine", "cos(mean q, mean k)", "C2"),
                ("mean_query_key_abs_cosine", "|cos| (mean over heads)", "C5")), "cosine",
               setup=_cosine_range)), "Queries and keys vs common bias", ncols=3)


def _categorical_setup(ax, runs, names) -> None:
    seq_len = next(iter(runs.values())).get("seq_len")
    if seq_len and "attention_query_agreement" in names:
        ax.axhline(1 / seq_len, color="k", ls=":", lw=1, label="1/L (one-to-one)")
    if seq_len and "attention_query_key_information" in names:
        ax.axhline(math.log(seq_len), color="k", ls=":", lw=1, label="ln L (one-to-one)")
        # Log axis: the biased runs' information (0.05 → 0.003 nats) next to a control's
        # (up to ln L) was a flat line at 0 on a linear one.
        _log_axis_of_positive_values(ax, runs, "attention_query_key_information")


def categorical_figure(runs: Mapping[str, Run]):
    """Is the sharpening categorical? Normalised entropy, query agreement, query-key information
    (log axis) and row cosine vs s, one colour per run (the `:control` and `:controls` variants
    put the biased inputs and the controls side by side). Dotted: agreement 1/L and information
    ln L of a one-to-one pattern."""
    return _draw(runs, tuple(_Panel(((name, label, "C0"),), label, setup=_categorical_setup)
                             for name, label in (
        ("attention_entropy_normalized", "attention entropy / ln L"),
        ("attention_query_agreement", "query agreement (share on the modal argmax key)"),
        ("attention_query_key_information", "query-key information (nats)"),
        ("attention_row_cosine", "row cosine (distinct queries)"))),
        "Categorical or merely sharp attention vs s")


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
