"""Config of the one-command reproduction report (docs/SCIENCE.md, "Claims and where they stand").

  anisotropy-jax report [--config=report:VARIANT] --workdir=DIR
  python experiments/report.py --config=report[:VARIANT] --workdir=DIR

Each study's sub-config is that study's own experiment config (the sweep, depth and embeddings
configs beside this one; training from `train_config_dict`, the pretrained study and the
vision/speech measurement from their dataclasses' defaults: ReproduceConfig in
anisotropy_jax/configs/report.py), resized per variant (`--config=report:VARIANT`; several
combine with '+'; smoke applies last wherever it stands and sets every size, so
`report:gpu+smoke` is gpu's choices at smoke's sizes: smoke's studies, seeds and training, the
embedding study with gpu's TF32 matmuls and learning rate):
  default    CPU-sized (about 10 minutes on 2 cores): the default bias sweep with its three
             controls × 5 seeds, and the pre-LN block's on 10 bias norms;
             small byte-level clm and mlm (d = 64, 2 layers, 120 steps) × 5 seeds; every installed
             pretrained model on 100 sentences; 8 images and 8 utterances; depth :cpu at width 128
             and 8 layers × 5 seeds; embeddings.py (default, CPU: 5 seeds)
  smoke      CI (about a minute on 2 CPU cores): the smoke sweep with its three controls, a
             6-step clm × 2 seeds, MiniLM-L6 on 8 sentences (no untrained baseline), the attention-only depth
             smoke, embeddings.py:smoke; no vision/speech
  gpu        the training studies at the size they are about: train:gpu (d = 384, 6 layers,
             L = 256, batch 64, TF32) clm and mlm × 5 seeds (vmapped), 4,000 steps, log-spaced
             checkpoints and every 1,000 steps (about 5 minutes per objective on one H100; train
             each objective alone with `anisotropy-jax seeds` into WORKDIR/training/<objective>
             and the report loads it); embeddings.py:gpu (D = 128-512); every other study as
             in `default`. The committed docs/REPORT.md is this variant
  full       one GPU (≤ 20 minutes): the default bias sweep and the pre-LN block's, each with its
             three controls × 5 seeds; as committed in docs/TRAIN.md, docs/PRETRAINED.md and
             docs/DEPTH.md: train_*.py:small × 5 seeds, 1,000 sentences, 16 images and utterances,
             depth :bert_base, embeddings.py:gpu
Fields can be overridden, e.g. `--config.seeds='(0, 1)' --config.pretrained.num_sentences=50`
(`anisotropy-jax report --help` lists them).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import ml_collections

from anisotropy_jax.config import AnalysisConfig, BlockConfig, TrainConfig, config_dict, train_config_dict
from anisotropy_jax.config.defaults import apply_settings, with_variants
from anisotropy_jax.config.base import ConfigError, from_mapping, require, require_choice, require_int
from anisotropy_jax.config.training import train_config_from_mapping
from anisotropy_jax.configs import depth, embeddings, sweep
from anisotropy_jax.configs.depth import DepthConfig, depth_config_from_mapping
from anisotropy_jax.configs.embeddings import EmbeddingsConfig
from anisotropy_jax.configs.pretrained import PretrainedConfig
from anisotropy_jax.configs.sweep import (DEFAULT_BIAS_NORMS, SweepConfig, sweep_config_dict,
                                         sweep_configs_from_mapping)

# The settings: each field, its meaning and its check.
STUDIES = ("sweep", "training", "pretrained", "modalities", "depth", "embeddings")
# Offline checkpoints the pretrained study looks for (found by the model modules' packaged_* helpers;
# a model that is not installed is reported as not measured, with its install hint). "gemma3" is
# measured when asked (--config.pretrained_models), not by default: the committed report's
# pretrained study ran without it.
PRETRAINED_CHOICES = ("minilm_l6", "smollm2", "gemma3", "mpnet")
PRETRAINED_MODELS = ("minilm_l6", "smollm2", "mpnet")
SIZES = ("smoke", "default", "gpu", "full")  # the variants below
# The inputs every reproduction sweep has: the bias and its norm-matched control (the verdicts of
# Godey 3a/3b compare them); the other controls (config/sweep.py INPUTS) may join them.
SWEEP_INPUTS = ("biased", "norm_matched")
# The label prefix of the second (pre-LN) sweep's runs (`sweep_pre_ln`).
PRE_LN_PREFIX = "pre-LN: "


@dataclasses.dataclass(frozen=True)
class ModalitiesConfig:
    """Vision/speech measurement: the first `num_images` offline photographs and `num_utterances`
    synthetic utterances (espeak-ng, or the numpy formant synthesiser where it is absent:
    `media.speech_source`); `seed` draws the sentences and the untrained weights.

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
      size: the variant's size, one of SIZES; a report made at 'smoke' size carries a banner
        saying its numbers test the code, not the claims.
      sweeps: [(label, SweepConfig)] of the bias sweep, one results.json: first the biased
        inputs, then at least the norm-matched control and optionally the other controls (same
        block, weights, seeds and grid); then optionally a second block's sweep (the pre-LN
        reversal), labelled with PRE_LN_PREFIX, which must have its own biased run.
      training: one (TrainConfig, AnalysisConfig) per objective, each trained with every seed.
      seeds: ≥ 2 distinct seeds (the t-intervals are over them).
      pretrained: the pretrained study's settings (model_dir is set per model).
      pretrained_models: names from PRETRAINED_MODELS, measured where installed.
      modalities: the vision/speech measurement.
      depth: the depth study.
      embeddings: Machina & Mercer's object on GPT-NeoX-style models trained here.
    """

    studies: tuple[str, ...] = STUDIES
    size: str = "default"
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
        require_choice(self.size, "size", SIZES, "size")
        for name in self.pretrained_models:
            require_choice(name, "pretrained_models", PRETRAINED_CHOICES, "model")
        if "sweep" in self.studies:
            _check_sweeps(self.sweeps)
        objectives = [train.objective for train, _ in self.training]
        require("training" not in self.studies or len(objectives) > 0, "training",
                "give at least one training config")
        require(len(set(objectives)) == len(objectives), "training",
                f"one config per objective, got {objectives}")
        require(isinstance(self.seeds, tuple) and len(set(self.seeds)) == len(self.seeds) >= 2
                and all(isinstance(s, int) and s >= 0 for s in self.seeds), "seeds",
                f"need at least 2 distinct integers >= 0, got {self.seeds!r}")


def _check_sweeps(sweeps: tuple[tuple[str, SweepConfig], ...]) -> None:
    """The first sweep is the biased inputs; every sweep's block (seeds, grid) has a biased run,
    and the first block also its norm-matched control; no inputs kind twice for one block."""
    first = sweeps[0][1] if sweeps else None
    main = [cfg.inputs for _, cfg in sweeps if cfg.replace(inputs="biased") ==
            (first.replace(inputs="biased") if first else None)]
    require(first is not None and first.inputs == "biased"
            and all(kind in main for kind in SWEEP_INPUTS), "sweep.compare_values",
            f"the sweep must compare inputs {SWEEP_INPUTS} (its control), the biased first; got "
            f"{tuple(cfg.inputs for _, cfg in sweeps)}")
    groups: dict[Any, list[str]] = {}
    for _, cfg in sweeps:
        groups.setdefault(cfg.replace(inputs="biased"), []).append(cfg.inputs)
    for kinds in groups.values():
        require("biased" in kinds and len(set(kinds)) == len(kinds), "sweep.compare_values",
                f"every sweep needs the biased inputs once, and each control at most once; got "
                f"{kinds}")
    labels = [label for label, _ in sweeps]
    require(len(set(labels)) == len(labels), "sweep_pre_ln", f"repeated labels {labels}")


def _prefixed(prefix: str, convert, *args):
    """convert(*args), its ConfigError's field prefixed by `prefix` (one line)."""
    try:
        return convert(*args)
    except ConfigError as err:
        raise ConfigError(f"{prefix}{err}") from None


def _sweeps(sweep: Mapping[str, Any], pre_ln: Mapping[str, Any]
            ) -> tuple[tuple[str, SweepConfig], ...]:
    """The `sweep` entry's runs, then those of `sweep_pre_ln` (if given) with PRE_LN_PREFIX."""
    out = _prefixed("sweep.", sweep_configs_from_mapping, sweep)
    if pre_ln:
        second = _prefixed("sweep_pre_ln.", sweep_configs_from_mapping, pre_ln)
        for _, cfg in second:
            require(cfg.model.norm_position == "pre", "sweep_pre_ln.model.norm_position",
                    f"the second sweep is the pre-LN block's, got {cfg.model.norm_position!r}")
        out += [(PRE_LN_PREFIX + label, cfg) for label, cfg in second]
    return tuple(out)


def reproduce_config_from_mapping(fields: Mapping[str, Any]) -> ReproduceConfig:
    """Validates the experiment form (anisotropy_jax/configs/report.py): `studies`, `seeds`,
    `pretrained_models`, and one sub-mapping per study in its own experiment form (`sweep` with
    compare_fields = ('inputs',), optionally `sweep_pre_ln` (the same form for a second block, its
    labels prefixed PRE_LN_PREFIX; empty = none), `training` {objective: train config},
    `pretrained`, `modalities`, `depth`, `embeddings`). Every error is a one-line ConfigError
    naming the field with its prefix."""
    rest = dict(fields.to_dict() if hasattr(fields, "to_dict") else fields)
    known = {"studies", "size", "seeds", "pretrained_models", "sweep", "sweep_pre_ln", "training",
             "pretrained", "modalities", "depth", "embeddings"}
    unknown = sorted(set(rest) - known)
    require(not unknown, unknown[0] if unknown else "", f"unknown field; known: {sorted(known)}")
    training = tuple(_prefixed(f"training.{name}.", train_config_from_mapping, cfg)
                     for name, cfg in dict(rest.get("training", {})).items())
    for (train, _), name in zip(training, dict(rest.get("training", {}))):
        require(train.objective == name, f"training.{name}.objective",
                f"{train.objective!r} differs from its key {name!r}")
    return ReproduceConfig(
        studies=tuple(rest.get("studies", STUDIES)),
        size=rest.get("size", "default"),
        sweeps=_sweeps(rest.get("sweep", {}), rest.get("sweep_pre_ln") or {}),
        training=training,
        seeds=tuple(rest.get("seeds", (0, 1, 2, 3, 4))),
        pretrained=from_mapping(PretrainedConfig, rest.get("pretrained", {}), "pretrained."),
        pretrained_models=tuple(rest.get("pretrained_models", PRETRAINED_MODELS)),
        modalities=from_mapping(ModalitiesConfig, rest.get("modalities", {}), "modalities."),
        depth=_prefixed("depth.", depth_config_from_mapping, rest.get("depth", {})),
        embeddings=from_mapping(EmbeddingsConfig, rest.get("embeddings", {}), "embeddings."))


# The named variants (`--config=report:VARIANT`).
VARIANTS = ("default", "smoke", "gpu", "full")
# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": ReproduceConfig, "sweep": (SweepConfig, sweep_config_dict),
              "sweep.model": BlockConfig, "sweep_pre_ln": (SweepConfig, sweep_config_dict),
              "sweep_pre_ln.model": BlockConfig, "training.clm": TrainConfig, "training.mlm": TrainConfig,
              "training.clm.analysis": AnalysisConfig, "training.mlm.analysis": AnalysisConfig,
              "depth": DepthConfig, "depth.model": BlockConfig, "embeddings": EmbeddingsConfig}


# The GPU report's checkpoints besides the log-spaced ones: 4 of them after the early transient.
GPU_CHECKPOINT_EVERY = 1000


def _training(variant: str) -> ml_collections.ConfigDict:
    """The `training` sub-config of a variant: {objective: its training config}."""
    out = ml_collections.ConfigDict()
    objectives = ("clm",) if variant == "smoke" else ("clm", "mlm")
    for objective in objectives:
        c = train_config_dict({"full": "small", "gpu": "gpu"}.get(variant, "smoke"), objective)
        c.analysis.run = False  # analysed by the reproduction itself, seed by seed
        if variant == "gpu":
            c.checkpoint_every = GPU_CHECKPOINT_EVERY
        if variant == "smoke":
            c.model.d_model, c.model.d_ff, c.model.num_layers, c.data.seq_len = 32, 64, 1, 16
            c.steps, c.checkpoint_every = 6, 3
        elif variant == "default":
            c.data.seq_len, c.data.batch_size = 64, 16
            c.steps, c.checkpoint_every, c.optim.warmup_steps = 120, 40, 10
        out[objective] = c
    return out


# The pre-LN sweep of the CPU-sized report: the operating range (input cosine 0.1-0.6 at d = 768:
# s = 11.3 … 32) and a few points beyond, instead of all 30 (a pre-LN point runs literally on the
# CPU, about 3× the cost of a post-LN one).
PRE_LN_CPU_BIAS_NORMS = (0.0, 4.0, 2 ** 3.5, 16.0, 2 ** 4.5, 32.0, 64.0, 256.0, 1024.0, 4096.0)


def _under(prefix: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """A sub-config's variant settings (another study's SETTINGS entry) at their paths here."""
    return {f"{prefix}.{key}": value for key, value in settings.items()}


def _defaults() -> ml_collections.ConfigDict:
    """The default variant (CPU-sized): the bias sweep with its three controls for the post-LN
    block and the pre-LN one (the reversal: docs/SWEEP.md "The controls"), the training configs,
    the pretrained and vision/speech studies, depth :cpu, the embeddings study's defaults; every
    claim rests on ≥ 5 seeds."""
    c = config_dict(ReproduceConfig, ("studies", "size", "seeds", "pretrained_models"))
    c.sweep, c.sweep_pre_ln = sweep.get_config("controls"), sweep.get_config("pre_ln+controls")
    c.training = _training("default")
    c.pretrained, c.modalities = config_dict(PretrainedConfig), config_dict(ModalitiesConfig)
    c.depth, c.embeddings = depth.get_config("cpu"), embeddings.get_config(None)
    return apply_settings(c, {
        "sweep.num_seeds": 5, "sweep_pre_ln.num_seeds": 5,
        "sweep_pre_ln.bias_norms": PRE_LN_CPU_BIAS_NORMS,
        "pretrained.num_sentences": 100, "pretrained.num_pairs": 2000,
        "modalities.num_images": 8, "modalities.num_utterances": 8,
        "depth.widths": (128,), "depth.num_layers": 8, "depth.num_seeds": 5})


# The fields each variant sets over the default (`with_variants`; a ConfigDict value replaces
# that whole sub-config). smoke sets every size the others set (and a sub-config's, its study's
# smoke sizes), so that `report:gpu+smoke` is gpu's choices at smoke's sizes.
SETTINGS = {
    "smoke": {
        "size": "smoke", "studies": ("sweep", "training", "pretrained", "depth", "embeddings"),
        "seeds": (0, 1), "pretrained_models": ("minilm_l6",),
        **_under("sweep", sweep.SETTINGS["smoke"]), "sweep_pre_ln": ml_collections.ConfigDict(),
        "training": _training("smoke"),
        "pretrained.num_sentences": 8, "pretrained.batch_size": 8, "pretrained.num_pairs": 200,
        "pretrained.untrained_baseline": False,
        # not measured at smoke size (no 'modalities' in studies): the dataclass's defaults
        "modalities.num_images": ModalitiesConfig.num_images,
        "modalities.num_utterances": ModalitiesConfig.num_utterances,
        **_under("depth", depth.SETTINGS["smoke"]), "depth.architectures": ("attention_only",),
        **_under("embeddings", embeddings.SETTINGS["smoke"])},
    "gpu": {"size": "gpu", "training": _training("gpu"),
            **_under("embeddings", embeddings.SETTINGS["gpu"])},
    "full": {"size": "full", "sweep_pre_ln.bias_norms": DEFAULT_BIAS_NORMS,
             "training": _training("full"),
             "pretrained.num_sentences": PretrainedConfig.num_sentences,
             "pretrained.num_pairs": PretrainedConfig.num_pairs,
             "modalities.num_images": ModalitiesConfig.num_images,
             "modalities.num_utterances": ModalitiesConfig.num_utterances,
             "depth": apply_settings(depth.get_config("bert_base"), {"num_seeds": 5}),
             **_under("embeddings", embeddings.SETTINGS["gpu"])},
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """The default variant's experiment form (`_defaults`), then the variants of `arg`."""
    return with_variants(_defaults(), arg, VARIANTS, SETTINGS)
