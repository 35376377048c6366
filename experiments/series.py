"""Per-layer and per-head metrics over a series of checkpoints of one model (docs/SERIES.md).

  python experiments/series.py --workdir=DIR [--config=series:VARIANT] [--config.FIELD=VALUE ...]

The same as `anisotropy-jax series ...`; `--help` lists its flags, variants and config fields.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("series")
