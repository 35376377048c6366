"""Config of the depth study, re-exported from the package so that the
scripts' --config=experiments/configs/depth_sweep.py[:VARIANT] keeps
working; its variants, fields and command are in anisotropy_jax/configs/depth_sweep.py.

  python experiments/depth_sweep.py \
      --config=experiments/configs/depth_sweep.py[:VARIANT] --workdir=DIR
"""
from anisotropy_jax.configs.depth_sweep import VARIANTS, get_config

__all__ = ["VARIANTS", "get_config"]
