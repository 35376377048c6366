"""Config of the embedding-isotropy study, re-exported from the package so that the
scripts' --config=experiments/configs/embedding_isotropy.py[:VARIANT] keeps
working; its variants, fields and command are in anisotropy_jax/configs/embedding_isotropy.py.

  python experiments/embedding_isotropy.py \
      --config=experiments/configs/embedding_isotropy.py[:VARIANT] --workdir=DIR
"""
from anisotropy_jax.configs.embedding_isotropy import VARIANTS, get_config

__all__ = ["VARIANTS", "get_config"]
