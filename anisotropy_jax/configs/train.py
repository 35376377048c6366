"""Settings of the training study: a byte-level LM trained on Shakespeare with log-spaced
checkpoints, then the per-checkpoint query/key analysis (docs/TRAIN.md).

  clm  GPT-style pre-LN causal LM, next-byte loss, final LayerNorm, LayerNorm epsilon of GPT-2
       (1e-5); the default objective
  mlm  BERT-style post-LN encoder with the masked-LM loss, embedding LayerNorm, LayerNorm
       epsilon of BERT (1e-12)

Run (defaults: about 15 minutes on 2 CPU cores, then the per-checkpoint analysis):
  anisotropy-jax train --workdir=runs/clm
  anisotropy-jax train --config=train:mlm --workdir=runs/mlm
  anisotropy-jax seeds --config=train:small --seeds=0,1,2 --workdir=runs/seeds
  anisotropy-jax dynamics --workdir=runs/clm            # the analysis again, alone

Variants (`--config=train:VARIANT`; an objective and a size combine with '+', e.g.
`train:mlm+small`; smoke applies last wherever it stands, so `train:X+smoke` is X at smoke's
sizes: `train:gpu+smoke` keeps gpu's TF32 matmuls, `train:small+smoke` is smoke):
  clm    the causal LM (the default objective)
  mlm    the masked LM
  smoke  tiny model, 40 steps, under a minute on 2 CPU cores (CI)
  small  d = 128, 4 layers, 300 steps (the seeded CPU runs; `anisotropy-jax seeds`)
  gpu    d = 384, 6 layers, 4,000 steps, TF32 matmuls: sized for one H100 (a few minutes)
Override any field with --config.FIELD=VALUE, e.g.
  --config.steps=2000 --config.model.tie_embeddings=False
Fields, defaults and their meaning: TrainConfig and AnalysisConfig (`analysis`) in
anisotropy_jax/config/training.py, shared with the studies that train (normalizations,
embeddings, report); `anisotropy-jax train --help` lists them.
"""
from __future__ import annotations

import ml_collections

from anisotropy_jax.config import (LAYER_NORM_EPS, OBJECTIVES, AnalysisConfig, TrainConfig,
                                   train_config_dict, with_variants)
from anisotropy_jax.config.training import TRAIN_SETTINGS

# The named variants (`--config=train:VARIANT`): an objective (its family's LayerNorm epsilon
# with it) and the sizes (config/training.py TRAIN_SETTINGS), combined with '+'.
SETTINGS = {**{objective: {"objective": objective, "model.layer_norm_eps": LAYER_NORM_EPS[objective]}
               for objective in OBJECTIVES}, **TRAIN_SETTINGS}
VARIANTS = tuple(SETTINGS)
# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": TrainConfig, "analysis": AnalysisConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """TrainConfig's defaults (the clm objective), then the variants of `arg`: e.g. 'mlm+smoke',
    'small', 'clm+gpu', 'gpu+smoke'."""
    return with_variants(train_config_dict(None, "clm"), arg, VARIANTS, SETTINGS)
