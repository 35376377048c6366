"""Per-checkpoint analysis of a training run: query/key geometry, attention sharpness and
anisotropy along training (docs/SCIENCE.md, "The training-dynamics experiment").

For every saved checkpoint, on one fixed validation batch of clean text (no MLM masking):
  per layer and head (arrays (S, layers, H), S checkpoints):
    mean_query_norm ‖q̄‖, mean_key_norm ‖k̄‖, mean_query_key_cosine cos(q̄, k̄),
    mean_query_key_dot_softmax_invariant q̄·k̄/√Dh (one constant added to every logit of a query:
    the softmax cancels it), key_term_std, key_term_share, logit_std (the key-dependent term
    q̄·(k_j − k̄)/√Dh, which the softmax does see: `metrics.logit_terms`), query_norm, key_norm
    (mean ‖q_i‖, ‖k_j‖),
    attention_entropy (nats), attention_entropy_normalized (÷ ln of the number of visible keys),
    attention_max, first_position_mass, averaged over the batch and over the queries that see
    more than one key (a causal head's first query has no choice; it is excluded everywhere,
    `metrics.mean_over_queries`); attention_query_agreement, attention_row_cosine,
    attention_query_key_information (the categorical-attention statistics of each sequence's
    attention matrix, `metrics.categorical_attention_statistics`, averaged over the batch) —
    all of the attention the model used: softmax from the logits (`metrics.attention_statistics`),
    any other `model.attention_normalization` from its weights (the `attn_weights` probe)
    renormalised over the visible keys (`metrics.used_attention`: queries whose weights sum to
    zero are left out); attention_mass, the sum of the used weights over the visible keys (1 for
    softmax), and attention_zero_mass_share, the share of queries left out for zero mass (0 for
    softmax);
    sink_score α_0 and sink_rate (Gu et al.: the share of sequences in which α_0 > ε = 0.3,
    `metrics.sinks`), from the raw weights the model's own normalisation made (the
    `attn_weights` probe), key 0 = the first token (BOS for bigram_backcopy);
    key_term_var, query_specific_var, key_query_covariance, logit_var (the decomposition
    logit_var = key_term_var + query_specific_var + 2·key_query_covariance,
    `metrics.logit_terms.logit_variance_decomposition`);
    delta_<stat>_<removal> for stat in entropy (normalised), agreement (query agreement), max
    (max probability) and removal in key_term, control, shared_control, matched_control: the
    change of the statistic when attention is recomputed from the logits minus m_j, minus m
    permuted over each query's visible keys, minus m permuted over the sequence's keys (each
    permutation control averaged over 4 permutations drawn from a fixed PRNG key per layer, the
    same at every checkpoint, so a rerun gives the same numbers), minus α_i r_ij, the
    query-specific term scaled per query to remove the same logit variance as m
    (`metrics.intervention`, `metrics.matched_control`; a counterfactual of the softmax, whatever
    the model's normalisation);
    entropy_deficit_share_key_term, entropy_deficit_share_matched_control: the share of the
    head's entropy deficit 1 − H/ln L that removing m (the matched control) recovers, NaN where
    the deficit is below 0.01 (`metrics.matched_control.entropy_deficit_share`: the per-head
    arrays Godey 4b is decided on); matched_control_unmatched_fraction (the share of queries
    whose variance the control could not match) and matched_control_shortfall (the variance it
    failed to remove, ÷ the logit variance, averaged over queries);
  per hidden state (arrays (S, layers + 1); index 0 = the embedding output, i = output of block
    i − 1; for clm the last one is the input of the final LayerNorm), LAYER_METRICS from
    `metrics.layer_metrics` (names and meanings: `metrics.LAYER_METRICS`):
    average_cosine (all pairs), cross_sequence_cosine, within_sequence_cosine, drift_norm,
    relative_drift, isoscore, centered_average_cosine, massive_top_ratio (Sun et al.: the
    largest |activation| of the batch over the median |activation| of its sequence), kurtosis
    (Pearson's, of each sequence's L·D activations, averaged over the batch), twonn_dimension and
    gride_dimension (the intrinsic dimension of the B·L tokens pooled: TwoNN and GRIDE at
    (n1, n2) = (8, 16), `metrics.layer_dimensions`; exact duplicates drop out, NaN if undefined;
    neighbours ranked in blocks of 512 rows, so memory is O(512·B·L) per state);
  the last block's output (the last hidden state; arrays (S,)): rankme and alpha_req of its B·L
    tokens (`metrics.spectrum_metrics`: the state comes to the host, its spectrum is numpy float64);
  embedding matrices (arrays (S,)): partition isotropy of the input embedding and of the output
    projection (the same matrix when tied), raw and centred (input_raw, input_centered,
    output_raw, output_centered), over the rows of the byte ids that occur in the corpus (plus
    MASK for mlm; the other rows never get a gradient), and over all rows (input_all_rows_raw …);
  clm only: the final LayerNorm's input vs output (average/cross-sequence cosine, IsoScore, drift).
Per checkpoint (`correlation`): the Spearman correlation across the heads of that checkpoint of
the normalised entropy with the key-dependent term (and with the softmax-invariant |q̄·k̄|/√Dh),
and the partial rank correlation within layers of entropy with the key term (and with the
query-specific term) given the logit spread (`trends.entropy_correlations_across_heads`);
along the checkpoints (`trends`): the expected trends of docs/SCIENCE.md with their numbers.

`run` reads the run's config.json, metrics.jsonl, eval.jsonl and checkpoints; it writes nothing.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
from typing import Any, Callable, Iterable

import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax import checkpointing, data as data_lib, metrics
from anisotropy_jax.config import AnalysisConfig, TrainConfig, TransformerConfig
from anisotropy_jax.metrics.intervention import (DEFICIT_SHARES, MATCH_QUALITY, REMOVALS,
                                                STATISTICS, key_term_intervention)
from anisotropy_jax.metrics.logit_terms import (DECOMPOSITION, logit_variance_decomposition,
                                                mean_query_key_terms)
from anisotropy_jax.metrics.sinks import key_attention_scores, sink_rate
from anisotropy_jax.metrics.used_attention import USED_WEIGHT_STATISTICS, used_weight_statistics
from anisotropy_jax.models.attention import attention_mask
from anisotropy_jax.models.transformer import Transformer
from anisotropy_jax.protocol import SILENT, Progress
from anisotropy_jax.studies import training
from anisotropy_jax.studies.train.trends import (entropy_correlations_across_heads,
                                                    expected_trends, final_loss_check)

HEAD_METRICS = ("mean_query_norm", "mean_key_norm", "mean_query_key_cosine",
                "mean_query_key_dot_softmax_invariant", "key_term_std", "key_term_share",
                "logit_std", "query_norm", "key_norm", "attention_entropy",
                "attention_entropy_normalized", "attention_max", "first_position_mass",
                "attention_mass", "attention_zero_mass_share",
                "attention_query_agreement", "attention_row_cosine",
                "attention_query_key_information", *DECOMPOSITION,
                *(f"delta_{stat}_{removal}" for removal in REMOVALS for stat in STATISTICS),
                *DEFICIT_SHARES, *MATCH_QUALITY, "sink_score", "sink_rate")
# The permutations of the intervention's controls: layer i uses split(key(seed), layers)[i] at
# every checkpoint (common random numbers along training: the steps differ by the weights only).
PERMUTATION_SEED = 0
# The per-layer metrics (names and meanings: `metrics.LAYER_METRICS`).
LAYER_METRICS = ("average_cosine", "cross_sequence_cosine", "within_sequence_cosine",
                 "drift_norm", "relative_drift", "isoscore", "centered_average_cosine",
                 "massive_top_ratio", "kurtosis", "twonn_dimension", "gride_dimension")


@dataclasses.dataclass(frozen=True)
class DynamicsResult:
    """The analysis of every readable checkpoint of one training run (numpy arrays).

    Attributes:
      config: the run's TrainConfig (from its config.json).
      analysis: the analysis settings used.
      steps: (S,) the analysed checkpoint steps, ascending.
      heads: {name in HEAD_METRICS: (S, layers, H)}.
      layers: {name in LAYER_METRICS: (S, layers + 1)}.
      embeddings: {"input_raw", …, "output_all_rows_centered": (S,)}.
      last_block: {"rankme", "alpha_req": (S,)} of the last hidden state ({} when not given).
      final_norm: clm only, {"before_<name>", "after_<name>": (S,)}; else None.
      correlation: `trends.entropy_correlations_across_heads` (S ≥ 3), else None.
      trends: `trends.expected_trends` (S ≥ 3), else None.
      loss_steps, loss: (T,) the training loss per step (metrics.jsonl).
      val_steps, val_loss: (E,) the validation loss at the checkpoints (eval.jsonl).
      learning: `trends.final_loss_check` of the last validation loss (did the model learn?).
    """

    config: TrainConfig
    analysis: AnalysisConfig
    steps: np.ndarray
    heads: dict[str, np.ndarray]
    layers: dict[str, np.ndarray]
    embeddings: dict[str, np.ndarray]
    final_norm: dict[str, np.ndarray] | None
    correlation: dict[str, Any] | None
    trends: dict[str, Any] | None
    loss_steps: np.ndarray
    loss: np.ndarray
    val_steps: np.ndarray
    val_loss: np.ndarray
    last_block: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    @property
    def objective(self) -> str:
        return self.config.objective

    @property
    def learning(self) -> dict[str, Any]:
        return final_loss_check(self.objective, self.val_loss)


def _hidden_metrics(h_BxLxD: jax.Array) -> dict[str, jax.Array]:
    """LAYER_METRICS of one hidden state (B, L, D), every token measured (`metrics.layer_metrics`);
    TwoNN and GRIDE (8, 16) of the B·L tokens."""
    return metrics.layer_metrics(h_BxLxD, names=LAYER_METRICS)


def sink_metrics(weights_BxHxLxL: jax.Array, causal: bool) -> dict[str, jax.Array]:
    """{"sink_score": mean α_0 over the batch, "sink_rate": share of sequences with α_0 > 0.3},
    each (H,), of one layer's attention weights (`metrics.sinks`, Gu et al.)."""
    mask = attention_mask(weights_BxHxLxL.shape[-1], causal, None)
    alpha0_BxH = key_attention_scores(weights_BxHxLxL, mask)[..., 0]
    return {"sink_score": jnp.mean(alpha0_BxH, axis=0), "sink_rate": sink_rate(alpha0_BxH, axis=0)}


def head_metrics(queries_BxLxHxDh: jax.Array, keys_BxLxHxDh: jax.Array,
                 logits_BxHxLxL: jax.Array, causal: bool, rng: jax.Array | None = None,
                 weights_BxHxLxL: jax.Array | None = None) -> dict[str, jax.Array]:
    """Per-head metrics (each (H,)) of one attention layer; see the module docstring. `rng`
    draws the permutations of the intervention's controls (None: key(PERMUTATION_SEED);
    `make_analysis_fn` passes one key per layer). `weights_BxHxLxL`: the weights of a
    normalisation other than softmax, whose attention statistics are then taken from them
    (`metrics.used_attention`); None: the softmax of the logits."""
    rng = jax.random.key(PERMUTATION_SEED) if rng is None else rng
    seq_len = logits_BxHxLxL.shape[-1]
    mask = attention_mask(seq_len, causal, None)  # (1, 1, L, L) or None
    out = dict(metrics.query_key_geometry(queries_BxLxHxDh, keys_BxLxHxDh))
    # q̄·k̄ adds one constant to every logit of a query: the softmax cancels it.
    out["mean_query_key_dot_softmax_invariant"] = out.pop("mean_query_key_dot")
    out.update(mean_query_key_terms(queries_BxLxHxDh, keys_BxLxHxDh, logits_BxHxLxL, mask))
    out.update(logit_variance_decomposition(queries_BxLxHxDh, keys_BxLxHxDh, logits_BxHxLxL,
                                            mask))
    removal = key_term_intervention(queries_BxLxHxDh, keys_BxLxHxDh, logits_BxHxLxL, mask,
                                    rng=rng)
    out.update({k: v for k, v in removal.items() if k in HEAD_METRICS})
    if weights_BxHxLxL is None:
        out.update(_softmax_statistics(logits_BxHxLxL, mask))
    else:
        used = used_weight_statistics(weights_BxHxLxL, mask)
        out.update({f"attention_{name}": used[name] for name in USED_WEIGHT_STATISTICS
                    if name != "first_key"}, first_position_mass=used["first_key"])
    return out


def _softmax_statistics(logits_BxHxLxL: jax.Array, mask: jax.Array | None
                        ) -> dict[str, jax.Array]:
    """The attention statistics of the softmax of the logits, each (H,) (module docstring)."""
    seq_len = logits_BxHxLxL.shape[-1]
    counts_L = metrics.visible_key_counts((seq_len, seq_len), None if mask is None else mask[0, 0])
    stats = metrics.attention_statistics(logits_BxHxLxL, mask)  # each (B, H, L)
    normalized_BxHxL = metrics.normalized_entropy(stats["entropy"], counts_L)
    heads = logits_BxHxLxL.shape[1]
    out = {"attention_entropy": metrics.mean_over_queries(stats["entropy"], counts_L),
           "attention_entropy_normalized": metrics.mean_over_queries(normalized_BxHxL, counts_L),
           "attention_max": metrics.mean_over_queries(stats["max"], counts_L),
           "first_position_mass": metrics.mean_over_queries(stats["sink"], counts_L),
           "attention_mass": jnp.ones(heads, jnp.float32),  # softmax rows sum to one
           "attention_zero_mass_share": jnp.zeros(heads, jnp.float32)}
    categorical = metrics.categorical_attention_statistics(logits_BxHxLxL, mask,
                                                           entropy=stats["entropy"])  # (B, H)
    for name, value in categorical.items():
        out[f"attention_{name}"] = jnp.mean(value, axis=0)
    return out


def _isotropy_variants(w_VxD: jax.Array, w_out_VxD: jax.Array) -> dict[str, jax.Array]:
    """Partition isotropy of the input and output matrices, raw and centred (one vmapped call,
    so the eigendecomposition is compiled once)."""
    def centred(w):
        return w - jnp.mean(w, axis=0, keepdims=True)

    stack_4xVxD = jnp.stack([w_VxD, centred(w_VxD), w_out_VxD, centred(w_out_VxD)])
    values = jax.vmap(metrics.partition_isotropy)(stack_4xVxD)
    return dict(zip(("input_{}raw", "input_{}centered", "output_{}raw", "output_{}centered"),
                    values))


def _embedding_metrics(config: TransformerConfig, params: Any, rows: jax.Array
                       ) -> dict[str, jax.Array]:
    """Isotropy of the used rows ("input_raw", …) and of all rows ("input_all_rows_raw", …)."""
    w_in = params["token_embedding"]["embedding"]
    w_out = w_in if config.tie_embeddings else params["output"]["kernel"].T
    return _embedding_isotropy(w_in, w_out, rows)


@jax.jit
def _embedding_isotropy(w_in_VxD: jax.Array, w_out_VxD: jax.Array, rows: jax.Array
                        ) -> dict[str, jax.Array]:
    """`_embedding_metrics` of the input and output matrices: one program for every model of
    these shapes (the runs of a grid that differ in their attention only)."""
    emb = {k.format(""): v for k, v in _isotropy_variants(w_in_VxD[rows], w_out_VxD[rows]).items()}
    emb.update({k.format("all_rows_"): v
                for k, v in _isotropy_variants(w_in_VxD, w_out_VxD).items()})
    return emb


@functools.partial(jax.jit, static_argnames=("causal", "softmax", "permutation_seed"))
def _probe_metrics(probes: dict[str, jax.Array], *, causal: bool, softmax: bool,
                   permutation_seed: int) -> dict[str, Any]:
    """{"heads", "layers"[, "final_norm"]} from the stacked probes of one checkpoint: queries,
    keys, attn_logits, attn_weights (layers, B, …), states (layers + 1, B, L, D) and, with a
    final norm, final (2, B, L, D). A function of the arrays alone, so that models that differ
    only in their attention normalisation (a grid's cells) share the compiled program: one for
    softmax (statistics from the logits), one for every other normalisation (from the weights).
    """
    rngs = jax.random.split(jax.random.key(permutation_seed), probes["queries"].shape[0])
    used = None if softmax else probes["attn_weights"]
    heads = jax.vmap(lambda q, k, logits, rng, w: head_metrics(q, k, logits, causal, rng, w))(
        probes["queries"], probes["keys"], probes["attn_logits"], rngs, used)
    heads.update(jax.vmap(lambda w: sink_metrics(w, causal))(probes["attn_weights"]))
    out = {"heads": {name: heads[name] for name in HEAD_METRICS},
           "layers": jax.vmap(_hidden_metrics)(probes["states"]), "last": probes["states"][-1]}
    if "final" in probes:
        both = jax.vmap(_hidden_metrics)(probes["final"])
        out["final_norm"] = {**{f"before_{k}": v[0] for k, v in both.items()},
                             **{f"after_{k}": v[1] for k, v in both.items()}}
    return out


def make_analysis_fn(config: TransformerConfig, used_ids: np.ndarray,
                     permutation_seed: int = PERMUTATION_SEED) -> Callable:
    """fn(variables, tokens_BxL) → nested dict of metric arrays for one checkpoint: the model's
    probes (one jitted forward pass), then the metrics of the probes and of the embeddings (two
    jitted programs shared by every model of the same shapes, `_probe_metrics`).

    Per-layer metrics are vmapped over the stacked layers, so the compiled program does not grow
    with depth. Layer i's intervention controls use split(key(permutation_seed), layers)[i].
    """
    model = Transformer(config, with_head=False)
    rows = jnp.asarray(used_ids)

    @jax.jit
    def stacked_probes(variables, tokens_BxL):
        _, probes = model.apply(variables, tokens_BxL)
        blocks = probes["blocks"]
        out = {name: jnp.stack([p[name] for p in blocks])
               for name in ("queries", "keys", "attn_logits", "attn_weights")}
        out["states"] = jnp.stack([probes["embeddings"]] + [p["resid_post"] for p in blocks])
        if config.final_norm:
            out["final"] = jnp.stack([probes["final_norm_in"], probes["final_hidden"]])
        return out

    def analyse(variables, tokens_BxL):
        out = _probe_metrics(stacked_probes(variables, tokens_BxL), causal=config.block.causal,
                             softmax=config.block.attention_normalization == "softmax",
                             permutation_seed=permutation_seed)
        out["embeddings"] = _embedding_metrics(config, variables["params"], rows)
        out["last_block"] = metrics.spectrum_metrics(out.pop("last"))  # on the host
        return out

    return analyse


@functools.lru_cache(maxsize=4)
def _cached_analysis_fn(config: TransformerConfig, used_ids: tuple[int, ...]) -> Callable:
    """`make_analysis_fn`, compiled once for the runs that share a model (the seeds of a
    program: the seed is not part of the TransformerConfig)."""
    return make_analysis_fn(config, np.asarray(used_ids, np.int32))


def analysis_tokens(stream: data_lib.BatchIterator, batch_size: int, seed: int) -> np.ndarray:
    """The fixed validation batch of clean text the analysis runs on (B, L)."""
    batch = stream.validation_batch(batch_size, seed)
    # mlm: the unmasked bytes (targets); clm: the inputs.
    return batch["targets"] if stream.config.objective == "mlm" else batch["inputs"]


def _stack(records: list[dict]) -> dict:
    if isinstance(records[0], dict):
        return {k: _stack([r[k] for r in records]) for k in records[0]}
    return np.stack([np.asarray(r, np.float64) for r in records])


def load_run_config(workdir: str | os.PathLike) -> TrainConfig:
    """The TrainConfig saved in a training run's config.json (FileNotFoundError naming --workdir
    when there is none)."""
    return training.read_train_config(workdir)


def _analyse_checkpoints(workdir: pathlib.Path, config: TrainConfig, analysis: AnalysisConfig,
                         steps: Iterable[int] | None, progress: Progress
                         ) -> tuple[list[int], list[dict]]:
    """(steps, per-checkpoint metric trees) of every readable checkpoint among `steps`."""
    stream = data_lib.BatchIterator(config.data)
    tokens = analysis_tokens(stream, analysis.batch_size, analysis.seed)
    analyse = _cached_analysis_fn(config.transformer_config(),
                                  tuple(int(i) for i in stream.used_token_ids()))
    # One device is plenty for one batch, and a replicated multi-device program gains nothing
    # (with forced host devices it was seen to stall in the eigendecompositions).
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    abstract = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=device),
                            training.abstract_state(config)[0])
    records, done = [], []
    with checkpointing.manager(workdir / "checkpoints", read_only=True) as mngr:
        wanted = checkpointing.saved_steps(mngr) if steps is None else list(steps)
        if not wanted:
            raise FileNotFoundError(f"--workdir: no checkpoints in {workdir / 'checkpoints'}")
        for i, (step, state) in enumerate(checkpointing.iterate_readable(mngr, abstract, wanted)):
            records.append(jax.device_get(analyse(state["params"], tokens)))
            done.append(step)
            progress.tick(f"analysed checkpoint {step} ({i + 1}/{len(wanted)})")
    if not records:
        raise FileNotFoundError(f"--workdir: no readable checkpoint in {workdir}")
    return done, records


def run(workdir: str | os.PathLike, analysis: AnalysisConfig = AnalysisConfig(), *,
        steps: Iterable[int] | None = None, progress: Progress = SILENT) -> DynamicsResult:
    """Analyses every readable checkpoint (or those of `steps`) of the run in `workdir`.

    Reads config.json, the checkpoints, metrics.jsonl and eval.jsonl; writes nothing. The
    correlation and the trends need ≥ 3 checkpoints (None otherwise); the trends are "not
    testable" where the final validation loss says the model did not learn (`final_loss_check`).
    """
    workdir = pathlib.Path(workdir)
    config = load_run_config(workdir)
    done, records = _analyse_checkpoints(workdir, config, analysis, steps, progress)
    stacked = _stack(records)
    steps_S = np.asarray(done)
    losses, evals = training.read_metrics(workdir), training.read_evals(workdir)
    correlation = trends = None
    if len(done) >= 3:
        correlation = entropy_correlations_across_heads(stacked["heads"])
        trends = expected_trends(steps_S, stacked["heads"], stacked["layers"], correlation,
                                 config.objective, final_loss_check(
                                     config.objective, [r["val_loss"] for r in evals]))
    return DynamicsResult(
        config=config, analysis=analysis, steps=steps_S, heads=stacked["heads"],
        layers=stacked["layers"], embeddings=stacked["embeddings"],
        final_norm=stacked.get("final_norm"), correlation=correlation, trends=trends,
        loss_steps=np.asarray([r["step"] for r in losses], np.int64),
        loss=np.asarray([r["loss"] for r in losses], np.float64),
        val_steps=np.asarray([r["step"] for r in evals], np.int64),
        val_loss=np.asarray([r["val_loss"] for r in evals], np.float64),
        last_block=stacked["last_block"])
