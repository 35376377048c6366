"""Config of the checkpoint series, re-exported from the package so that the
scripts' --config=experiments/configs/checkpoint_series.py[:smoke] keeps
working; its variants, fields and command are in anisotropy_jax/configs/checkpoint_series.py.

  python experiments/checkpoint_series.py \
      --config=experiments/configs/checkpoint_series.py[:smoke] --workdir=DIR
"""
from anisotropy_jax.configs.checkpoint_series import VARIANTS, get_config

__all__ = ["VARIANTS", "get_config"]
