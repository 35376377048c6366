"""One training config with several seeds, and the per-checkpoint mean and 95% t-interval over them (docs/TRAIN.md).

  python experiments/seeds.py --workdir=DIR [--config=train:VARIANT] [--config.FIELD=VALUE ...]

The same as `anisotropy-jax seeds ...`; `--help` lists its flags, variants and config fields.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("seeds")
