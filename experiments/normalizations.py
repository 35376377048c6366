"""Causal LMs with each attention normalisation, seeds as one program (docs/NORMALIZATIONS.md).

  python experiments/normalizations.py --workdir=DIR [--config=normalizations:VARIANT] [--config.FIELD=VALUE ...]

The same as `anisotropy-jax normalizations ...`; `--help` lists its flags, variants and config fields.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("normalizations")
