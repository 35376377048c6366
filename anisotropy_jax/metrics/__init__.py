"""Anisotropy and attention metrics: pure functions of arrays, jit/vmap-safe, no model knowledge
(docs/SCIENCE.md, "Metrics").

Conventions:
  * Point clouds are (N, D), or (..., D) flattened to (N, D) over the leading axes.
  * Sequence-aware cosines take (B, L, D) and an optional (B, L) mask of valid tokens.
  * Attention statistics take float32 logits (..., Lq, Lk) and an optional boolean mask of
    visible keys broadcastable to them; they return one value per query, (..., Lq)
    (`metrics.attention`), except the categorical-attention statistics (agreement, row cosine,
    query-key information), which return one value per attention matrix, (...,).
  * Queries/keys for the geometry are (B, L, H, Dh).
  * Every norm goes through `vector_norms` (overflow-safe, norms up to ~1e38).
Everything is computed in the input dtype (float32 by default; the tests run float64 through the
same code). Shape errors (too few vectors for a pair) are raised at trace time, before any
compilation of a larger program. Host-side: `drift_anisotropy_correlation` (scipy) and
`spectrum_metrics` (RankMe and α-ReQ of a state in numpy float64, `metrics.host_spectrum`: no
eigendecomposition inside a compiled program).

Extreme tokens and dimensions (docs/SCIENCE.md, "Extreme tokens, sinks and intrinsic dimension"):
massive activations, outliers, rogue dimensions and the top PC without the first token in
`metrics.extreme`; attention sinks, no-op heads and the sink's shared logit term in
`metrics.sinks`. Intrinsic dimension (TwoNN, GRIDE): `metrics.intrinsic_dimension`. Per-head
statistics of the weights a model used, whatever its normalisation (renormalised, with the row
mass; queries of zero mass left out and counted): `metrics.used_attention`.

Per-layer metrics of every study: `layer_metrics` computes any of LAYER_METRICS (one name and
one-line meaning per quantity, `metrics.layer`) for one hidden state; `cloud_metrics` is the
sweep's fused subset under the same names.
"""
from anisotropy_jax.metrics.attention import (CATEGORICAL_STATISTICS, STATISTICS,
                                              CategoricalSums, attention_entropy, attention_max,
                                              attention_query_agreement,
                                              attention_query_key_information,
                                              attention_row_cosine, attention_sink_mass,
                                              attention_statistics,
                                              categorical_attention_statistics,
                                              categorical_from_sums, categorical_key_sums,
                                              mean_over_queries,
                                              normalized_attention_entropy, normalized_entropy,
                                              query_key_geometry,
                                              query_key_geometry_from_means,
                                              visible_key_counts)
from anisotropy_jax.metrics.cloud import cloud_metrics
from anisotropy_jax.metrics.correlation import drift_anisotropy_correlation
from anisotropy_jax.metrics.extreme import (activation_inf_norm, activation_kurtosis,
                                            cosine_contributions, massive_activations,
                                            standardized_average_cosine, top_contribution_share,
                                            top_pc_share)
from anisotropy_jax.metrics.geometry import (ALPHA_REQ_RANKS, RANKME_EPS, alpha_req, alpha_req_ranks,
                                             average_cosine_similarity, centered_average_cosine,
                                             cross_sequence_cosine_similarity, drift_norm,
                                             effective_rank, isoscore, isoscore_star,
                                             massive_tokens, partition_isotropy, rankme,
                                             relative_drift,
                                             sampled_pair_cosine_similarity,
                                             top_pc_variance_ratio,
                                             within_sequence_cosine_similarity)
from anisotropy_jax.metrics.host_spectrum import (SPECTRUM_METRICS, alpha_req_from_scatter,
                                              rankme_from_gram, second_moments, spectrum_metrics)
from anisotropy_jax.metrics.layer import (ANISOTROPY_FLOOR, LAYER_METRICS, REMOVED_SHARES,
                                          centering_removed_share, layer_metrics)
from anisotropy_jax.metrics.intrinsic_dimension import (IDEstimate, distinct_points,
                                                        gride_dimension,
                                                        gride_from_ratios, gride_scaling,
                                                        layer_dimensions, neighbor_distances,
                                                        twonn_dimension, twonn_from_ratios)
from anisotropy_jax.metrics.norms import mean_norm, unit_vectors, vector_norms
from anisotropy_jax.metrics.used_attention import USED_WEIGHT_STATISTICS, used_weight_statistics
from anisotropy_jax.metrics.sinks import (SINK_EPSILON, attention_output_norms,
                                          attention_sink_rate, key_attention_scores,
                                          key_attention_scores_from_sums, max_key_attention,
                                          noop_head_score, sink_logit_split, sink_rate,
                                          sink_scores_from_probabilities)

__all__ = [
    "CATEGORICAL_STATISTICS", "STATISTICS", "CategoricalSums", "attention_entropy", "attention_max",
    "attention_query_agreement", "attention_query_key_information", "attention_row_cosine",
    "attention_sink_mass", "attention_statistics", "average_cosine_similarity",
    "categorical_attention_statistics", "categorical_from_sums", "categorical_key_sums",
    "centered_average_cosine", "massive_tokens",
    "cloud_metrics", "cross_sequence_cosine_similarity",
    "drift_anisotropy_correlation", "drift_norm", "effective_rank", "isoscore", "isoscore_star",
    "mean_norm", "mean_over_queries", "normalized_attention_entropy", "normalized_entropy",
    "partition_isotropy", "query_key_geometry",
    "query_key_geometry_from_means", "relative_drift", "sampled_pair_cosine_similarity",
    "top_pc_variance_ratio", "unit_vectors", "vector_norms", "visible_key_counts",
    "USED_WEIGHT_STATISTICS", "used_weight_statistics",
    "within_sequence_cosine_similarity",
    # the spectrum of a cloud (metrics.geometry)
    "ALPHA_REQ_RANKS", "RANKME_EPS", "alpha_req", "alpha_req_ranks", "rankme",
    # the same two on the host, in float64 (metrics.host_spectrum)
    "SPECTRUM_METRICS", "alpha_req_from_scatter", "rankme_from_gram", "second_moments",
    "spectrum_metrics",
    # the per-layer metrics of every study, one name per quantity (metrics.layer)
    "ANISOTROPY_FLOOR", "LAYER_METRICS", "REMOVED_SHARES", "centering_removed_share",
    "layer_metrics",
    # extreme activations and dimensions (metrics.extreme)
    "activation_inf_norm", "activation_kurtosis", "cosine_contributions", "massive_activations",
    "standardized_average_cosine", "top_contribution_share", "top_pc_share",
    # attention sinks and no-op heads (metrics.sinks)
    "SINK_EPSILON", "attention_output_norms", "attention_sink_rate", "key_attention_scores",
    "key_attention_scores_from_sums", "max_key_attention", "noop_head_score", "sink_logit_split",
    "sink_rate", "sink_scores_from_probabilities",
    # intrinsic dimension (metrics.intrinsic_dimension)
    "IDEstimate", "distinct_points", "gride_dimension", "gride_from_ratios", "gride_scaling", "layer_dimensions",
    "neighbor_distances", "twonn_dimension", "twonn_from_ratios",
]
