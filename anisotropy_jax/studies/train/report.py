"""Writing the per-checkpoint analysis into the run's workdir, and the lines the scripts print.

  results.json  provenance, config ({"train", "analysis": {batch_size, seed}}), objects (what
                each group measures), training (first/final loss, validation curve, learning:
                whether the model learned, `studies.training.learned`), steps, heads, layers,
                embeddings, final_norm (clm), last_block, correlation, trends (`holds` None: not
                testable, the model did not learn) — written last
  dynamics.npz  "steps", "<group>/<metric>" for heads, layers, embeddings, final_norm,
                last_block, and "correlation/<metric>/rho", "correlation/<metric>/p" (per
                checkpoint)
  figures/      loss.png, trajectories.png, anisotropy_heatmap.png, entropy_vs_logit_terms.png
                (≥ 3 checkpoints)
"""
from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import numpy as np

from anisotropy_jax import results
from anisotropy_jax.plotting import dynamics as plots
from anisotropy_jax.studies.train.analysis import DynamicsResult

OBJECTS = {
    "heads": "per checkpoint, layer, head: query/key geometry and attention sharpness on "
             "a fixed validation batch (queries with one visible key excluded); "
             "mean_query_key_dot_softmax_invariant = mean q . mean k / sqrt(d_head) adds one "
             "constant to every logit of a query (the softmax cancels it); key_term_std = std "
             "over visible keys of mean q . (k_j - mean k) / sqrt(d_head), key_term_share = its "
             "variance / the variance over visible keys of the logits (each averaged over "
             "queries): the mean term the softmax does see (anisotropy_jax/metrics/logit_terms.py)"
             "; logit_var = key_term_var + query_specific_var + 2 key_query_covariance (per "
             "query over visible keys, averaged); delta_<stat>_<removal>: change of normalised "
             "entropy, query agreement or max probability when attention is recomputed without "
             "the key term, without the key term permuted over each query's visible keys "
             "(control) or over the sequence's keys (shared_control), controls averaged over 4 "
             "permutations, or without alpha times the query-specific term, alpha per query "
             "such that the logit variance falls as much as without the key term "
             "(matched_control); entropy_deficit_share_<key_term|matched_control>: (H after - "
             "H) / (1 - H) per head, NaN where 1 - H < 0.01; matched_control_unmatched_fraction: "
             "share of queries where no alpha matched the variance (then the alpha of least "
             "variance), matched_control_shortfall: the variance it failed to remove / the logit "
             "variance (anisotropy_jax/metrics/intervention.py, matched_control.py)",
    "layers": "per checkpoint and hidden state (0 = embedding output, i = block i-1 "
              "output): contextual-representation anisotropy",
    "embeddings": "partition isotropy of the input/output embedding matrices (rows of "
                  "byte ids present in the corpus; *_all_rows: every row)",
    "final_norm": "clm only: hidden states before/after the final LayerNorm",
    "last_block": "per checkpoint: RankMe (singular values of the raw token matrix, eps 1e-7) and "
                  "alpha-ReQ (covariance eigenvalue decay over ranks 11-100) of the last hidden "
                  "state's B*L tokens, computed on the host in float64",
    "correlation": "per checkpoint: Spearman rho (and p) of normalised entropy with each logit "
                   "term over the heads of all layers of that checkpoint (heads of one model, "
                   "not independent models); checkpoints are never pooled; partial_*: the "
                   "within-layer partial rank correlation of entropy with the term given the "
                   "logit spread (p_method says how)",
}
_GROUPS = ("heads", "layers", "embeddings", "final_norm", "last_block", "correlation", "trends")


def _groups(result: DynamicsResult) -> dict[str, Any]:
    """The metric groups the result holds, in results.json order (absent ones left out)."""
    return {name: getattr(result, name) for name in _GROUPS if getattr(result, name) is not None}


def flatten_arrays(result: DynamicsResult) -> dict[str, np.ndarray]:
    """{"steps": …, "heads/mean_query_norm": array, …} for results.write_npz."""
    flat = {"steps": np.asarray(result.steps)}
    for group in ("heads", "layers", "embeddings", "final_norm", "last_block"):
        for name, value in (getattr(result, group) or {}).items():
            flat[f"{group}/{name}"] = np.asarray(value)
    for name, value in (result.correlation or {}).items():
        if isinstance(value, dict):
            flat[f"correlation/{name}/rho"] = np.asarray(value["rho"])
            flat[f"correlation/{name}/p"] = np.asarray(value["p"])
    return flat


def _training_summary(result: DynamicsResult) -> dict[str, Any]:
    return {
        "first_loss": float(result.loss[0]) if result.loss.size else None,
        "final_loss": float(result.loss[-1]) if result.loss.size else None,
        "val_loss": [[int(s), float(v)] for s, v in zip(result.val_steps, result.val_loss)],
        "learning": result.learning,
    }


def _write_figures(result: DynamicsResult, figures: pathlib.Path) -> None:
    view = {"steps": result.steps, "objective": result.objective, **_groups(result)}
    results.save_figure(plots.loss_figure(result.loss_steps, result.loss, result.val_steps,
                                          result.val_loss), figures / "loss.png")
    results.save_figure(plots.trajectories_figure(view), figures / "trajectories.png")
    results.save_figure(plots.anisotropy_heatmap_figure(view), figures / "anisotropy_heatmap.png")
    if len(result.steps) >= 3:
        results.save_figure(plots.entropy_vs_logit_terms_figure(view),
                            figures / "entropy_vs_logit_terms.png")


def write(result: DynamicsResult, workdir: str | pathlib.Path,
          provenance: results.Provenance) -> dict[str, Any]:
    """Writes dynamics.npz, the figures and, last, results.json into `workdir`; returns the
    results.json dict."""
    workdir = pathlib.Path(workdir)
    analysis = {"batch_size": result.analysis.batch_size, "seed": result.analysis.seed}
    out = {
        "provenance": provenance.finish("train"),
        "config": {"train": dataclasses.asdict(result.config), "analysis": analysis},
        "objects": OBJECTS,
        "training": _training_summary(result),
        "steps": result.steps,
        **_groups(result),
    }
    results.write_npz(workdir / "dynamics.npz", flatten_arrays(result))
    _write_figures(result, workdir / "figures")
    results.write_json(workdir / "results.json", out)
    return out


UNDEFINED = "—"  # an undefined correlation (NaN in results.json)
UNDEFINED_NOTE = (f"{UNDEFINED}: undefined at that step: a Spearman ρ where the entropy or the term "
                  f"is constant over the heads; a partial ρ where nothing is left once the logit "
                  f"spread is regressed out (the term or the entropy an exact linear function of "
                  f"it over a layer's heads)")


def _signed(rho: Any) -> str:
    """A correlation with its sign, two decimals; UNDEFINED for one that JSON holds as "nan"
    (e.g. a partial correlation whose spread is constant over the heads)."""
    value = float(rho) if rho is not None else float("nan")
    return UNDEFINED if value != value else f"{value:+.2f}"


def format_report(doc: dict[str, Any]) -> str:
    """One line per expected trend: whether it holds, with its scalar numbers ("not testable"
    where the model did not learn, after a line that says why); then the per-checkpoint
    correlation across heads (of `write`'s results.json dict), UNDEFINED where a correlation is,
    with UNDEFINED_NOTE under them."""
    learning = (doc.get("training") or {}).get("learning") or {}
    lines = [f"not testable: {learning['note']}"] if learning.get("note") else []
    for name, value in (doc.get("trends") or {}).items():
        if isinstance(value, dict) and "holds" in value:
            numbers = {k: v for k, v in value.items()
                       if k != "holds" and not isinstance(v, (list, str))}
            verdict = "not testable" if value["holds"] is None else f"holds={value['holds']}"
            lines.append(f"{name}: {verdict} {numbers}")
    corr = doc.get("correlation") or {}
    rows = []
    for name, value in corr.items():
        if isinstance(value, dict):
            rhos = " ".join(f"{s}:{_signed(r)}" for s, r in zip(doc["steps"], value["rho"]))
            what = (f"{name} (within layers)" if name.startswith("partial_")
                    else f"spearman(entropy, {name})")
            rows.append(f"{what} across {corr['n']} heads, by step: {rhos}")
    if any(f":{UNDEFINED}" in row for row in rows):
        rows.append(UNDEFINED_NOTE)
    return "\n".join(lines + rows)
