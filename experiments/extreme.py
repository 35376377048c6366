"""Attention sinks, massive activations and rogue dimensions per layer (docs/EXTREME.md).

  python experiments/extreme.py --workdir=DIR [--config=extreme:VARIANT] [--config.FIELD=VALUE ...]

The same as `anisotropy-jax extreme ...`; `--help` lists its flags, variants and config fields.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("extreme")
