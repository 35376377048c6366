"""Hidden states of measured tokens and the per-state metrics of the pretrained study
(docs/PRETRAINED.md, "Metrics, per hidden state"), shared by text, image and audio inputs.

A state is a cloud of N tokens (N, D), each tagged with the input it comes from (a sentence, an
image, an utterance; `sentence_index`, sorted). `cloud_metrics` measures one cloud: every metric
of METRIC_NAMES from `anisotropy_jax.metrics`; the sequence metrics use the (input, position)
layout with a mask. `layer_metrics` does it for every state of a `HiddenStates`.
"""
from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np

from anisotropy_jax import metrics

# Per-layer metrics (all computed on the tokens selected by the mask).
METRIC_NAMES = (
    "average_cosine",        # all distinct pairs of tokens (metrics.average_cosine_similarity)
    "cross_sequence_cosine",  # pairs from different sentences
    "within_sequence_cosine",  # pairs from the same sentence (None: one token per input)
    "sampled_pair_cosine",   # the papers' estimate: K uniformly drawn pairs i ≠ j
    "drift_norm",            # ‖mean of the unnormalised hidden states‖
    "relative_drift",        # ‖mean‖ / mean ‖h‖
    "mean_norm",             # mean ‖h‖
    "isoscore",              # IsoScore (Rudman et al.)
    "effective_rank",        # Roy & Vetterli, of the raw (uncentred) token matrix
    "effective_rank_centered",  # of the centred matrix
    "top_pc_variance_ratio",  # σ₁²/Σσ² of the centred matrix
)
# Anisotropy measures correlated with drift_norm and relative_drift across layers.
CORRELATED_COSINES = ("average_cosine", "cross_sequence_cosine", "sampled_pair_cosine")


@dataclasses.dataclass(frozen=True)
class HiddenStates:
    """Hidden states of every non-padding token, ordered by (sentence, position).

    layers: (num_layers + 1, N, D) float32 (0 = embedding output); the other fields are (N,).
    """

    layers: np.ndarray
    sentence_index: np.ndarray
    position: np.ndarray
    token_ids: np.ndarray
    special: np.ndarray

    @property
    def num_sentences(self) -> int:
        return int(self.sentence_index.max()) + 1 if self.sentence_index.size else 0


@jax.jit
def _cloud_metrics(x_NxD: jax.Array) -> dict[str, jax.Array]:
    return {
        "average_cosine": metrics.average_cosine_similarity(x_NxD),
        "drift_norm": metrics.drift_norm(x_NxD),
        "relative_drift": metrics.relative_drift(x_NxD),
        "mean_norm": metrics.mean_norm(x_NxD),
        "isoscore": metrics.isoscore(x_NxD),
        "effective_rank": metrics.effective_rank(x_NxD),
        "effective_rank_centered": metrics.effective_rank(x_NxD, center=True),
        "top_pc_variance_ratio": metrics.top_pc_variance_ratio(x_NxD),
    }


@jax.jit
def _cross_sequence(x_SxLxD: jax.Array, mask_SxL: jax.Array) -> jax.Array:
    return metrics.cross_sequence_cosine_similarity(x_SxLxD, mask_SxL)


@jax.jit
def _within_sequence(x_SxLxD: jax.Array, mask_SxL: jax.Array) -> jax.Array:
    return metrics.within_sequence_cosine_similarity(x_SxLxD, mask_SxL)


_sampled_pairs = jax.jit(metrics.sampled_pair_cosine_similarity, static_argnames="num_pairs")


def sequence_layout(sentence_N: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(slot (N,), position within its input (N,), mask (S, max_len)) of tokens tagged by their
    input (`sentence_N` sorted); ValueError with fewer than 2 inputs."""
    ids, slot = np.unique(sentence_N, return_inverse=True)
    if len(ids) < 2:
        raise ValueError("cross-sentence cosine needs at least 2 sentences with measured tokens")
    starts = np.searchsorted(sentence_N, ids)
    position = np.arange(len(sentence_N)) - starts[slot]
    mask_SxL = np.zeros((len(ids), int(position.max()) + 1), bool)
    mask_SxL[slot, position] = True
    return slot, position, mask_SxL


def cloud_metrics(x_NxD: np.ndarray, sentence_N: np.ndarray, key: jax.Array,
                  num_pairs: int = 10_000) -> dict[str, float | None]:
    """Every metric of METRIC_NAMES for one state. within_sequence_cosine is None when every
    input has a single token (pooled features). FloatingPointError naming a non-finite metric."""
    if len(x_NxD) < 2:
        raise ValueError("fewer than 2 tokens to measure")
    slot, position, mask_SxL = sequence_layout(sentence_N)
    x_SxLxD = np.zeros(mask_SxL.shape + (x_NxD.shape[-1],), np.float32)
    x_SxLxD[slot, position] = x_NxD
    values = dict(_cloud_metrics(x_NxD))
    values["cross_sequence_cosine"] = _cross_sequence(x_SxLxD, mask_SxL)
    values["within_sequence_cosine"] = (_within_sequence(x_SxLxD, mask_SxL)
                                        if mask_SxL.shape[1] >= 2 else None)
    values["sampled_pair_cosine"] = _sampled_pairs(x_NxD, key, num_pairs=num_pairs)
    values = jax.device_get(values)
    out: dict[str, float | None] = {}
    for name in METRIC_NAMES:
        out[name] = None if values[name] is None else float(values[name])
        if out[name] is not None and not math.isfinite(out[name]):
            raise FloatingPointError(f"metric {name} is not finite ({out[name]})")
    return out


def layer_metrics(hidden: HiddenStates, key: jax.Array, num_pairs: int = 10_000,
                  include_special_tokens: bool = True) -> dict[str, list[float]]:
    """Per hidden state (0 = embeddings, i = layer i): every metric of METRIC_NAMES.

    The token set is every non-padding token (without [CLS]/[SEP]/... when
    `include_special_tokens` is False). Sequence metrics use the (sentence, position) layout
    with a mask; the sampled-pair estimate uses the same key for every layer (same pairs).
    Raises FloatingPointError naming a metric that is not finite.
    """
    keep = np.ones(hidden.special.shape, bool) if include_special_tokens else ~hidden.special
    if keep.sum() < 2:
        raise ValueError("fewer than 2 tokens to measure")
    sentence_N = hidden.sentence_index[keep]
    out: dict[str, list[float]] = {name: [] for name in METRIC_NAMES}
    for states in hidden.layers:
        for name, value in cloud_metrics(states[keep], sentence_N, key, num_pairs).items():
            out[name].append(value)
    return out


def correlations(layer_values: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Spearman and Pearson correlation (with p-values) of drift_norm and relative_drift with
    each cosine of CORRELATED_COSINES across hidden states (metrics.drift_anisotropy_correlation:
    exact p = 2/n! at |ρ| = 1). The layers of one model are not independent units: the p-values
    describe rank agreement along one network. Keys like "drift_norm_vs_average_cosine"."""
    out = {}
    for drift in ("drift_norm", "relative_drift"):
        for cosine in CORRELATED_COSINES:
            out[f"{drift}_vs_{cosine}"] = metrics.drift_anisotropy_correlation(
                layer_values[drift], layer_values[cosine])
    return out
