"""Writing a bias sweep: config.json (at the start), results.json (the results contract, last and
atomically), results.npz, figures/*.png, and the printed table with the closed forms.

results.json holds `provenance`, `config`, and for the first sweep `bias_norms`, `metrics`
({name: {"mean", "std", "low", "high", "per_seed"}}: std and the seed interval [low, high] are NaN
with one seed), `closed_forms`, `trends` and `reliable` (per s: whether float32 rounding leaves the
attention statistics within `points.RELIABLE_ROUNDING_BOUND`); `runs` holds the same for every
sweep of a comparison, by label, and `controls` (`controls.summary`) each control beside the biased
run of the same block, seeds and grid. results.npz holds (seeds, s) per metric and
(seeds, s, heads) per head, under "<label>__<metric>" and "<label>__per_head__<metric>".
"""
from __future__ import annotations

import os
import pathlib
import re
from typing import Any, Callable, Mapping

import numpy as np

from anisotropy_jax import results
from anisotropy_jax.configs.sweep import SweepConfig
from anisotropy_jax.studies.sweep import controls, points, theory
from anisotropy_jax.studies.sweep.grid import SweepResult


# figures/NAME.png is `anisotropy_jax.plotting.sweep.NAME_figure(summaries)`. The plotting module
# (and matplotlib, ~0.3 s to import) is loaded only where a figure is drawn.
PLOTTING_MODULE = "anisotropy_jax.plotting.sweep"
FIGURE_NAMES = ("cosine", "norms", "attention", "query_key", "categorical")
# Drawn longest first, so that parallel workers finish together (measured on the 2-core CPU).
_DRAW_ORDER = ("query_key", "categorical", "cosine", "attention", "norms")


def figure_jobs(summaries: Mapping[str, Any], workdir: pathlib.Path) -> list[results.FigureJob]:
    """The five figures of `summaries` (results.json's "runs") as jobs, longest first. The jobs
    carry plain values only (no config or layout objects), so a figure process unpickles them
    without importing JAX."""
    runs = {label: {k: v for k, v in run.items() if k not in ("sweep_config", "chunk_layout")}
            for label, run in summaries.items()}
    return [results.FigureJob(PLOTTING_MODULE, f"{name}_figure", (runs,),
                              workdir / "figures" / f"{name}.png") for name in _DRAW_ORDER]


def write_config(workdir: pathlib.Path, config: Any, sweeps: list[tuple[str, SweepConfig]]
                 ) -> None:
    """config.json, written before the run: what was attempted, even if it fails."""
    results.write_json(workdir / "config.json", {"config": config, "sweeps": dict(sweeps)})


def reliable_points(result: SweepResult) -> list[bool | None]:
    """Per s: the rounding bound of every seed ≤ `points.RELIABLE_ROUNDING_BOUND` (docs/SWEEP.md
    "Large bias norms"); all True for a run without metrics; all None (not assessed) for a
    normalisation other than softmax, for which the bound is not derived."""
    bound = result.per_seed.get("attention_rounding_bound")
    if bound is None:
        assessed = result.config.model.attention_normalization == "softmax"
        return [True if assessed else None] * len(result.bias_norms)
    return (np.asarray(bound).max(axis=0) <= points.RELIABLE_ROUNDING_BOUND).tolist()


def unreliable_warning(run: Mapping[str, Any]) -> str | None:
    """The warning naming a run summary's unreliable points, or None."""
    bad = [s for s, ok in zip(run["bias_norms"], run["reliable"]) if ok is False]
    if not bad:
        return None
    return (f"warning: [{run['label']}] float32 rounding may move the attention statistics by more "
            f"than {points.RELIABLE_ROUNDING_BOUND:g} at s = {', '.join(f'{s:g}' for s in bad)} "
            f"(reliable: false in results.json; docs/SWEEP.md, \"Large bias norms\")")


def run_summary(label: str, result: SweepResult) -> dict:
    """One sweep's entry of results.json."""
    cfg = result.config
    return {
        "label": label,
        "sweep_config": cfg,
        "inputs": cfg.inputs,
        "bias_norms": result.bias_norms.tolist(),
        "reliable": reliable_points(result),
        "reliable_rounding_bound": points.RELIABLE_ROUNDING_BOUND,
        "seq_len": cfg.seq_len,
        "d_model": cfg.model.d_model,
        "metrics": theory.summarize(result.per_seed),
        "closed_forms": theory.compare_with_closed_forms(cfg, result.bias_norms,
                                                         result.per_seed),
        "trends": theory.trends(result.bias_norms, result.per_seed),
        "chunk_layout": result.layout,
        "num_devices": result.num_devices,
        "seconds": result.seconds,
        "first_chunk_seconds_incl_compile": result.first_chunk_seconds,
    }


def format_table(run: Mapping[str, Any]) -> str:
    """A compact table (about 10 values of s) with F1/F2, then the closed-form deviations and
    the trends, of one sweep's `run_summary`."""
    s = run["bias_norms"]
    rows = list(range(len(s)))
    if len(rows) > 12:  # compact: about 10 rows, first and last included
        rows = sorted(set(round(i * (len(s) - 1) / 9) for i in range(10)))
    m, forms = run["metrics"], run["closed_forms"]
    columns = [("in cos", m["input_cosine"]["mean"]),
               ("F1", forms["input_cosine"]["predicted"]),
               ("out cos", m["output_cosine"]["mean"]),
               ("attn xseq", m.get("attention_output_cross_sequence_cosine", {}).get("mean")),
               ("H/lnL", m["attention_entropy_normalized"]["mean"]),
               ("max p", m["attention_max"]["mean"]),
               ("mass", m.get("attention_mass", {}).get("mean")),
               ("sink rate", m.get("attention_sink_rate", {}).get("mean")),
               ("agree", m.get("attention_query_agreement", {}).get("mean")),
               ("|q|", m["query_norm"]["mean"]),
               ("F2", forms.get("query_norm", {}).get("predicted")),
               ("cos(q̄,k̄)", m["mean_query_key_cosine"]["mean"]),
               ("|out|", m["output_norm"]["mean"])]
    columns = [(name, values) for name, values in columns if values is not None]
    lines = [f"\n{run['label']}  (mean over seeds; F1/F2: closed forms, docs/SCIENCE.md)",
             f"{'s':>9} " + " ".join(f"{name:>9}" for name, _ in columns)]
    for i in rows:
        lines.append(f"{s[i]:9.3g} " + " ".join(f"{values[i]:9.4g}" for _, values in columns))
    for form in forms.values():
        rel = form["max_rel_deviation"]
        lines.append(f"  {form['formula']}: max |measured - predicted| = "
                     f"{form['max_abs_deviation']:.3g}"
                     + (f" (max relative {rel:.2%})" if rel is not None else "")
                     + f" at s = {form['worst_s']:g}")
    for name, t in run["trends"].items():
        lines.append(f"  {name} {t['direction']} from {t['first']:.4g} to {t['last']:.4g} "
                     f"({t['fraction_of_steps_in_direction']:.0%} of the steps of s)")
    warning = unreliable_warning(run)
    return "\n".join(lines + ([warning] if warning else []))


def _safe_name(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_")


def arrays(runs: Mapping[str, SweepResult]) -> dict[str, Any]:
    """The contents of results.npz."""
    out: dict[str, Any] = {"labels": list(runs)}
    for label, result in runs.items():
        prefix = _safe_name(label)
        out[f"{prefix}__bias_norms"] = result.bias_norms
        out.update({f"{prefix}__{k}": v for k, v in result.per_seed.items()})
        out.update({f"{prefix}__per_head__{k}": v for k, v in result.per_head.items()})
    return out


def write(runs: Mapping[str, SweepResult], workdir: pathlib.Path,
          provenance: results.Provenance, config: Any,
          mark: Callable[[str], None] = lambda phase: None,
          figure_workers: results.FigureWorkers | None = None) -> dict:
    """Writes results.npz, figures/*.png and, last and atomically, results.json (a run that fails
    or is interrupted leaves none); returns results.json's dict. The figures are drawn by
    `figure_workers` (other processes) while this one writes results.npz, or here without them.
    `mark(phase)` is called as each part is done (`cli.PhaseTimes.mark`)."""
    summaries = {label: run_summary(label, result) for label, result in runs.items()}
    first = next(iter(summaries.values()))
    mark("summaries")
    doc = {
        "provenance": provenance.finish("sweep"),
        "config": config,
        "bias_norms": first["bias_norms"],
        "metrics": first["metrics"],
        "closed_forms": first["closed_forms"],
        "trends": first["trends"],
        "reliable": first["reliable"],
        "runs": summaries,
        "controls": controls.summary(runs),
    }
    mark("provenance")
    jobs = figure_jobs(summaries, workdir)
    if figure_workers is None:
        for job in jobs:
            results.draw_figure(job)
            mark(f"figure {job.path.stem}")
    results.write_npz(workdir / "results.npz", arrays(runs))
    mark("npz")
    if figure_workers is not None:
        figure_workers.save(jobs)
        mark("figures")
    results.write_json(workdir / "results.json", doc)  # last: its presence means a complete run
    mark("json")
    return doc


def figure_processes(requested: int = -1) -> int:
    """`requested` figure processes, or with -1 one per CPU core available, at most one per
    figure."""
    if requested >= 0:
        return requested
    return min(len(FIGURE_NAMES), len(os.sched_getaffinity(0)))
