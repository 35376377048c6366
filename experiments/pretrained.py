"""Layer-wise anisotropy and drift of a pretrained checkpoint against its untrained baseline (docs/PRETRAINED.md).

  python experiments/pretrained.py --workdir=DIR [--config=pretrained:VARIANT] [--config.FIELD=VALUE ...]

The same as `anisotropy-jax pretrained ...`; `--help` lists its flags, variants and config fields.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("pretrained")
