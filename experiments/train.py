"""Trains a byte-level LM with log-spaced checkpoints, then analyses every checkpoint (docs/TRAIN.md).

  python experiments/train.py --workdir=DIR [--config=train:VARIANT] [--config.FIELD=VALUE ...]

The same as `anisotropy-jax train ...`; `--help` lists its flags, variants and config fields.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("train")
