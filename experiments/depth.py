"""Untrained stacks against depth and width (docs/DEPTH.md).

  python experiments/depth.py --workdir=DIR [--config=depth:VARIANT] [--config.FIELD=VALUE ...]

The same as `anisotropy-jax depth ...`; `--help` lists its flags, variants and config fields.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("depth")
