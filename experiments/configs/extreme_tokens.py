"""Config of the extreme-token study, re-exported from the package so that the script's
--config=experiments/configs/extreme_tokens.py[:smoke] works; its variants, fields and command are
in anisotropy_jax/configs/extreme_tokens.py.

  python experiments/extreme_tokens.py \
      --config=experiments/configs/extreme_tokens.py[:smoke] --workdir=DIR
"""
from anisotropy_jax.configs.extreme_tokens import VARIANTS, get_config

__all__ = ["VARIANTS", "get_config"]
