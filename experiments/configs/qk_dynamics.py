"""Config of the analysis of a training run, re-exported from the package so that the
scripts' --config=experiments/configs/qk_dynamics.py[:smoke] keeps
working; its variants, fields and command are in anisotropy_jax/configs/qk_dynamics.py.

  python experiments/qk_dynamics.py \
      --config=experiments/configs/qk_dynamics.py[:smoke] --workdir=DIR
"""
from anisotropy_jax.configs.qk_dynamics import VARIANTS, get_config

__all__ = ["VARIANTS", "get_config"]
