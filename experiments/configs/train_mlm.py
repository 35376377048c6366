"""Config of training the masked LM, re-exported from the package so that the
scripts' --config=experiments/configs/train_mlm.py[:VARIANT] keeps
working; its variants, fields and command are in anisotropy_jax/configs/train_mlm.py.

  python experiments/train.py \
      --config=experiments/configs/train_mlm.py[:VARIANT] --workdir=DIR
"""
from anisotropy_jax.configs.train_mlm import VARIANTS, get_config

__all__ = ["VARIANTS", "get_config"]
