"""Within each checkpoint, the Spearman correlation across heads of attention entropy with the
key-dependent logit term (and, for comparison, the softmax-invariant |q̄·k̄|/√Dh), and the partial
rank correlation within layers of entropy with the key term given the logit spread; along the
checkpoints, the expected trends of docs/SCIENCE.md ("The training-dynamics experiment"), each
with its numbers, "not testable" where the model did not learn (`final_loss_check`: the rule of
`studies.training.learned`). Host-side numpy (scipy for the rank correlation)."""
from __future__ import annotations

import warnings
from typing import Any, Mapping, Sequence

import numpy as np

from anisotropy_jax.config import vocab_size
from anisotropy_jax.metrics.correlation import partial_correlation, spearman
from anisotropy_jax.studies.training import learned


CORRELATED = ("key_term_std", "key_term_share", "mean_query_key_dot_softmax_invariant")
# Partial correlations of entropy with a logit term given the logit spread: name → term.
PARTIAL = {"partial_key_term_given_logit_spread": "key_term_var",
           "partial_query_specific_given_logit_spread": "query_specific_var"}
PARTIAL_METHOD = (
    "within-layer partial Spearman: ranks over all heads of the checkpoint of the normalised "
    "entropy, the term's variance and logit_var; Pearson correlation of the entropy and term "
    "ranks after both are regressed on the logit_var rank and one indicator per layer (layer "
    "fixed effects: only within-layer differences count, pooled over layers with one common "
    "slope); p: t test on df = heads − layers − 2 (heads of one model, not independent models)")
UNITS = ("the heads of all layers of one checkpoint: units of one model, not independent models; "
         "p tests the association across those heads")


def entropy_correlations_across_heads(heads: dict[str, np.ndarray]) -> dict[str, Any]:
    """Per checkpoint, Spearman ρ of the normalised entropy with each of CORRELATED (absolute
    value for the softmax-invariant q̄·k̄) over the layers × heads of that checkpoint.

    Steps are never pooled (both series trend with the step). Returns {"units", "n",
    <name>: {"rho": (S,), "p": (S,), "p_method": [S]}}; NaN where a series is constant.
    """
    entropy = np.asarray(heads["attention_entropy_normalized"], np.float64)
    out: dict[str, Any] = {"units": UNITS, "n": int(np.prod(entropy.shape[1:]))}
    for name in CORRELATED:
        other = np.abs(np.asarray(heads[name], np.float64))
        rows = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a constant series → NaN, reported as such
            for step in range(entropy.shape[0]):
                rows.append(spearman(entropy[step].reshape(-1), other[step].reshape(-1)))
        out[name] = {"rho": np.array([r["rho"] for r in rows]),
                     "p": np.array([r["p"] for r in rows]),
                     "p_method": [r["p_method"] for r in rows]}
    if all(name in heads for name in ("logit_var", *PARTIAL.values())):
        out.update(partial_correlations_within_layers(heads))
    return out


def partial_correlations_within_layers(heads: dict[str, np.ndarray]) -> dict[str, Any]:
    """Per checkpoint, for each of PARTIAL: {"rho": (S,), "p": (S,), "df", "p_method"}, the
    partial rank correlation of normalised entropy with the term given the logit spread, within
    layers (PARTIAL_METHOD says how). With 4 heads per layer a partial correlation inside one
    layer would rest on 1 degree of freedom; layer indicators pool the within-layer comparisons
    into one coefficient instead. NaN where a series is constant after the regression; {} when
    there are too few heads for a degree of freedom (heads − layers − 2 < 1)."""
    entropy = np.asarray(heads["attention_entropy_normalized"], np.float64)
    steps, num_layers, num_heads = entropy.shape
    if num_layers * num_heads - num_layers - 2 < 1:
        return {}
    out = {}
    for name, term in PARTIAL.items():
        values = np.asarray(heads[term], np.float64)
        spread = np.asarray(heads["logit_var"], np.float64)
        rows = [partial_within_layers_one(entropy[step], values[step], spread[step])
                for step in range(steps)]
        out[name] = {"rho": np.array([r["rho"] for r in rows]),
                     "p": np.array([r["p"] for r in rows]),
                     "df": int(min(r["df"] for r in rows)), "p_method": PARTIAL_METHOD}
    return out


def partial_within_layers_one(entropy_LxH: Any, term_LxH: Any, spread_LxH: Any
                              ) -> dict[str, Any]:
    """One checkpoint's within-layer partial rank correlation (PARTIAL_METHOD) of entropy with a
    term given the logit spread: `metrics.correlation.partial_correlation`'s dict, whose
    "explained" names the series the spread and the layers fix exactly ("x" entropy, "y" the
    term), the reason ρ is NaN. Needs heads − layers − 2 ≥ 1."""
    from scipy import stats  # host-side only

    entropy = np.asarray(entropy_LxH, np.float64)
    num_layers, num_heads = entropy.shape
    layer_NxL = np.repeat(np.eye(num_layers), num_heads, axis=0)[:, 1:]  # intercept: layer 0
    covariates = np.concatenate([stats.rankdata(np.ravel(spread_LxH))[:, None], layer_NxL],
                                axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return partial_correlation(stats.rankdata(entropy.reshape(-1)),
                                   stats.rankdata(np.ravel(term_LxH)), covariates)


def _head_trends(heads: dict, objective: str) -> dict[str, Any]:
    """Growth of ‖q̄‖, ‖k̄‖, |cos(q̄, k̄)|, the signs of the cosines, the fall of the entropy."""
    first, last = 0, -1

    def head_mean(name, index, fn=lambda x: x):
        return float(np.mean(fn(heads[name][index])))

    out = {}
    for name in ("mean_query_norm", "mean_key_norm", "key_term_std"):
        a, b = head_mean(name, first), head_mean(name, last)
        out[f"{name}_grows"] = {"first": a, "last": b, "holds": b > a}
    a, b = head_mean("mean_query_key_cosine", first, np.abs), head_mean(
        "mean_query_key_cosine", last, np.abs)
    out["abs_cosine_grows_from_zero"] = {"first": a, "last": b, "holds": b > a}
    cos_last = heads["mean_query_key_cosine"][last]
    positive, negative = int(np.sum(cos_last > 0)), int(np.sum(cos_last < 0))
    signs = {"positive_heads": positive, "negative_heads": negative,
             "holds": positive > 0 and negative > 0}
    if objective == "clm":
        signs["mostly_negative"] = negative > positive
    out["both_signs_across_heads"] = signs
    a, b = head_mean("attention_entropy_normalized", first), head_mean(
        "attention_entropy_normalized", last)
    out["entropy_falls"] = {"first": a, "last": b, "holds": b < a}
    return out


def final_loss_check(objective: str, val_loss: Sequence[float]) -> dict[str, Any]:
    """`training.learned.check` of a run's final validation loss (the last of `val_loss`, the
    eval.jsonl records in step order) against ln V of the objective's vocabulary."""
    return learned.check(list(val_loss)[-1:], vocab_size(objective))


def expected_trends(steps: np.ndarray, heads: dict, layers: dict, correlation: dict,
                    objective: str, learning: Mapping[str, Any] | None = None
                    ) -> dict[str, Any]:
    """docs/SCIENCE.md's expected trends, each with the numbers at the first and last checkpoint
    and whether it holds in this run (`holds` is a plain comparison, no significance test, except
    the correlation across the heads of the last checkpoint: ρ < 0 and p < 0.05, p over heads
    of one model). With `learning` (`final_loss_check`) kept as "learned": where the model did
    not learn, every `holds` (and `mostly_negative`) is None ("not testable"); the numbers stay."""
    first, last = 0, -1
    num_layers = heads["mean_query_norm"].shape[1]
    out = _head_trends(heads, objective)
    rho, p = correlation["key_term_std"]["rho"], correlation["key_term_std"]["p"]
    out["entropy_anticorrelates_with_key_term_across_heads"] = {
        "rho_last": float(rho[last]), "p_last": float(p[last]), "units": correlation["units"],
        "rho_last_softmax_invariant": float(
            correlation["mean_query_key_dot_softmax_invariant"]["rho"][last]),
        "holds": bool(rho[last] < 0 and p[last] < 0.05)}
    inter = slice(1, num_layers)  # outputs of blocks 0 .. n-2: neither the input nor the last
    if num_layers >= 2:
        cross = layers["cross_sequence_cosine"]
        a, b = float(np.mean(cross[first, inter])), float(np.mean(cross[last, inter]))
        out["intermediate_anisotropy_rises"] = {
            "first": a, "last": b, "max_over_steps": float(np.max(np.mean(cross[:, inter], 1))),
            "per_layer_first": cross[first].tolist(), "per_layer_last": cross[last].tolist(),
            "holds": b > a}
    out["steps"] = [int(steps[0]), int(steps[-1])]
    if learning is not None:
        out["learned"] = dict(learning)
        if not learning["learned"]:
            for value in out.values():
                for verdict in ("holds", "mostly_negative"):
                    if isinstance(value, dict) and verdict in value:
                        value[verdict] = None
    return out
