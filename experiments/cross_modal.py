"""The pretrained study on every offline model of every modality, on one plot (docs/CROSS_MODAL.md).

  python experiments/cross_modal.py --workdir=DIR [--config=cross_modal:VARIANT] [--config.FIELD=VALUE ...]

The same as `anisotropy-jax cross_modal ...`; `--help` lists its flags, variants and config fields.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("cross_modal")
