"""The per-layer metrics of one hidden state, one name per quantity, for every study.

`LAYER_METRICS` names every quantity that a study reports per layer (per hidden state) with its
one-line meaning; studies, reports and docs take the names from here. `layer_metrics(x, mask,
names=...)` computes any subset of them for one (B, L, D) cloud of hidden states (jit- and
vmap-safe); the pretrained study (and the series study through it), the training-dynamics
analysis (and the normalisation grid through it) and the extreme-token study call it.

Quantities that look alike but are not the same keep different names:
  * `sampled_pair_cosine` (the papers' estimate from K random pairs) is not `average_cosine`
    (the exact mean over all distinct pairs);
  * `cross_sequence_cosine` and `within_sequence_cosine` split the pairs of `average_cosine` by
    sequence; they are not per-sequence averages;
  * the bias sweep's scalars (`metrics.cloud_metrics`, the same formulas fused into fewer passes)
    are named after the site they measure ("input_cosine" = the average_cosine of a block's
    input), and the extreme-token study's per-state numbers that pool several batches
    ("kurtosis" and "massive_top_ratio" there: over every batch's sequences) are reductions over
    batches of these per-cloud quantities.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from anisotropy_jax.metrics import geometry, norms
from anisotropy_jax.metrics.extreme import activation_kurtosis, massive_activations
from anisotropy_jax.metrics.intrinsic_dimension import layer_dimensions

Array = jax.Array

# name → meaning. "Tokens" are the measured tokens of the state (the mask), pooled over sequences.
LAYER_METRICS = {
    "average_cosine": "mean cosine over all distinct pairs of tokens "
                      "(metrics.average_cosine_similarity)",
    "centered_average_cosine": "average_cosine of the centred tokens h - mu, mu their mean "
                               "(metrics.centered_average_cosine)",
    "centering_removed_share": "(average_cosine - centered_average_cosine) / average_cosine, the "
                               "share of the anisotropy that centring removes; None below "
                               "ANISOTROPY_FLOOR (`centering_removed_share`, on the host)",
    "centered_average_cosine_without_massive": "average_cosine of h - mu', mu' the mean of the "
                                               "tokens that are not massive (max |h| >= 100x "
                                               "the state's median |h|, "
                                               "metrics.massive_tokens)",
    "centering_removed_share_without_massive": "centering_removed_share with mu' for mu",
    "centered_average_cosine_median": "average_cosine of the tokens minus their per-dimension "
                                      "median",
    "centering_removed_share_median": "centering_removed_share with the median for mu",
    "cross_sequence_cosine": "mean cosine over the pairs of tokens from different sequences "
                             "(metrics.cross_sequence_cosine_similarity)",
    "within_sequence_cosine": "mean cosine over the pairs of tokens of the same sequence "
                              "(metrics.within_sequence_cosine_similarity); absent with one "
                              "token per sequence",
    "sampled_pair_cosine": "mean cosine of K uniformly drawn pairs i != j: the papers' random "
                           "estimate of average_cosine, not the same number "
                           "(metrics.sampled_pair_cosine_similarity)",
    "drift_norm": "||mu||, the norm of the mean of the unnormalised tokens (metrics.drift_norm)",
    "relative_drift": "||mu|| / mean ||h|| (metrics.relative_drift)",
    "mean_norm": "mean ||h|| (metrics.mean_norm)",
    "isoscore": "IsoScore of the tokens (Rudman et al., metrics.isoscore)",
    "effective_rank": "effective rank of the raw token matrix (Roy & Vetterli, "
                      "metrics.effective_rank)",
    "effective_rank_centered": "effective rank of the centred token matrix",
    "rankme": "RankMe (Garrido et al. 2023): effective_rank of the raw token matrix with their "
              "eps = 1e-7 added to each normalised singular value (metrics.rankme)",
    "alpha_req": "alpha-ReQ (Agrawal et al. 2022): the power-law decay of the eigenvalues of the "
                 "tokens' covariance, minus the least-squares slope of log eigenvalue on log "
                 "rank over ranks 11-100 (metrics.alpha_req, metrics.alpha_req_ranks)",
    "top_pc_variance_ratio": "sigma_1^2 / sum sigma^2 of the centred token matrix "
                             "(metrics.top_pc_variance_ratio)",
    "massive_top_ratio": "largest |activation| over the median |activation| of its sequence "
                         "(Sun et al., metrics.massive_activations)",
    "kurtosis": "Pearson kurtosis of each sequence's activations, mean over sequences "
                "(Bondarenko et al., metrics.activation_kurtosis)",
    "twonn_dimension": "TwoNN intrinsic dimension of the tokens (Facco et al., "
                       "metrics.layer_dimensions)",
    "gride_dimension": "GRIDE intrinsic dimension of the tokens at neighbours (8, 16) "
                       "(Denti et al., metrics.layer_dimensions)",
}
# Below this average cosine there is no anisotropy for centring to remove: the share
# (average − centred) / average would divide by noise (an isotropic cloud of D dimensions has
# |average cosine| of order 1/D), so it is None there.
ANISOTROPY_FLOOR = 0.01
# The metrics of pooled tokens (every token counts alike, whatever its sequence).
_POOLED = ("average_cosine", "centered_average_cosine", "centered_average_cosine_without_massive",
           "centered_average_cosine_median", "drift_norm", "relative_drift",
           "mean_norm", "isoscore", "effective_rank", "effective_rank_centered", "rankme",
           "alpha_req", "top_pc_variance_ratio", "sampled_pair_cosine", "twonn_dimension", "gride_dimension")
# Those of them that can take a (B, L, D) cloud with its mask instead of the tokens.
_MASKED_POOLED = ("average_cosine", "centered_average_cosine",
                  "centered_average_cosine_without_massive", "centered_average_cosine_median",
                  "twonn_dimension", "gride_dimension")
# The shares of the anisotropy that a centring removes (`centering_removed_share`, on the host):
# share name → the centred cosine it is computed from.
REMOVED_SHARES = {"centering_removed_share": "centered_average_cosine",
                  "centering_removed_share_without_massive":
                      "centered_average_cosine_without_massive",
                  "centering_removed_share_median": "centered_average_cosine_median"}


def centering_removed_share(average: float, centred: float) -> float | None:
    """The share of the anisotropy that centring removes, (average − centred) / average: 1 when
    the centred cloud is isotropic (the anisotropy was one shared offset), 0 when centring leaves
    it unchanged, above 1 when the centred cloud is anti-aligned (its floor is −1/(N − 1)). None
    when average < ANISOTROPY_FLOOR (nothing to remove). Host floats."""
    return None if average < ANISOTROPY_FLOOR else (average - centred) / average


def _computations(x_NxD: Array, points_mask: Array | None, x_BxLxD: Array,
                  mask_BxL: Array | None, key: Array | None, num_pairs: int) -> dict:
    """name → a thunk computing it (the pooled tokens x_NxD with `points_mask`, the sequences
    x_BxLxD with `mask_BxL`)."""
    return {
        "average_cosine": lambda: geometry.average_cosine_similarity(x_NxD, points_mask),
        "centered_average_cosine": lambda: geometry.centered_average_cosine(x_NxD, points_mask),
        "centered_average_cosine_without_massive": lambda: geometry.centered_average_cosine(
            x_NxD, points_mask, centre="mean_without_massive"),
        "centered_average_cosine_median": lambda: geometry.centered_average_cosine(
            x_NxD, points_mask, centre="median"),
        "drift_norm": lambda: geometry.drift_norm(x_NxD),
        "relative_drift": lambda: geometry.relative_drift(x_NxD),
        "mean_norm": lambda: norms.mean_norm(x_NxD),
        "isoscore": lambda: geometry.isoscore(x_NxD),
        "effective_rank": lambda: geometry.effective_rank(x_NxD),
        "effective_rank_centered": lambda: geometry.effective_rank(x_NxD, center=True),
        "rankme": lambda: geometry.rankme(x_NxD),
        "alpha_req": lambda: geometry.alpha_req(x_NxD),
        "top_pc_variance_ratio": lambda: geometry.top_pc_variance_ratio(x_NxD),
        "sampled_pair_cosine": lambda: geometry.sampled_pair_cosine_similarity(
            x_NxD, key, num_pairs=num_pairs),
        "cross_sequence_cosine": lambda: geometry.cross_sequence_cosine_similarity(
            x_BxLxD, mask_BxL),
        "within_sequence_cosine": lambda: geometry.within_sequence_cosine_similarity(
            x_BxLxD, mask_BxL),
        "massive_top_ratio": lambda: massive_activations(x_BxLxD, mask_BxL, k=1)["top_ratio"][0],
        "kurtosis": lambda: jnp.mean(activation_kurtosis(x_BxLxD, mask_BxL)),
    }


def layer_metrics(x_BxLxD: Array, mask_BxL: Array | None = None, *,
                  names: tuple[str, ...] = tuple(LAYER_METRICS), tokens_NxD: Array | None = None,
                  key: Array | None = None, num_pairs: int = 10_000) -> dict[str, Array]:
    """The metrics `names` (of LAYER_METRICS, less the host-side REMOVED_SHARES) of one
    hidden state: B sequences of L tokens (B, L, D), `mask_BxL` the measured tokens (None: all).

    The pooled metrics take the measured tokens as one (N, D) cloud: `tokens_NxD` when given,
    else x reshaped to (B·L, D) without a mask; with a mask, average_cosine,
    centered_average_cosine and the intrinsic dimensions take x and the mask, and the others
    need `tokens_NxD` (the tokens cannot be gathered under jit). The sequence and
    activation metrics (cross/within-sequence cosine, massive_top_ratio, kurtosis) take x with
    its mask. within_sequence_cosine is left out when L < 2, cross_sequence_cosine raises when
    B < 2. sampled_pair_cosine needs `key` (its `num_pairs` pairs); an intrinsic dimension is NaN
    where undefined. Scalars in the dtype of x; jit- (names, num_pairs static) and vmap-safe.
    """
    unknown = [n for n in names if n not in LAYER_METRICS or n in REMOVED_SHARES]
    if unknown:
        raise ValueError(f"unknown layer metric(s) {unknown}; choose from {tuple(LAYER_METRICS)} "
                         f"({tuple(REMOVED_SHARES)}: `centering_removed_share`, on the host)")
    x_BxLxD = jnp.asarray(x_BxLxD)
    if x_BxLxD.ndim != 3:
        raise ValueError(f"expected (B, L, D) hidden states, got shape {x_BxLxD.shape}")
    b, l, d = x_BxLxD.shape
    # The pooled tokens: the given ones; every token; or x with its mask for the metrics that
    # take one.
    x_NxD, points_mask = ((tokens_NxD, None) if tokens_NxD is not None
                          else (x_BxLxD.reshape(b * l, d), None) if mask_BxL is None
                          else (x_BxLxD, mask_BxL))
    unmasked = [n for n in names if n in _POOLED and n not in _MASKED_POOLED]
    if points_mask is not None and unmasked:
        raise ValueError(f"{unmasked} of masked states need their tokens_NxD")
    compute = _computations(x_NxD, points_mask, x_BxLxD, mask_BxL, key, num_pairs)
    if "sampled_pair_cosine" in names and key is None:
        raise ValueError("sampled_pair_cosine needs a key")
    out = {}
    for name in names:
        if name in ("twonn_dimension", "gride_dimension"):
            if name not in out:
                out.update(layer_dimensions(x_NxD, points_mask))  # one neighbour pass
        elif name != "within_sequence_cosine" or l >= 2:
            out[name] = compute[name]()
    return {name: out[name] for name in names if name in out}
