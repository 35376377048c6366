"""Config of the pretrained study, re-exported from the package so that the
scripts' --config=experiments/configs/pretrained_anisotropy.py[:smoke] keeps
working; its variants, fields and command are in anisotropy_jax/configs/pretrained_anisotropy.py.

  python experiments/pretrained_anisotropy.py \
      --config=experiments/configs/pretrained_anisotropy.py[:smoke] --workdir=DIR
"""
from anisotropy_jax.configs.pretrained_anisotropy import VARIANTS, get_config

__all__ = ["VARIANTS", "get_config"]
