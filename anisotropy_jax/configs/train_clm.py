# Training config of the causal LM; `training_doc` writes its docstring and train_mlm.py's.
import ml_collections

from anisotropy_jax.config import TRAIN_VARIANTS, AnalysisConfig, TrainConfig, train_config_dict

VARIANTS = TRAIN_VARIANTS
# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": TrainConfig, "analysis": AnalysisConfig}
# The model each objective trains: the first lines of its training config's docstring.
MODELS = {"clm": "GPT-style pre-LN causal byte-level LM on Shakespeare, next-byte loss, final\n"
                 "LayerNorm, LayerNorm epsilon of GPT-2 (1e-5).",
          "mlm": "BERT-style post-LN byte-level encoder with masked-LM loss on Shakespeare,\n"
                 "embedding LayerNorm, LayerNorm epsilon of BERT (1e-12)."}


def training_doc(objective: str) -> str:
    """The docstring of train_<objective>.py: one config, by objective (`--help` shows its
    variants from it)."""
    other = "mlm" if objective == "clm" else "clm"
    return f"""Training config: {MODELS[objective]}

Run (defaults: about 15 minutes on 2 CPU cores, then the per-checkpoint analysis):
  anisotropy-jax train --config={objective} --workdir=runs/{objective}
  python experiments/train.py --config=experiments/configs/train_{objective}.py --workdir=runs/{objective}
  python experiments/qk_dynamics.py --workdir=runs/{objective}      # re-run the analysis alone
Variants (the `:arg` suffix, e.g. `--config={objective}:smoke`):
  :smoke  tiny model, 40 steps, under a minute on 2 CPU cores (CI)
  :small  d = 128, 4 layers, 300 steps (the seeded CPU runs; experiments/train_seeds.py)
  :gpu    sized for one H100 (a few minutes)
Override any field with --config.FIELD=VALUE, e.g.
  --config.steps=2000 --config.model.tie_embeddings=False
Fields, defaults and their meaning: TrainConfig and AnalysisConfig (`analysis`) in
anisotropy_jax/config/training.py (`anisotropy-jax train --help` lists them); the variants:
`train_config_dict` there (shared with train_{other}.py).
"""


__doc__ = training_doc("clm")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    return train_config_dict(arg, objective="clm")
