"""The per-checkpoint query/key analysis of a training run, again (docs/TRAIN.md).

  python experiments/dynamics.py --workdir=DIR [--config=train:VARIANT] [--config.FIELD=VALUE ...]

The same as `anisotropy-jax dynamics ...`; `--help` lists its flags, variants and config fields.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("dynamics")
