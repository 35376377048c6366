"""Config of the untrained-block bias sweep, re-exported from the package so that the
scripts' --config=experiments/configs/bias_sweep.py[:VARIANT] keeps
working; its variants, fields and command are in anisotropy_jax/configs/bias_sweep.py.

  python experiments/bias_sweep.py \
      --config=experiments/configs/bias_sweep.py[:VARIANT] --workdir=DIR
"""
from anisotropy_jax.configs.bias_sweep import VARIANTS, get_config

__all__ = ["VARIANTS", "get_config"]
