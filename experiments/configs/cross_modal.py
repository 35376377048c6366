"""Config of the cross-modal comparison, re-exported from the package so that the
scripts' --config=experiments/configs/cross_modal.py[:smoke] keeps
working; its variants, fields and command are in anisotropy_jax/configs/cross_modal.py.

  python experiments/cross_modal.py \
      --config=experiments/configs/cross_modal.py[:smoke] --workdir=DIR
"""
from anisotropy_jax.configs.cross_modal import VARIANTS, get_config

__all__ = ["VARIANTS", "get_config"]
