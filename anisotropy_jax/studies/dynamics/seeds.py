"""Several seeds of one training configuration: per-checkpoint means with 95% Student-t intervals
over the seeds, and the change from the first to the last checkpoint tested over the seeds.

The seeds are the independent units here (each changes the initialisation, the split, the batch
order and the masking); the heads of one model never are. `aggregate` takes the results.json dicts
of the seeds' analyses (`dynamics.write` returns them; json.load of the files works too), so a
summary can be rebuilt from committed files without the checkpoints.
"""
from __future__ import annotations

import pathlib
from typing import Any, Mapping, Sequence

import numpy as np

from anisotropy_jax import results
from anisotropy_jax.config import ConfigError
from anisotropy_jax.metrics.correlation import one_sample_t_test, t_interval
from anisotropy_jax.plotting import dynamics as plots

# Head metrics summarised by their mean over every head of the model (signed ones as |·|).
HEAD_SUMMARY = ("attention_entropy_normalized", "key_term_std", "key_term_share",
                "mean_query_key_dot_softmax_invariant", "mean_query_key_cosine",
                "mean_query_norm", "mean_key_norm", "attention_max", "attention_query_agreement",
                "attention_row_cosine", "attention_query_key_information")
_SIGNED = ("mean_query_key_dot_softmax_invariant", "mean_query_key_cosine")
UNITS = ("seeds: independent training runs (initialisation, train/validation split, batch order "
         "and masking all change with the seed)")
INTERVAL = "95% Student-t interval over seeds: mean ± t(0.975, n−1)·s/√n"


def _per_seed(run: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """{quantity: (S,)} of one seed's results.json."""
    heads, out = run["heads"], {}
    for name in HEAD_SUMMARY:
        if name in heads:
            values = np.asarray(heads[name], np.float64)
            values = np.abs(values) if name in _SIGNED else values
            key = f"abs_{name}" if name in _SIGNED else name
            out[f"heads_mean/{key}"] = values.reshape(values.shape[0], -1).mean(-1)
    cross = np.asarray(run["layers"]["cross_sequence_cosine"], np.float64)
    if cross.shape[1] > 2:  # outputs of blocks 0 … n−2
        out["intermediate_cross_sequence_cosine"] = cross[:, 1:-1].mean(-1)
    for name in ("input_centered", "output_centered"):
        out[f"embedding_partition_isotropy/{name}"] = np.asarray(run["embeddings"][name])
    for name, value in (run.get("correlation") or {}).items():
        if isinstance(value, dict):
            out[f"spearman_across_heads/{name}"] = np.asarray(value["rho"], np.float64)
    val = dict((int(s), float(v)) for s, v in run["training"]["val_loss"])
    out["val_loss"] = np.array([val.get(int(s), np.nan) for s in run["steps"]])
    return out


def aggregate(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per checkpoint: mean and 95% t-interval over the seeds of every quantity of `_per_seed`;
    the per-seed change first → last checkpoint with its interval and a one-sample t-test over
    the seeds. Needs ≥ 2 runs with the same checkpoint steps (ValueError naming the seed)."""
    if len(runs) < 2:
        raise ValueError(f"seeds: need at least 2 runs to aggregate, got {len(runs)}")
    steps = [int(s) for s in runs[0]["steps"]]
    for run in runs[1:]:
        if [int(s) for s in run["steps"]] != steps:
            raise ValueError(f"seeds: seed {run['config']['train']['seed']} has checkpoints "
                             f"{list(run['steps'])}, seed 0's run has {steps}")
    per_seed = [_per_seed(run) for run in runs]
    names = [n for n in per_seed[0] if all(n in p for p in per_seed)]
    quantities, changes = {}, {}
    for name in names:
        values = np.stack([p[name] for p in per_seed])  # (R, S)
        quantities[name] = {"per_seed": values, **t_interval(values, axis=0)}
        if np.all(np.isfinite(values[:, [0, -1]])):
            delta = values[:, -1] - values[:, 0]
            changes[name] = {"per_seed": delta, **t_interval(delta),
                             "t_test_over_seeds": one_sample_t_test(delta)}
    return {"units": UNITS, "interval": INTERVAL,
            "seeds": [int(run["config"]["train"]["seed"]) for run in runs], "steps": steps,
            "quantities": quantities, "changes_first_to_last": changes}


def _cell(q: Mapping[str, Any], i: int) -> str:
    mean, low, high = (float(np.ravel(q[k])[i]) for k in ("mean", "low", "high"))
    return f"{mean:.3g} [{low:.3g}, {high:.3g}]"


def format_table(summary: Mapping[str, Any]) -> str:
    """Markdown table: each quantity at the first and last checkpoint and its change (mean
    [95% t-interval] over seeds) with the t-test p over seeds."""
    steps, n = summary["steps"], len(summary["seeds"])
    lines = [f"| quantity ({n} seeds) | step {steps[0]} | step {steps[-1]} | change | p (seeds) |",
             "| --- | --- | --- | --- | --- |"]
    for name, q in summary["quantities"].items():
        change = summary["changes_first_to_last"].get(name)
        cells = [_cell(q, 0), _cell(q, -1)]
        cells += ([_cell(change, 0), f"{change['t_test_over_seeds']['p']:.2g}"] if change
                  else ["n/a", "n/a"])
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_seeds(values: Sequence[str]) -> list[int]:
    """The --seeds flag: ≥ 2 distinct integers ≥ 0 (ConfigError naming `seeds` otherwise)."""
    try:
        seeds = [int(v) for v in values]
    except ValueError:
        raise ConfigError(f"seeds: expected integers, got {list(values)}") from None
    if len(seeds) < 2 or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ConfigError(f"seeds: need at least 2 distinct integers >= 0, got {seeds}")
    return seeds


def write(summary: Mapping[str, Any], workdir: str | pathlib.Path,
          provenance: results.Provenance, command: str) -> dict[str, Any]:
    """figures/seeds.png, then results.json (provenance, the command, the summary) last."""
    workdir = pathlib.Path(workdir)
    out = {"provenance": provenance.finish(), "command": command, **summary}
    results.save_figure(plots.seeds_figure(dict(summary)), workdir / "figures" / "seeds.png")
    results.write_json(workdir / "results.json", out)
    return out
