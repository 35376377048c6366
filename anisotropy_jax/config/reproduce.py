"""Configuration of the one-command reproduction (experiments/reproduce.py): which studies run and
each study's own config, validated once here before anything is compiled."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from anisotropy_jax.config.base import (ConfigError, from_mapping, require, require_choice,
                                        require_int)
from anisotropy_jax.config.depth import DepthConfig, depth_config_from_mapping
from anisotropy_jax.config.embeddings import EmbeddingsConfig
from anisotropy_jax.config.pretrained import PretrainedConfig
from anisotropy_jax.config.sweep import SweepConfig, sweep_configs_from_mapping
from anisotropy_jax.config.training import (AnalysisConfig, TrainConfig,
                                            train_config_from_mapping)

STUDIES = ("sweep", "training", "pretrained", "modalities", "depth", "embeddings")
# Offline checkpoints the pretrained study looks for (found by the model modules' packaged_* helpers;
# a model that is not installed is reported as not measured, with its install hint).
PRETRAINED_MODELS = ("minilm_l6", "smollm2", "mpnet")
SWEEP_INPUTS = ("biased", "norm_matched")  # the bias and its norm-matched control, always both


@dataclasses.dataclass(frozen=True)
class ModalitiesConfig:
    """Vision/speech measurement: the first `num_images` offline photographs and `num_utterances`
    synthetic (espeak-ng) utterances; `seed` draws the sentences and the untrained weights.

    Attributes:
      num_images: offline photographs measured per image model (the first ones, sorted).
      num_utterances: synthetic utterances measured per speech model.
      seed: draws the spoken sentences and the untrained weights.
    """

    num_images: int = 16
    num_utterances: int = 16
    seed: int = 0

    def __post_init__(self):
        for name in ("num_images", "num_utterances"):
            require_int(getattr(self, name), name, 1)
        require_int(self.seed, "seed", 0)


@dataclasses.dataclass(frozen=True)
class ReproduceConfig:
    """Every study of the reproduction report.

    Attributes:
      studies: which of STUDIES run (the others are reported as not measured: not in the config).
      sweeps: [(label, SweepConfig)] of the bias sweep: exactly the biased inputs and the
        norm-matched control (same weights, seeds and grid).
      training: one (TrainConfig, AnalysisConfig) per objective, each trained with every seed.
      seeds: ≥ 2 distinct seeds (the t-intervals are over them).
      pretrained: the pretrained study's settings (model_dir is set per model).
      pretrained_models: names from PRETRAINED_MODELS, measured where installed.
      modalities: the vision/speech measurement.
      depth: the depth study.
      embeddings: Machina & Mercer's object on GPT-NeoX-style models trained here.
    """

    studies: tuple[str, ...] = STUDIES
    sweeps: tuple[tuple[str, SweepConfig], ...] = ()
    training: tuple[tuple[TrainConfig, AnalysisConfig], ...] = ()
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    pretrained: PretrainedConfig = PretrainedConfig()
    pretrained_models: tuple[str, ...] = PRETRAINED_MODELS
    modalities: ModalitiesConfig = ModalitiesConfig()
    depth: DepthConfig = DepthConfig()
    embeddings: EmbeddingsConfig = EmbeddingsConfig()

    def __post_init__(self):
        require(isinstance(self.studies, tuple) and len(self.studies) > 0, "studies",
                f"must be a non-empty tuple of {STUDIES}, got {self.studies!r}")
        for name in self.studies:
            require_choice(name, "studies", STUDIES, "study")
        for name in self.pretrained_models:
            require_choice(name, "pretrained_models", PRETRAINED_MODELS, "model")
        inputs = tuple(cfg.inputs for _, cfg in self.sweeps)
        require("sweep" not in self.studies or inputs == SWEEP_INPUTS, "sweep.compare_values",
                f"the sweep must compare inputs {SWEEP_INPUTS} (its control), got {inputs}")
        objectives = [train.objective for train, _ in self.training]
        require("training" not in self.studies or len(objectives) > 0, "training",
                "give at least one training config")
        require(len(set(objectives)) == len(objectives), "training",
                f"one config per objective, got {objectives}")
        require(isinstance(self.seeds, tuple) and len(set(self.seeds)) == len(self.seeds) >= 2
                and all(isinstance(s, int) and s >= 0 for s in self.seeds), "seeds",
                f"need at least 2 distinct integers >= 0, got {self.seeds!r}")


def _prefixed(prefix: str, convert, *args):
    """convert(*args), its ConfigError's field prefixed by `prefix` (one line)."""
    try:
        return convert(*args)
    except ConfigError as err:
        raise ConfigError(f"{prefix}{err}") from None


def reproduce_config_from_mapping(fields: Mapping[str, Any]) -> ReproduceConfig:
    """Validates the experiment form (experiments/configs/reproduce.py): `studies`, `seeds`,
    `pretrained_models`, and one sub-mapping per study in its own experiment form (`sweep` with
    compare_field = 'inputs', `training` {objective: train config}, `pretrained`, `modalities`,
    `depth`, `embeddings`). Every error is a one-line ConfigError naming the field with its prefix."""
    rest = dict(fields.to_dict() if hasattr(fields, "to_dict") else fields)
    known = {"studies", "seeds", "pretrained_models", "sweep", "training", "pretrained",
             "modalities", "depth", "embeddings"}
    unknown = sorted(set(rest) - known)
    require(not unknown, unknown[0] if unknown else "", f"unknown field; known: {sorted(known)}")
    training = tuple(_prefixed(f"training.{name}.", train_config_from_mapping, cfg)
                     for name, cfg in dict(rest.get("training", {})).items())
    for (train, _), name in zip(training, dict(rest.get("training", {}))):
        require(train.objective == name, f"training.{name}.objective",
                f"{train.objective!r} differs from its key {name!r}")
    return ReproduceConfig(
        studies=tuple(rest.get("studies", STUDIES)),
        sweeps=tuple(_prefixed("sweep.", sweep_configs_from_mapping, rest.get("sweep", {}))),
        training=training,
        seeds=tuple(rest.get("seeds", (0, 1, 2, 3, 4))),
        pretrained=from_mapping(PretrainedConfig, rest.get("pretrained", {}), "pretrained."),
        pretrained_models=tuple(rest.get("pretrained_models", PRETRAINED_MODELS)),
        modalities=from_mapping(ModalitiesConfig, rest.get("modalities", {}), "modalities."),
        depth=_prefixed("depth.", depth_config_from_mapping, rest.get("depth", {})),
        embeddings=from_mapping(EmbeddingsConfig, rest.get("embeddings", {}), "embeddings."))
