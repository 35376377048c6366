"""Config of the normalisation grid (docs/NORMALIZATIONS.md): clm runs with each attention
normalisation × {shakespeare, bigram_backcopy} × seeds, each (normalisation, dataset) one vmapped
program of its seeds, analysed at every checkpoint and summarised with intervals over seeds.

  anisotropy-jax normalizations --config=normalizations --workdir=runs/normalizations
  python experiments/normalizations.py --config=normalizations[:VARIANT] --workdir=DIR

Variants (`--config=normalizations:VARIANT`; all four are sizes, and smoke applies last
wherever it stands, so `:cpu+smoke` or `:full+smoke` is smoke):
  default  the six normalisations (both sigmoids), 3 seeds, 1,500 steps, batch 32 × 128 tokens,
           TF32 matmuls: Shakespeare on the training config's :small model (d = 128, 4 layers),
           bigram_backcopy on the same with 2 layers; sized for one H100 (docs/NORMALIZATIONS.md
           gives the estimate)
  smoke    softmax and sigmoid only, 2 seeds, 8 steps, d = 32, 2 layers, L = 16 (CI)
  cpu      3 seeds, 300 steps, d = 64, 2 layers, L = 64, batch 16: the committed CPU preliminary
  full     5 seeds, 4,000 steps, batch 64 × 256: Shakespeare on the training config's :gpu model (d = 384,
           6 layers), bigram_backcopy on a 3-layer one (documented only; not run)
Fields: NormalizationGridConfig (anisotropy_jax/configs/normalizations.py); `shakespeare` and
`bigram_backcopy` are TrainConfigs (anisotropy_jax/config/training.py), `analysis` an
AnalysisConfig; e.g. --config.normalizations='("softmax", "sigmoid")' --config.seeds='(0, 1)'.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import ml_collections

from anisotropy_jax.config import AnalysisConfig, TrainConfig
from anisotropy_jax.config.base import ConfigError, from_mapping, require
from anisotropy_jax.config.defaults import apply_settings, config_dict, field_names, with_variants
from anisotropy_jax.config.training import (
    BIGRAM_BACKCOPY,
    SHAKESPEARE,
    TRAIN_SETTINGS,
    train_config_dict,
    train_config_from_mapping,
)

# The settings: each field, its meaning and its check.
DATASETS = (SHAKESPEARE, BIGRAM_BACKCOPY)
# The normalisations of the grid's default (models/attention.py, NORMALIZATIONS, is the list of
# those that exist; the study refuses a name it lacks): 'sigmoid' is Ramapuram et al.'s scalar
# bias −ln L, the arm that stands for sigmoid attention; 'sigmoid_per_query_bias' (−ln n per
# query) is the one the grid ran as 'sigmoid' before, kept for comparison with those results
# (docs/NORMALIZATIONS.md).
GRID_NORMALIZATIONS = ("softmax", "off_by_one", "sigmoid", "sigmoid_per_query_bias", "softpick",
                       "clipped_softmax")


VARIANTS = ("default", "smoke", "cpu", "full")
# Each variant's training config of both datasets, from the clm defaults: the training config's
# size variant (_SIZE; its analysis fields aside), then the grid's fields (_TRAIN), then for
# bigram_backcopy its own model (_BIGRAM). Each variant sets these on top of the default
# variant's (`SETTINGS`), so each names the fields the default sets (the matmul precision too).
_SIZE = {"smoke": "smoke", "cpu": "smoke", "default": "small", "full": "gpu"}
_TRAIN = {
    "smoke": {"steps": 8, "checkpoint_every": 0, "model.d_model": 32, "model.num_heads": 2,
              "model.d_ff": 64, "model.precision": "highest", "data.seq_len": 16,
              "data.batch_size": 4, "eval_batch_size": 4},
    "cpu": {"steps": 300, "checkpoint_every": 100, "model.d_model": 64, "model.num_heads": 4,
            "model.d_ff": 256, "model.num_layers": 2, "model.precision": "highest",
            "data.seq_len": 64, "data.batch_size": 16},
    "default": {"steps": 1500, "checkpoint_every": 500, "model.precision": "default",
                "data.seq_len": 128, "data.batch_size": 32, "eval_batch_size": 32},
    "full": {"steps": 4000, "checkpoint_every": 500, "data.batch_size": 64,
             "data.seq_len": 256, "eval_batch_size": 64, "model.precision": "default"},
}
_BIGRAM = {"default": {"model.num_layers": 2},
           "full": {"model.num_layers": 3, "model.d_model": 384, "model.num_heads": 6,
                    "model.d_ff": 1536}}
# The grid's own fields (the default variant's are NormalizationGridConfig's defaults).
_GRID = {"smoke": {"seeds": (0, 1), "analysis.batch_size": 4,
                   "normalizations": ("softmax", "sigmoid")},
         "cpu": {"seeds": (0, 1, 2), "analysis.batch_size": 8},
         "full": {"seeds": (0, 1, 2, 3, 4), "analysis.batch_size": 32}}


def _train_settings(variant: str, dataset: str) -> dict[str, Any]:
    """The fields `variant` sets on `dataset`'s training config (_SIZE, _TRAIN, _BIGRAM)."""
    size = {key: value for key, value in TRAIN_SETTINGS[_SIZE[variant]].items()
            if not key.startswith("analysis.")}
    bigram = _BIGRAM.get(variant, {}) if dataset == BIGRAM_BACKCOPY else {}
    return {**size, **_TRAIN[variant], **bigram}


def _train_dict(dataset: str) -> ml_collections.ConfigDict:
    """One dataset's training config of the default variant: the clm defaults (no `analysis`:
    the grid has its own), `data.source` = `dataset`, and the default variant's fields."""
    c = train_config_dict(None, "clm")
    del c["analysis"]
    c.data.source = dataset
    return apply_settings(c, _train_settings("default", dataset))


# The fields each variant sets on the default variant's experiment form (`with_variants`).
SETTINGS = {variant: {**{f"{dataset}.{key}": value for dataset in DATASETS
                         for key, value in _train_settings(variant, dataset).items()},
                      **_GRID[variant]} for variant in VARIANTS if variant != "default"}


def _default_train(dataset: str) -> TrainConfig:
    return train_config_from_mapping(_train_dict(dataset))[0]


@dataclasses.dataclass(frozen=True)
class NormalizationGridConfig:
    """The grid: every normalisation × dataset, each trained as one vmapped program of the seeds.

    Attributes:
      normalizations: the `model.attention_normalization` values compared (names of
        models/attention.py NORMALIZATIONS).
      datasets: 'shakespeare' and/or 'bigram_backcopy' (`data.source`).
      seeds: the seeds (≥ 2, distinct); seed s trains with seed = data.seed = s.
      shakespeare, bigram_backcopy: the clm TrainConfig of each dataset (its
        model.attention_normalization, seed and data.seed are set by the grid); defaults: the
        default variant's (`_train_dict`: train:small with 1,500 steps, batch 32 × 128,
        TF32; bigram_backcopy with 2 layers).
      analysis: the per-checkpoint analysis (AnalysisConfig).
    """

    normalizations: tuple[str, ...] = GRID_NORMALIZATIONS
    datasets: tuple[str, ...] = DATASETS
    seeds: tuple[int, ...] = (0, 1, 2)
    shakespeare: TrainConfig = _default_train(SHAKESPEARE)
    bigram_backcopy: TrainConfig = _default_train(BIGRAM_BACKCOPY)
    analysis: AnalysisConfig = AnalysisConfig()

    def __post_init__(self):
        for name in ("normalizations", "datasets", "seeds"):
            values = getattr(self, name)
            require(isinstance(values, tuple) and len(values) >= 1
                    and len(set(values)) == len(values), name,
                    f"must be a non-empty list without repeats, got {values!r}")
        require(len(self.seeds) >= 2, "seeds", "an interval over seeds needs at least 2")
        require(all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                    for s in self.seeds), "seeds", f"must be integers >= 0, got {self.seeds!r}")
        for dataset in self.datasets:
            require(dataset in DATASETS, "datasets",
                    f"unknown dataset {dataset!r}; choose from {DATASETS}")
            train = getattr(self, dataset)
            require(train.objective == "clm", f"{dataset}.objective", "the grid trains clm")
            require(train.data.source == dataset, f"{dataset}.data.source",
                    f"must be {dataset!r}, got {train.data.source!r}")

    def train_config(self, dataset: str, normalization: str, seed: int) -> TrainConfig:
        """The training run of one cell and seed."""
        base = getattr(self, dataset)
        model = dataclasses.replace(base.model, attention_normalization=normalization)
        return dataclasses.replace(base, model=model, seed=seed,
                                   data=dataclasses.replace(base.data, seed=seed))


def grid_config_from_mapping(cfg: Mapping[str, Any]) -> NormalizationGridConfig:
    """The grid config from its (nested) experiment mapping; the two training configs go through
    `train_config_from_mapping` (its `analysis` entry, if any, is refused: set the grid's)."""
    fields = dict(cfg.to_dict() if hasattr(cfg, "to_dict") else cfg)
    for dataset in DATASETS:
        if dataset in fields:
            sub = dict(fields[dataset])
            if "analysis" in sub:
                raise ConfigError(f"{dataset}.analysis: set the grid's analysis instead")
            fields[dataset] = train_config_from_mapping(sub)[0]
    return from_mapping(NormalizationGridConfig, fields)


def grid_config_dict(arg: str | None) -> ml_collections.ConfigDict:
    """The experiment form of the grid (NormalizationGridConfig's defaults: the default variant),
    then the variants of `arg` (smoke, cpu, full; see anisotropy_jax/configs/normalizations.py)."""
    defaults = NormalizationGridConfig()
    c = config_dict(defaults, [n for n in field_names(defaults) if n not in DATASETS])
    c.analysis = config_dict(AnalysisConfig)
    for dataset in DATASETS:
        c[dataset] = _train_dict(dataset)
    return with_variants(c, arg, VARIANTS, SETTINGS)


# The named variants (`--config=normalizations:VARIANT`).
__all__ = ["FIELD_DOCS", "VARIANTS", "get_config"]
FIELD_DOCS = {"": NormalizationGridConfig, "shakespeare": TrainConfig,
              "bigram_backcopy": TrainConfig, "analysis": AnalysisConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """NormalizationGridConfig's experiment form with the variant `arg`."""
    return grid_config_dict(arg)
