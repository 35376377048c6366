# Training config of the masked LM: train_clm.py's, by objective (`training_doc` writes the
# docstring).
import ml_collections

from anisotropy_jax.config import train_config_dict
from anisotropy_jax.configs.train_clm import FIELD_DOCS, VARIANTS, training_doc

__all__ = ["FIELD_DOCS", "VARIANTS", "get_config"]
__doc__ = training_doc("mlm")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    return train_config_dict(arg, objective="mlm")
