"""Training config: GPT-style pre-LN causal byte-level LM on Shakespeare, next-byte loss, final
LayerNorm, LayerNorm epsilon of GPT-2 (1e-5).

Run (defaults: about 15 minutes on 2 CPU cores, then the per-checkpoint analysis):
  anisotropy-jax train --config=clm --workdir=runs/clm
  python experiments/train.py --config=experiments/configs/train_clm.py --workdir=runs/clm
  python experiments/qk_dynamics.py --workdir=runs/clm      # re-run the analysis alone
Variants (the `:arg` suffix, e.g. `--config=clm:smoke`):
  :smoke  tiny model, 40 steps, under a minute on 2 CPU cores (CI)
  :small  d = 128, 4 layers, 300 steps (the seeded CPU runs; experiments/train_seeds.py)
  :gpu    sized for one H100 (a few minutes)
Override any field with --config.FIELD=VALUE, e.g.
  --config.steps=2000 --config.model.tie_embeddings=False
Fields, defaults and their meaning: TrainConfig and AnalysisConfig (`analysis`) in
anisotropy_jax/config/training.py (`anisotropy-jax train --help` lists them); the variants:
`train_config_dict` there (shared with train_mlm.py).
"""
import ml_collections

from anisotropy_jax.config import TRAIN_VARIANTS, AnalysisConfig, TrainConfig, train_config_dict

VARIANTS = TRAIN_VARIANTS
# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": TrainConfig, "analysis": AnalysisConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    return train_config_dict(arg, objective="clm")
