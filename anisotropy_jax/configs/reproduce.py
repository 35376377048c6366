"""Config of the one-command reproduction report (docs/SCIENCE.md, "Claims and where they stand").

  anisotropy-jax report [--config=report:VARIANT] --workdir=DIR
  python experiments/reproduce.py --config=experiments/configs/reproduce.py[:VARIANT] --workdir=DIR

Each study's sub-config is that study's own experiment config (the sweep, depth and embeddings
configs beside this one; training from `train_config_dict`, the pretrained study and the
vision/speech measurement from their dataclasses' defaults: ReproduceConfig in
anisotropy_jax/config/reproduce.py), resized per variant (`--config=report:VARIANT`):
  default    CPU-sized (about 10 minutes on 2 cores): the default bias sweep with its three
             controls × 5 seeds, and the pre-LN block's on 10 bias norms;
             small byte-level clm and mlm (d = 64, 2 layers, 120 steps) × 5 seeds; every installed
             pretrained model on 100 sentences; 8 images and 8 utterances; depth :cpu at width 128
             and 8 layers × 5 seeds; embedding_isotropy.py (default, CPU: 5 seeds)
  smoke      CI (about a minute on 2 CPU cores): the smoke sweep with its three controls, a
             6-step clm × 2 seeds, MiniLM-L6 on 8 sentences (no untrained baseline), the attention-only depth
             smoke, embedding_isotropy.py:smoke; no vision/speech
  full       one GPU (≤ 20 minutes): the default bias sweep and the pre-LN block's, each with its
             three controls × 5 seeds; as committed in docs/TRAINING.md, docs/PRETRAINED.md and
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
              "sweep.model": BlockConfig, "sweep_pre_ln": (SweepConfig, sweep_config_dict),
              "sweep_pre_ln.model": BlockConfig, "training.clm": TrainConfig, "training.mlm": TrainConfig,
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


# The pre-LN sweep of the CPU-sized report: the operating range (input cosine 0.1-0.6 at d = 768:
# s = 11.3 … 32) and a few points beyond, instead of all 30 (a pre-LN point runs literally on the
# CPU, about 3× the cost of a post-LN one).
PRE_LN_CPU_BIAS_NORMS = (0.0, 4.0, 2 ** 3.5, 16.0, 2 ** 4.5, 32.0, 64.0, 256.0, 1024.0, 4096.0)


def _sweeps(variant: str) -> tuple[ml_collections.ConfigDict, ml_collections.ConfigDict]:
    """(sweep, sweep_pre_ln): smoke, the smoke sweep with its three controls (no pre-LN sweep:
    an empty dict); otherwise every control × 5 seeds, for the post-LN block and the
    pre-LN one (the reversal: docs/BIAS_SWEEP.md "The controls")."""
    if variant == "smoke":
        return bias_sweep.get_config("smoke+controls"), ml_collections.ConfigDict()
    post, pre = bias_sweep.get_config("controls"), bias_sweep.get_config("pre_ln+controls")
    post.num_seeds = pre.num_seeds = 5
    if variant == "default":
        pre.bias_norms = PRE_LN_CPU_BIAS_NORMS
    return post, pre


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = arg or "default"
    if variant not in VARIANTS:
        raise ValueError(f"config: unknown variant {variant!r}; choose from {VARIANTS}")
    c = config_dict(ReproduceConfig, ("studies", "size", "seeds", "pretrained_models"))
    c.size = variant
    c.sweep, c.sweep_pre_ln = _sweeps(variant)
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
    else:  # every claim of a default or full report rests on ≥ 5 seeds
        c.depth.num_seeds = 5
    if variant == "default":
        c.pretrained.num_sentences, c.pretrained.num_pairs = 100, 2000
        c.modalities.num_images, c.modalities.num_utterances = 8, 8
        c.depth.widths, c.depth.num_layers = (128,), 8
    return c
