"""Several seeds of one training configuration: per-checkpoint means with 95% intervals over the
seeds, and the change from the first to the last checkpoint tested over the seeds.

Intervals: Student-t for means of unbounded per-seed values (head means, the intervention's Δ);
Fisher z for correlations (one ρ per seed: averaged in z = artanh ρ, t interval in z, tanh back,
so the bounds stay inside ±1), and their first → last change is taken in z.

The seeds are the independent units here (each changes the initialisation, the split, the batch
order and the masking); the heads of one model never are. `aggregate` takes the results.json dicts
of the seeds' analyses (`dynamics.write` returns them; json.load of the files works too), so a
summary can be rebuilt from committed files without the checkpoints.

Whether the seeds' models learned at all (`learning`: every seed's final validation loss below the
threshold of `studies.training.learned`) is kept in the summary and printed first where they did
not: a verdict on them is "not testable".
"""
from __future__ import annotations

import math
import pathlib
from typing import Any, Mapping, Sequence

import numpy as np

from anisotropy_jax import results
from anisotropy_jax.config import ConfigError, TrainConfig, vocab_size
from anisotropy_jax.metrics.correlation import (fisher_z, mean_correlation_interval,
                                                one_sample_t_test, t_interval)
from anisotropy_jax.metrics.intervention import (DEFICIT_SHARES, MATCH_QUALITY, REMOVALS,
                                                STATISTICS)
from anisotropy_jax.plotting import dynamics as plots
from anisotropy_jax.studies.training import learned

# Head metrics summarised by their mean over every head of the model (signed ones as |·|).
HEAD_SUMMARY = ("attention_entropy_normalized", "key_term_std", "key_term_share",
                "mean_query_key_dot_softmax_invariant", "mean_query_key_cosine",
                "mean_query_norm", "mean_key_norm", "attention_max", "attention_query_agreement",
                "attention_row_cosine", "attention_query_key_information", "key_term_var",
                "query_specific_var", "key_query_covariance", "logit_var",
                *(f"delta_{stat}_{removal}" for removal in REMOVALS for stat in STATISTICS),
                *MATCH_QUALITY)
# Per-head arrays kept whole in the summary ("per_head": (seeds, S, layers, H) each): what Godey
# 4b is decided on, and what says why the within-layer partial correlation is undefined.
PER_HEAD = (*DEFICIT_SHARES, *MATCH_QUALITY, "attention_entropy_normalized", "key_term_var",
            "query_specific_var", "logit_var")
CORRELATIONS = ("spearman_across_heads/", "partial_within_layers/")
_SIGNED = ("mean_query_key_dot_softmax_invariant", "mean_query_key_cosine")
UNITS = ("seeds: independent training runs (initialisation, train/validation split, batch order "
         "and masking all change with the seed)")
INTERVAL = "95% Student-t interval over seeds: mean ± t(0.975, n−1)·s/√n"
CORRELATION_INTERVAL = ("95% Fisher-z interval over seeds (spearman_across_heads/*, "
                        "partial_within_layers/*): z = artanh(rho) per seed (|rho| clipped to "
                        "1 - 1e-9), mean z ± t(0.975, n−1)·s_z/√n, tanh back; mean = tanh(mean z);"
                        " their change first → last is the per-seed change of z")


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
    out.update(_intervention_contrasts(heads))
    out.update(_deficit_shares(heads))
    for name, value in (run.get("correlation") or {}).items():
        if isinstance(value, dict):
            key = (f"partial_within_layers/{name.removeprefix('partial_')}"
                   if name.startswith("partial_") else f"spearman_across_heads/{name}")
            out[key] = np.asarray(value["rho"], np.float64)
    val = dict((int(s), float(v)) for s, v in run["training"]["val_loss"])
    out["val_loss"] = np.array([val.get(int(s), np.nan) for s in run["steps"]])
    return out


def _intervention_contrasts(heads: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """{"heads_mean/delta_<stat>_key_term_minus_<control>": (S,)}: per checkpoint, the mean over
    heads of Δ(key term removed) − Δ(control removed), for every control (absent before the
    intervention existed)."""
    out = {}
    for stat in STATISTICS:
        for control in REMOVALS[1:]:
            names = (f"delta_{stat}_key_term", f"delta_{stat}_{control}")
            if all(n in heads for n in names):
                diff = (np.asarray(heads[names[0]], np.float64)
                        - np.asarray(heads[names[1]], np.float64))
                out[f"heads_mean/delta_{stat}_key_term_minus_{control}"] = diff.reshape(
                    diff.shape[0], -1).mean(-1)
    return out


def _deficit_shares(heads: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """{"heads_mean/entropy_deficit_share_<removal>", "heads_mean/entropy_deficit_share_key_term_
    minus_matched_control", "heads_fraction/entropy_deficit_share_undefined"}, each (S,): the
    means over the heads where the share is defined (NaN where none is), and the fraction of
    heads where it is not (about uniform attention); absent before the matched control existed."""
    if not all(name in heads for name in DEFICIT_SHARES):
        return {}
    shares = {name: np.asarray(heads[name], np.float64) for name in DEFICIT_SHARES}
    key_term, control = shares.values()
    shares[f"{DEFICIT_SHARES[0]}_minus_matched_control"] = key_term - control
    undefined = ~np.isfinite(key_term - control)
    out = {"heads_fraction/entropy_deficit_share_undefined":
           undefined.reshape(undefined.shape[0], -1).mean(-1)}
    for name, values in shares.items():
        flat = values.reshape(values.shape[0], -1)
        count = np.sum(np.isfinite(flat), axis=-1)
        total = np.sum(np.where(np.isfinite(flat), flat, 0.0), axis=-1)
        out[f"heads_mean/{name}"] = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return out


def per_head_arrays(runs: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """{name: (seeds, S, layers, H)} for the PER_HEAD names every run has."""
    return {name: np.stack([np.asarray(run["heads"][name], np.float64) for run in runs])
            for name in PER_HEAD if all(name in run["heads"] for run in runs)}


def _summarise(name: str, values_RxS: np.ndarray) -> tuple[dict, dict | None]:
    """(the quantity's per-checkpoint interval, its first → last change or None when either end
    is not finite in some seed); correlations in Fisher z (CORRELATION_INTERVAL)."""
    if name.startswith(CORRELATIONS):
        quantity = {"per_seed": values_RxS, "interval": "fisher_z",
                    **mean_correlation_interval(values_RxS, axis=0)}
        ends = fisher_z(values_RxS[:, [0, -1]])
        scale = "fisher_z"
    else:
        quantity = {"per_seed": values_RxS, "interval": "student_t",
                    **t_interval(values_RxS, axis=0)}
        ends, scale = values_RxS[:, [0, -1]], "value"
    if not np.all(np.isfinite(ends)):
        return quantity, None
    delta = ends[:, 1] - ends[:, 0]
    return quantity, {"per_seed": delta, "scale": scale, **t_interval(delta),
                      "t_test_over_seeds": one_sample_t_test(delta)}


def aggregate(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per checkpoint: mean and 95% interval over the seeds of every quantity of `_per_seed`
    (Student-t; Fisher z for correlations); the per-seed change first → last checkpoint with its
    interval and a one-sample t-test over the seeds; "per_head": `per_head_arrays`; "learning"
    (`learning`, where the runs record their objective). Needs ≥ 2 runs with the same checkpoint
    steps (ValueError naming the seed). Quantities absent from some seed's results (older
    analyses) are left out."""
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
        quantities[name], change = _summarise(name, np.stack([p[name] for p in per_seed]))
        if change is not None:
            changes[name] = change
    out = {"units": UNITS, "interval": INTERVAL, "correlation_interval": CORRELATION_INTERVAL,
           "seeds": [int(run["config"]["train"]["seed"]) for run in runs], "steps": steps,
           "quantities": quantities, "changes_first_to_last": changes,
           "per_head": per_head_arrays(runs)}
    objective = runs[0]["config"]["train"].get("objective")
    if objective is not None:
        out["learning"] = learning(out, objective)
    return out


def learning(summary: Mapping[str, Any], objective: str) -> dict[str, Any]:
    """`training.learned.check` of every seed's final validation loss (the summary's `val_loss`
    at the last checkpoint; none recorded: not learned) against ln V of `objective`."""
    q = summary["quantities"].get("val_loss")
    finals = (list(np.asarray(q["per_seed"], np.float64)[:, -1])
              if q is not None and "per_seed" in q else [])
    labels = [f"seed {s}" for s in summary["seeds"]] if finals else None
    return learned.check(finals, vocab_size(objective), labels)


def format_summary(summary: Mapping[str, Any]) -> str:
    """What the seeds study prints: "not testable: <why>" where the models did not learn
    (`learning`), then `format_table`."""
    note = (summary.get("learning") or {}).get("note")
    return (f"not testable: {note}\n" if note else "") + format_table(summary)


UNDEFINED = "—"  # a table cell whose value is undefined (`undefined_reason` says why)
# (name pattern, where the quantity is undefined), the first match applies.
_UNDEFINED_REASONS = (
    ("deficit_share", "where no head has an entropy deficit to share (attention uniform in "
                      "every head, 1 − H/ln L < 0.01, as at initialisation)"),
    ("partial_within_layers/", "where nothing is left to correlate once the logit spread is "
                               "regressed out (the term or the entropy an exact linear function "
                               "of it over the heads of a layer)"),
    ("spearman_across_heads/", "where the entropy or the term is constant over the heads"),
    ("", "where a seed's value is not finite"))


def undefined_reason(name: str) -> str:
    """Where the seeds quantity `name` is undefined (NaN) at a checkpoint ("where ...")."""
    return next(why for key, why in _UNDEFINED_REASONS if key in name)


def _defined(q: Mapping[str, Any], i: int) -> bool:
    return bool(np.isfinite(float(np.ravel(q["mean"])[i])))


def _cell(q: Mapping[str, Any], i: int) -> str:
    mean, low, high = (float(np.ravel(q[k])[i]) for k in ("mean", "low", "high"))
    if not np.isfinite(mean):
        return UNDEFINED
    if not (np.isfinite(low) and np.isfinite(high)):
        return f"{mean:.3g}"
    return f"{mean:.3g} [{low:.3g}, {high:.3g}]"


def format_table(summary: Mapping[str, Any]) -> str:
    """Markdown table: each quantity at the first and last checkpoint and its change (mean
    [95% interval] over seeds; for correlations the change of Fisher z, marked "(Δz)") with the
    t-test p over seeds. An undefined value is UNDEFINED, with a note under the table saying
    why; a quantity undefined at every checkpoint is left out and named there."""
    steps, n = summary["steps"], len(summary["seeds"])
    lines = [f"| quantity ({n} seeds) | step {steps[0]} | step {steps[-1]} | change | p (seeds) |",
             "| --- | --- | --- | --- | --- |"]
    blank, never, untested = {}, [], False
    for name, q in summary["quantities"].items():
        if not any(_defined(q, i) for i in range(len(steps))):
            never.append(name)
            continue
        change = summary["changes_first_to_last"].get(name)
        cells = [_cell(q, 0), _cell(q, -1)]
        unit = " (Δz)" if change and change.get("scale") == "fisher_z" else ""
        p = float(change["t_test_over_seeds"]["p"]) if change else math.nan
        untested |= change is not None and not math.isfinite(p)
        cells += [_cell(change, 0) + unit if change else UNDEFINED,
                  f"{p:.2g}" if math.isfinite(p) else UNDEFINED]
        if UNDEFINED in cells[:3]:
            blank[name] = [f"step {steps[i]}" for i in (0, -1) if not _defined(q, i)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines + _notes(blank, never, untested))


def _notes(blank: Mapping[str, list[str]], never: list[str], untested: bool) -> list[str]:
    """The lines under the table: why the UNDEFINED cells are, by reason, and the quantities
    left out."""
    if not blank and not never and not untested:
        return []
    by_reason: dict[str, list[str]] = {}
    for name, where in blank.items():
        at = f" ({', '.join(where)})" if where else ""
        by_reason.setdefault(undefined_reason(name), []).append(name + at)
    notes = [""] + [f"{UNDEFINED} {', '.join(names)}: undefined in some seed, {why}."
                    for why, names in by_reason.items()]
    if blank:
        notes.append(f"{UNDEFINED} in the change and p columns: the change first → last needs a "
                     f"defined value at both ends in every seed.")
    if untested:
        notes.append(f"{UNDEFINED} in the p column beside a change: the change is the same in "
                     f"every seed, so the t-test over seeds is undefined.")
    notes += [f"Not shown: {name}, undefined at every checkpoint, {undefined_reason(name)}."
              for name in never]
    return notes


def parse_seeds(values: Sequence[str]) -> list[int]:
    """The --seeds flag: ≥ 2 distinct integers ≥ 0 (ConfigError naming `seeds` otherwise)."""
    try:
        seeds = [int(v) for v in values]
    except ValueError:
        raise ConfigError(f"seeds: expected integers, got {list(values)}") from None
    if len(seeds) < 2 or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ConfigError(f"seeds: need at least 2 distinct integers >= 0, got {seeds}")
    return seeds


def training_scope(config: TrainConfig, device: str) -> dict[str, Any]:
    """What a verdict on these runs rests on: model size, training length, tokens seen (steps ×
    batch × sequence length), matmul precision and the device (e.g. '1 × NVIDIA H100 80GB HBM3')."""
    model, data = config.model, config.data
    return {"objective": config.objective, "d_model": model.d_model,
            "num_layers": model.num_layers, "num_heads": model.num_heads,
            "seq_len": data.seq_len, "batch_size": data.batch_size, "steps": config.steps,
            "tokens_seen": config.steps * data.batch_size * data.seq_len,
            "precision": model.precision, "device": device}


def write(summary: Mapping[str, Any], workdir: str | pathlib.Path,
          provenance: results.Provenance, command: str,
          scope: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """figures/seeds_<group>.png (`plotting.dynamics.seeds_figures`: one figure per group of
    quantities), then results.json (provenance, the command, `training_scope` when given, the
    summary) last."""
    workdir = pathlib.Path(workdir)
    out = {"provenance": provenance.finish("seeds"), "command": command,
           **({"scope": dict(scope)} if scope else {}), **summary}
    for group, fig in plots.seeds_figures(dict(summary)).items():
        results.save_figure(fig, workdir / "figures" / f"seeds_{group}.png")
    results.write_json(workdir / "results.json", out)
    return out
