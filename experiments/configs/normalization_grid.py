"""Config of the normalisation grid, re-exported from the package so that the script's
--config=experiments/configs/normalization_grid.py[:VARIANT] works; its variants, fields and
command are in anisotropy_jax/configs/normalization_grid.py.

  python experiments/normalization_grid.py \
      --config=experiments/configs/normalization_grid.py[:VARIANT] --workdir=DIR
"""
from anisotropy_jax.configs.normalization_grid import VARIANTS, get_config

__all__ = ["VARIANTS", "get_config"]
