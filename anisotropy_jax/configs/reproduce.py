"""Config of the one-command reproduction report (docs/SCIENCE.md, "Claims and where they stand").

  anisotropy-jax report [--config=report:VARIANT] --workdir=DIR
  python experiments/reproduce.py --config=experiments/configs/reproduce.py[:VARIANT] --workdir=DIR

Each study's sub-config is that study's own experiment config (the sweep, depth and embeddings
configs beside this one; training from `train_config_dict`, the pretrained study and the
vision/speech measurement from their dataclasses' defaults: ReproduceConfig in
anisotropy_jax/config/reproduce.py), resized per variant (`--config=report:VARIANT`):
  default    CPU-sized (about 10 minutes on 2 cores): the default bias sweep with its control;
             small byte-level clm and mlm (d = 64, 2 layers, 120 steps) × 5 seeds; every installed
             pretrained model on 100 sentences; 8 images and 8 utterances; depth :cpu at width 128
             and 8 layers; embedding_isotropy.py (default, CPU) with 2 seeds
  smoke      CI (about a minute on 2 CPU cores): the smoke sweep with its control, a 6-step clm ×
             2 seeds, MiniLM-L6 on 8 sentences (no untrained baseline), the attention-only depth
             smoke, embedding_isotropy.py:smoke; no vision/speech
  full       one GPU (≤ 20 minutes): as committed in docs/TRAINING.md, docs/PRETRAINED.md and
             docs/DEPTH.md: train_*.py:small × 5 seeds, 1,000 sentences, 16 images and utterances,
             depth :bert_base, embedding_isotropy.py:gpu
Fields can be overridden, e.g. `--config.seeds='(0, 1)' --config.pretrained.num_sentences=50`
(`anisotropy-jax report --help` lists them).
"""
import ml_collections

from anisotropy_jax.config import (AnalysisConfig, BlockConfig, DepthConfig, EmbeddingsConfig,
                                   ModalitiesConfig, PretrainedConfig, ReproduceConfig, SweepConfig,
                                   TrainConfig, config_dict, sweep_config_dict, train_config_dict)
from anisotropy_jax.configs import bias_sweep, depth_sweep, embedding_isotropy

VARIANTS = ("default", "smoke", "full")
# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": ReproduceConfig, "sweep": (SweepConfig, sweep_config_dict),
              "sweep.model": BlockConfig, "training.clm": TrainConfig, "training.mlm": TrainConfig,
              "training.clm.analysis": AnalysisConfig, "training.mlm.analysis": AnalysisConfig,
              "depth": DepthConfig, "depth.model": BlockConfig, "embeddings": EmbeddingsConfig}


def _training(variant: str) -> ml_collections.ConfigDict:
    out = ml_collections.ConfigDict()
    objectives = ("clm",) if variant == "smoke" else ("clm", "mlm")
    for objective in objectives:
        c = train_config_dict({"full": "small"}.get(variant, "smoke"), objective)
        c.analysis.run = False  # analysed by the reproduction itself, seed by seed
        if variant == "smoke":
            c.model.d_model, c.model.d_ff, c.model.num_layers, c.data.seq_len = 32, 64, 1, 16
            c.steps, c.checkpoint_every = 6, 3
        elif variant == "default":
            c.data.seq_len, c.data.batch_size = 64, 16
            c.steps, c.checkpoint_every, c.optim.warmup_steps = 120, 40, 10
        out[objective] = c
    return out


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = arg or "default"
    if variant not in VARIANTS:
        raise ValueError(f"config: unknown variant {variant!r}; choose from {VARIANTS}")
    c = config_dict(ReproduceConfig, ("studies", "seeds", "pretrained_models"))  # defaults
    c.sweep = bias_sweep.get_config("smoke+control" if variant == "smoke" else "control")
    c.training = _training(variant)
    c.pretrained = config_dict(PretrainedConfig)
    c.modalities = config_dict(ModalitiesConfig)
    c.depth = depth_sweep.get_config({"smoke": "smoke", "default": "cpu"}.get(variant, "bert_base"))
    c.embeddings = embedding_isotropy.get_config({"smoke": "smoke", "full": "gpu"}.get(variant))
    if variant == "smoke":
        c.studies = ("sweep", "training", "pretrained", "depth", "embeddings")
        c.seeds, c.pretrained_models = (0, 1), ("minilm_l6",)
        c.pretrained.num_sentences, c.pretrained.batch_size, c.pretrained.num_pairs = 8, 8, 200
        c.pretrained.untrained_baseline = False
        c.depth.architectures = ("attention_only",)
    elif variant == "default":
        c.pretrained.num_sentences, c.pretrained.num_pairs = 100, 2000
        c.modalities.num_images, c.modalities.num_utterances = 8, 8
        c.depth.widths, c.depth.num_layers = (128,), 8
        c.embeddings.seeds = (0, 1)
    return c
