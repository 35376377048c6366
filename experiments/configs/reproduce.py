"""Config of the reproduction report, re-exported from the package so that the
scripts' --config=experiments/configs/reproduce.py[:VARIANT] keeps
working; its variants, fields and command are in anisotropy_jax/configs/reproduce.py.

  python experiments/reproduce.py \
      --config=experiments/configs/reproduce.py[:VARIANT] --workdir=DIR
"""
from anisotropy_jax.configs.reproduce import VARIANTS, get_config

__all__ = ["VARIANTS", "get_config"]
