"""The pretrained study's one batch-forward loop and its per-state metrics (docs/PRETRAINED.md,
"Metrics, per hidden state"), the same for text, images and audio.

`collect_states(forward, params, batches)` runs every `ForwardBatch` through a family's
`hidden_states_fn` and keeps, per hidden state, the measured tokens (the mask: no padding, only
the frames that cover speech) as a cloud of N tokens (N, D), each tagged with the input it comes
from (a sentence, an image, an utterance) and its position, in (input, position) order
(`TokenStates`). `state_metrics` measures every state (`layer_values`: every metric of
METRIC_NAMES from `metrics.layer_metrics`, the one per-layer function of every study; the
sequence metrics use the (input, position) layout with a mask), and `correlations` relates drift
to anisotropy across the states.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Iterable, Mapping

import jax
import numpy as np

from anisotropy_jax import metrics
from anisotropy_jax.metrics.correlation import (exact_permutation_p,
                                                mean_correlation_interval, t_interval)

# Per-state metrics (all computed on the tokens selected by the mask), names and meanings in
# `metrics.LAYER_METRICS`. The intrinsic dimensions are TwoNN (Facco et al.) and GRIDE at
# (n1, n2) = metrics.intrinsic_dimension.LAYER_GRIDE_RANKS = (8, 16) (Denti et al.; why that
# scale: its comment) from one neighbour pass; exact duplicates (e.g. [CLS] at position 0 of
# every sentence in state 0) drop out; None where undefined (fewer than 3 tokens, 17 for GRIDE;
# every token a duplicate).
METRIC_NAMES = ("average_cosine", "centered_average_cosine", "centering_removed_share",
                "centered_average_cosine_without_massive",
                "centering_removed_share_without_massive", "centered_average_cosine_median",
                "centering_removed_share_median",
                "cross_sequence_cosine", "within_sequence_cosine", "sampled_pair_cosine",
                "drift_norm", "relative_drift", "mean_norm", "isoscore", "effective_rank",
                "effective_rank_centered", "top_pc_variance_ratio", "twonn_dimension",
                "gride_dimension")
# Metrics that may be undefined on a cloud (None in results.json) instead of an error.
UNDEFINED_AS_NONE = ("twonn_dimension", "gride_dimension")
# Anisotropy measures correlated with drift_norm and relative_drift across layers.
CORRELATED_COSINES = ("average_cosine", "cross_sequence_cosine", "sampled_pair_cosine",
                      "centered_average_cosine")
# Below this average cosine centering_removed_share is None.
ANISOTROPY_FLOOR = metrics.ANISOTROPY_FLOOR
centering_removed_share = metrics.centering_removed_share


@dataclasses.dataclass(frozen=True)
class ForwardBatch:
    """One batch of the loop: `forward(params, *inputs)`; the tokens measured (`mask_BxL`, None:
    every token; a state of another token count, e.g. pooled features, keeps all of its own), the
    input each row holds (`index_B`; filler rows hold no measured token), and per-token tags
    (B, L) kept with the measured tokens (text: "token_ids", "special")."""

    inputs: tuple[Any, ...]
    index_B: np.ndarray
    mask_BxL: np.ndarray | None = None
    tags: Mapping[str, np.ndarray] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class TokenStates:
    """The measured tokens of every hidden state (0 = embedding output), in (input, position)
    order: state s is `layers[s]` (N_s, D_s) float32, its token i from input `index[s][i]` at
    `position[s][i]`. States may differ in token count and width (CNN stages, pooled features).
    `tags` (N_0,) are the batches' tags of state 0's tokens (text: every state has those tokens)."""

    layers: list[np.ndarray]
    index: list[np.ndarray]
    position: list[np.ndarray]
    tags: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    @property
    def token_ids(self) -> np.ndarray | None:
        """(N,) the token ids (text only)."""
        return self.tags.get("token_ids")

    @property
    def special(self) -> np.ndarray | None:
        """(N,) True on [CLS], [SEP], ... (text only)."""
        return self.tags.get("special")


def collect_states(forward: Callable[..., Any], params: Any, batches: Iterable[ForwardBatch]
                   ) -> TokenStates:
    """Runs every batch through `forward` (a family's hidden_states_fn: (S, B, L, D) states, or
    a list of (B, L_s, D_s)) and keeps the measured tokens of every state, on the host."""
    kept: list[dict[str, list[np.ndarray]]] = []
    for batch in batches:
        for s, state in enumerate(jax.device_get(forward(params, *batch.inputs))):
            state = np.asarray(state, np.float32)
            mask = batch.mask_BxL
            masked = mask is not None and mask.shape == state.shape[:2]
            rows, cols = np.nonzero(mask if masked else np.ones(state.shape[:2], bool))
            if s == len(kept):
                kept.append({"x": [], "index": [], "position": [],
                             **({k: [] for k in batch.tags} if s == 0 else {})})
            got = kept[s]
            got["x"].append(state[rows, cols])
            got["index"].append(batch.index_B[rows])
            got["position"].append(cols)
            for name, tag in batch.tags.items() if s == 0 else ():
                got[name].append(tag[rows, cols])
    out = []
    for got in kept:
        joined = {name: np.concatenate(parts) for name, parts in got.items()}
        order = np.lexsort((joined["position"], joined["index"]))
        out.append({name: values[order] for name, values in joined.items()})
    return TokenStates([o["x"] for o in out], [o["index"] for o in out],
                       [o["position"].astype(np.int64) for o in out],
                       {k: v for k, v in out[0].items() if k not in ("x", "index", "position")})


# One program per state shape: every metric of METRIC_NAMES but the host-side share.
_layer_metrics = jax.jit(metrics.layer_metrics, static_argnames=("names", "num_pairs"))


def sequence_layout(sentence_N: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(slot (N,), position within its input (N,), mask (S, max_len)) of tokens tagged by their
    input (`sentence_N` sorted); ValueError with fewer than 2 inputs."""
    ids, slot = np.unique(sentence_N, return_inverse=True)
    if len(ids) < 2:
        raise ValueError("the cross-sequence cosine needs at least 2 inputs (sentences, images or "
                         "utterances) with measured tokens")
    starts = np.searchsorted(sentence_N, ids)
    position = np.arange(len(sentence_N)) - starts[slot]
    mask_SxL = np.zeros((len(ids), int(position.max()) + 1), bool)
    mask_SxL[slot, position] = True
    return slot, position, mask_SxL


def layer_values(x_NxD: np.ndarray, sentence_N: np.ndarray, key: jax.Array,
                 num_pairs: int = 10_000) -> dict[str, float | None]:
    """Every metric of METRIC_NAMES for one state (`metrics.layer_metrics` over its tokens in
    their (input, position) layout, then `metrics.centering_removed_share`).
    within_sequence_cosine is None when every input has a single token (pooled features), an
    intrinsic dimension (UNDEFINED_AS_NONE) when it is undefined or infinite. FloatingPointError
    naming another non-finite metric."""
    if len(x_NxD) < 2:
        raise ValueError("fewer than 2 tokens to measure")
    slot, position, mask_SxL = sequence_layout(sentence_N)
    x_SxLxD = np.zeros(mask_SxL.shape + (x_NxD.shape[-1],), np.float32)
    x_SxLxD[slot, position] = x_NxD
    names = tuple(n for n in METRIC_NAMES if n not in metrics.REMOVED_SHARES)
    values = jax.device_get(_layer_metrics(x_SxLxD, mask_SxL, names=names, tokens_NxD=x_NxD,
                                           key=key, num_pairs=num_pairs))
    values.setdefault("within_sequence_cosine", None)  # one token per input
    for share, centred in metrics.REMOVED_SHARES.items():
        values[share] = centering_removed_share(float(values["average_cosine"]),
                                                float(values[centred]))
    out: dict[str, float | None] = {}
    for name in METRIC_NAMES:
        out[name] = None if values[name] is None else float(values[name])
        if name in UNDEFINED_AS_NONE and out[name] is not None and not math.isfinite(out[name]):
            out[name] = None
        if out[name] is not None and not math.isfinite(out[name]):
            raise FloatingPointError(f"metric {name} is not finite ({out[name]})")
    return out


def state_metrics(states: TokenStates, key: jax.Array, num_pairs: int = 10_000,
                  include_special_tokens: bool = True) -> dict[str, list[float | None]]:
    """Per hidden state: every metric of METRIC_NAMES over its measured tokens (without
    [CLS]/[SEP]/... when `include_special_tokens` is False and the states have them). Sequence
    metrics use the (input, position) layout with a mask; the sampled-pair estimate uses the same
    key for every state (same pairs). Raises FloatingPointError naming a metric that is not
    finite."""
    special = states.special
    keep = None if include_special_tokens or special is None else ~special
    if keep is not None and keep.sum() < 2:
        raise ValueError("fewer than 2 tokens to measure")
    out: dict[str, list[float | None]] = {name: [] for name in METRIC_NAMES}
    for x_NxD, input_N in zip(states.layers, states.index):
        if keep is not None:
            x_NxD, input_N = x_NxD[keep], input_N[keep]
        for name, value in layer_values(x_NxD, input_N, key, num_pairs).items():
            out[name].append(value)
    return out


# Up to this many states the Spearman p is the exact permutation p (all n! orderings).
EXACT_P_MAX_STATES = 10


def correlations(layer_values: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    """Spearman and Pearson correlation (with p-values) of drift_norm and relative_drift with
    each cosine of CORRELATED_COSINES across hidden states (metrics.drift_anisotropy_correlation).
    With n ≤ EXACT_P_MAX_STATES states "spearman_p" is the exact permutation p
    (metrics.correlation.exact_permutation_p: the share of the n! orderings with |ρ| at least as
    large; for ρ = 0.929 at n = 7 it is 0.0067 where scipy's t approximation gives 0.0025), else
    scipy's (exact 2/n! at |ρ| = 1); "spearman_p_method" says which. The layers of one model are
    not independent units: the p-values describe rank agreement along one network. Keys like
    "drift_norm_vs_average_cosine"."""
    out = {}
    for drift in ("drift_norm", "relative_drift"):
        for cosine in CORRELATED_COSINES:
            x, y = layer_values[drift], layer_values[cosine]
            c = dict(metrics.drift_anisotropy_correlation(x, y))
            c["spearman_p_method"] = "scipy t approximation (exact 2/n! at |rho| = 1)"
            if c["n"] <= EXACT_P_MAX_STATES and math.isfinite(c["spearman"]):
                exact = exact_permutation_p(x, y, "spearman")
                c["spearman_p"], c["spearman_p_method"] = exact["p"], exact["p_method"]
            out[f"{drift}_vs_{cosine}"] = c
    return out


def _none_if_nan(values: np.ndarray) -> list[float | None]:
    return [None if not math.isfinite(v) else float(v) for v in np.asarray(values, np.float64)]


def _interval(rows_KxS: np.ndarray) -> dict[str, list[float | None]]:
    """Per state over K seeds: mean, 95 % Student-t interval (None for K = 1), min, max; a state
    where some seed has no value (None) has none."""
    k = rows_KxS.shape[0]
    half = (np.full(rows_KxS.shape[1], np.nan) if k < 2 else
            np.asarray(t_interval(rows_KxS)["high"]) - np.mean(rows_KxS, axis=0))
    mean = np.mean(rows_KxS, axis=0)
    return {"mean": _none_if_nan(mean), "low": _none_if_nan(mean - half),
            "high": _none_if_nan(mean + half), "min": _none_if_nan(np.min(rows_KxS, axis=0)),
            "max": _none_if_nan(np.max(rows_KxS, axis=0))}


def seed_summary(seeds: list[int], values: list[dict[str, list[float | None]]],
                 corrs: list[dict[str, dict[str, float]]], embeddings: list[dict[str, float]]
                 ) -> dict[str, Any]:
    """results.json "untrained_seeds" from the K re-initialisations of one architecture (one
    entry per seed of `seeds` in each list): per metric of METRIC_NAMES the per-seed values
    ("metrics": name → K lists over the states) and per state their mean, 95 % t-interval, min
    and max ("interval": name → {"mean", "low", "high", "min", "max"}); per correlation pair the
    per-seed ρ ("correlations": pair → {"spearman", "pearson": K values, "n": states}); per
    embedding-isotropy key the K values ("embeddings")."""
    rows = {name: np.asarray([[np.nan if v is None else v for v in run[name]] for run in values],
                             np.float64) for name in values[0]}
    return {
        "seeds": list(seeds), "n": len(seeds),
        "metrics": {name: [run[name] for run in values] for name in values[0]},
        "interval": {name: _interval(r) for name, r in rows.items()},
        "correlations": {pair: {"spearman": [c[pair]["spearman"] for c in corrs],
                                "pearson": [c[pair]["pearson"] for c in corrs],
                                "n": corrs[0][pair]["n"]} for pair in corrs[0]},
        "embeddings": {key: [e[key] for e in embeddings] for key in embeddings[0]},
    }


def seed_means(summary: Mapping[str, Any]) -> tuple[dict[str, list[float | None]],
                                                    dict[str, dict[str, Any]], dict[str, float]]:
    """(metrics, correlations, embeddings) of the "untrained" run from a `seed_summary`: the
    per-state means over the seeds; per pair the mean ρ with its range over the seeds
    ("spearman", "spearman_min", "spearman_max", the same for "pearson", "n", "seeds"; with ≥ 2
    seeds also "spearman_fisher_mean", "spearman_low", "spearman_high": tanh of the mean Fisher z
    and its 95 % t-interval over the seeds, metrics.correlation.mean_correlation_interval; the
    same for "pearson"; no p: the seeds' p-values are not one test); the mean embedding
    isotropy."""
    corr = {}
    for pair, c in summary["correlations"].items():
        corr[pair] = {"n": c["n"], "seeds": summary["n"]}
        for method in ("spearman", "pearson"):
            rhos = np.asarray(c[method], np.float64)
            corr[pair].update({method: float(np.mean(rhos)), f"{method}_min": float(np.min(rhos)),
                               f"{method}_max": float(np.max(rhos))})
            if rhos.size >= 2:  # the mean ρ's interval in Fisher z (bounded by ±1)
                z = mean_correlation_interval(rhos)
                corr[pair].update({f"{method}_fisher_mean": float(z["mean"]),
                                   f"{method}_low": float(z["low"]),
                                   f"{method}_high": float(z["high"])})
    emb = {key: float(np.mean(v)) for key, v in summary["embeddings"].items()}
    return ({name: i["mean"] for name, i in summary["interval"].items()}, corr, emb)
