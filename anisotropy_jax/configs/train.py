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
`train:mlm+smoke`):
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

from anisotropy_jax.config import (OBJECTIVES, TRAIN_VARIANTS, AnalysisConfig, TrainConfig,
                                   train_config_dict)
from anisotropy_jax.config.defaults import UNKNOWN_COMBINED_VARIANT

VARIANTS = OBJECTIVES + tuple(v for v in TRAIN_VARIANTS if v != "default")
# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": TrainConfig, "analysis": AnalysisConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """TrainConfig's defaults for the objective named in `arg` (clm unless 'mlm'), then its size
    variant: e.g. 'mlm+smoke', 'small', 'clm+gpu'."""
    names = [name.strip() for name in (arg or "").split("+") if name.strip() not in ("", "default")]
    for name in names:
        if name not in VARIANTS:
            raise ValueError(UNKNOWN_COMBINED_VARIANT.format(name, VARIANTS))
    objectives = [name for name in names if name in OBJECTIVES]
    sizes = [name for name in names if name not in OBJECTIVES]
    if len(objectives) > 1 or len(sizes) > 1:
        raise ValueError(f"config: {arg!r} names more than one objective or size; give at most "
                         f"one of {OBJECTIVES} and one of {TRAIN_VARIANTS[1:]}")
    return train_config_dict(sizes[0] if sizes else None, objectives[0] if objectives else "clm")
