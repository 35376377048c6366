"""A checkpoint series of one model (`layout`): per checkpoint, on one fixed set of sentences,
the per-layer metrics of the pretrained study and the per-head query/key analysis of the dynamics
study, against the step (docs/SERIES.md).

Per checkpoint (S checkpoints, ascending steps):
  layers[name]   (S, states) every metric of `pretrained.states.METRIC_NAMES` (average, cross-
                 and within-sentence, sampled-pair cosine, drift, IsoScore, effective rank, ...)
                 per hidden state (`family.state_labels`: embeddings, layer_1 …, final_norm),
                 over the non-padding tokens of the sentences (`pretrained.states.state_metrics`,
                 same sampled pairs for every checkpoint);
  heads[name]    (S, layers, H) every metric of `dynamics.HEAD_METRICS` (‖q̄‖, ‖k̄‖, cos(q̄, k̄),
                 the key-dependent logit term of `metrics.logit_terms`, entropy, categorical
                 statistics) from `dynamics.head_metrics`, on one unpadded (B, L) batch: the
                 sentences cut to `head_length` tokens (BERT-like tokenizers then lose the final
                 [SEP]); families whose logits are q·k/√Dh (+ a position bias) only;
  embeddings[name] (S,) partition isotropy of the input/output embeddings
                 (`pretrained.embeddings`);
  correlation    per checkpoint, Spearman ρ across heads of the normalised entropy with the
                 key-dependent term (`dynamics.entropy_correlations_across_heads`).
`validate` does every check (text, layout, tokenizer, head batch) before anything is compiled;
`run` loads one checkpoint at a time. Nothing is written here (`report.write` does).
"""
from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax import corpus
from anisotropy_jax.config import ConfigError, require
from anisotropy_jax.configs.series import SeriesConfig
from anisotropy_jax.models import registry
from anisotropy_jax.protocol import SILENT, Progress
from anisotropy_jax.studies import train as dynamics
from anisotropy_jax.studies.pretrained import analysis as pretrained, embeddings, states
from anisotropy_jax.studies.pretrained import text as text_lib
from anisotropy_jax.studies.series import layout

# Families whose attention probes are (B, L, H, Dh) queries/keys with logits q·k/√Dh (+ bias).
HEAD_MODEL_TYPES = ("bert", "gpt2", "gpt_neox", "llama", "mpnet")


@dataclasses.dataclass(frozen=True)
class Inputs:
    """Everything a run needs, checked (`validate`); nothing compiled yet."""

    config: SeriesConfig  # resolved max_length and head_length
    series: layout.Series
    sentences: list[str]
    encoded: text_lib.Encoded
    head_tokens: np.ndarray | None  # (B, head_length) int32, unpadded
    text_source: str
    num_candidate_sentences: int


def _head_tokens(encoded: text_lib.Encoded, config: SeriesConfig) -> np.ndarray:
    """The unpadded batch of the head analysis (module docstring)."""
    lengths = encoded.lengths
    if config.head_length:
        rows = [i for i in range(len(encoded)) if lengths[i] >= config.head_length]
        rows, length = rows[:config.head_batch_size], config.head_length
    else:
        rows = sorted(np.argsort(-lengths, kind="stable")[:config.head_batch_size].tolist())
        length = int(lengths[rows].min())
    require(len(rows) >= 2, "head_length",
            f"only {len(rows)} sentences have >= {config.head_length} tokens (need 2)")
    require(length >= 2, "head_length", f"sentences of {length} tokens are too short")
    return np.stack([encoded.ids[i][:length] for i in rows]).astype(np.int32)


def validate(config: SeriesConfig) -> Inputs:
    """Reads the text, checks the series (`layout.check`), loads the tokenizer, draws and
    tokenizes the sentences and builds the head batch. One-line ConfigError naming the field."""
    text, source = text_lib.read_text(config.text_file)
    candidates = text_lib.candidate_sentences(text, source, config.min_words, config.max_words)
    series = layout.check(config.series_dir, config.precision)
    model_type = series.hf_config.get("model_type")
    require(not config.head_analysis or model_type in HEAD_MODEL_TYPES, "head_analysis",
            f"{series.checkpoints[0].path}: model_type {model_type!r} is not supported by the "
            f"per-head analysis ({', '.join(HEAD_MODEL_TYPES)}); set head_analysis=False")
    max_len = series.family.summary(series.config)["max_len"]
    max_length = config.max_length or min(pretrained.DEFAULT_MAX_LENGTH, max_len)
    require(max_length <= max_len, "max_length", f"{max_length} > the model's {max_len}")
    try:
        tokenizer = text_lib.load_tokenizer(series.tokenizer_dir, max_length)
    except ConfigError as e:
        raise layout.SeriesError(f"series_dir: {e}") from None
    sentences = corpus.sample_sentences(candidates, config.num_sentences, config.seed)
    encoded = text_lib.encode(tokenizer, sentences)
    vocab = series.family.summary(series.config)["vocab_size"]
    top = max(int(ids.max()) for ids in encoded.ids if ids.size)
    require(top < vocab, "series_dir", f"{series.tokenizer_dir}: the tokenizer gives id {top} "
            f">= vocab_size {vocab}: it does not belong to these checkpoints")
    head_tokens = None
    if config.head_analysis:
        head_tokens = _head_tokens(encoded, config)
        config = dataclasses.replace(config, head_length=head_tokens.shape[1])
    resolved = dataclasses.replace(config, max_length=max_length)
    return Inputs(resolved, series, sentences, encoded, head_tokens, source, len(candidates))


@functools.lru_cache(maxsize=4)
def head_fn(family: Any, cfg: Any) -> Callable[..., dict[str, jax.Array]]:
    """jit(params, tokens_BxL) → {name in dynamics.HEAD_METRICS: (layers, H)}; one compile for
    the whole series (every checkpoint has one architecture)."""
    apply = family.apply_fn(cfg)
    per_layer = jax.vmap(functools.partial(dynamics.head_metrics, causal=bool(family.causal)))

    @jax.jit
    def heads(params, tokens_BxL):
        _, probes = apply(params, tokens_BxL, jnp.ones(tokens_BxL.shape, bool))
        blocks = probes["blocks"]
        out = per_layer(*(jnp.stack([b[name] for b in blocks])
                          for name in ("queries", "keys", "attn_logits")))
        out.update(jax.vmap(functools.partial(dynamics.analysis.sink_metrics,
                                              causal=bool(family.causal)))(
            jnp.stack([b["attn_weights"] for b in blocks])))
        return {name: out[name] for name in dynamics.HEAD_METRICS}

    return heads


@dataclasses.dataclass(frozen=True)
class SeriesResult:
    """What a run measured (module docstring); arrays are numpy, indexed by checkpoint first."""

    config: SeriesConfig
    model: dict[str, Any]
    steps: np.ndarray
    checkpoints: list[str]
    labels: list[str]
    layers: dict[str, np.ndarray]
    heads: dict[str, np.ndarray]
    embeddings: dict[str, np.ndarray]
    correlation: dict[str, Any] | None
    data: dict[str, Any]
    timing: dict[str, float]
    sentences: list[str]


def _load(path) -> registry.LoadedModel:
    try:
        return registry.load(path)
    except ConfigError as e:
        raise layout.SeriesError(f"series_dir: {e}") from None


def _measure(inputs: Inputs, loaded: registry.LoadedModel, batches, key) -> dict[str, Any]:
    """Per-layer metrics, embedding isotropy and (with head_analysis) head metrics of one
    checkpoint."""
    config, fam = inputs.config, loaded.family
    forward = fam.hidden_states_fn(loaded.config)
    hidden = states.collect_states(forward, loaded.params, text_lib.forward_batches(
        batches, fam.summary(loaded.config)["vocab_size"]))
    out = {"layers": states.state_metrics(hidden, key, config.num_pairs,
                                          config.include_special_tokens),
           "embeddings": embeddings.embedding_isotropy(
               fam.embedding_matrices(loaded.params, loaded.config))}
    if inputs.head_tokens is not None:
        out["heads"] = jax.device_get(head_fn(fam, loaded.config)(loaded.params,
                                                                  inputs.head_tokens))
    return out


def _model_summary(loaded: registry.LoadedModel) -> dict[str, Any]:
    fam = loaded.family
    return {"model_type": loaded.hf_config.get("model_type"), "family": fam.name,
            "causal": bool(fam.causal), **fam.summary(loaded.config),
            "state_labels": list(loaded.labels), "num_parameters": loaded.num_parameters,
            "unused_tensors": loaded.unused_tensors}


def _stack(records: list[dict[str, Any]], name: str) -> dict[str, np.ndarray]:
    if name not in records[0]:
        return {}
    return {k: np.asarray([r[name][k] for r in records], np.float64) for k in records[0][name]}


def run(config: SeriesConfig, inputs: Inputs | None = None,
        progress: Progress = SILENT) -> SeriesResult:
    """`validate` (pass its `inputs` to skip it), then every checkpoint in step order (a line
    per checkpoint analysed: `progress.tick`)."""
    inputs = validate(config) if inputs is None else inputs
    config, series = inputs.config, inputs.series
    pad_id = series.family.pad_token_id(series.hf_config)
    max_len = series.family.summary(series.config)["max_len"]
    batches = text_lib.make_batches(inputs.encoded, config.batch_size, config.length_multiple,
                                    pad_id, max_len)
    key = jax.random.split(jax.random.key(config.seed))[1]  # the pretrained study's pair key
    records, timing = [], {}
    for i, ckpt in enumerate(series.checkpoints):
        start = time.perf_counter()
        loaded = _load(ckpt.path)
        records.append(_measure(inputs, loaded, batches, key))
        if i == 0:
            model = _model_summary(loaded)
        timing[f"step_{ckpt.step}_seconds"] = time.perf_counter() - start
        progress.tick(f"analysed {ckpt.path.name} (step {ckpt.step}, {i + 1}/"
                      f"{len(series.checkpoints)})")
    heads = _stack(records, "heads")
    lengths = inputs.encoded.lengths
    data = {"text_source": inputs.text_source, "num_candidate_sentences":
            inputs.num_candidate_sentences, "num_sentences": len(inputs.sentences),
            "num_tokens": int(lengths.sum()), "num_truncated": int(sum(inputs.encoded.truncated)),
            "head_batch_shape": None if inputs.head_tokens is None
            else list(inputs.head_tokens.shape)}
    return SeriesResult(
        config=config, model=model, steps=np.asarray(series.steps, np.int64),
        checkpoints=[str(c.path) for c in series.checkpoints], labels=model["state_labels"],
        layers=_stack(records, "layers"), heads=heads,
        embeddings=_stack(records, "embeddings"),
        correlation=dynamics.entropy_correlations_across_heads(heads) if heads else None,
        data=data, timing=timing, sentences=list(inputs.sentences))

