"""The untrained-block bias sweep, the project's main job (docs/SWEEP.md).

  python experiments/sweep.py --workdir=DIR [--config=sweep:VARIANT] [--config.FIELD=VALUE ...]

The same as `anisotropy-jax sweep ...`; `--help` lists its flags, variants and config fields.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("sweep")
