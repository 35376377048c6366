"""Config of training the causal LM, re-exported from the package so that the
scripts' --config=experiments/configs/train_clm.py[:VARIANT] keeps
working; its variants, fields and command are in anisotropy_jax/configs/train_clm.py.

  python experiments/train.py \
      --config=experiments/configs/train_clm.py[:VARIANT] --workdir=DIR
"""
from anisotropy_jax.configs.train_clm import VARIANTS, get_config

__all__ = ["VARIANTS", "get_config"]
