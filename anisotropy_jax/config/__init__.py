"""What every study's settings share (the bottom layer: imports nothing else from the package): the
validation primitives and the one mapping → dataclass converter (`base`), the experiment form of a
dataclass and its named variants (`defaults`), the field docs --help prints (`docs`), the block and
transformer configs (`model`), the training configs that several studies train with (`training`)
and the attention core a training run resolves (`attention_core`). Each study's own settings live
in one file, `anisotropy_jax/configs/<study>.py`.

ml_collections ConfigDicts exist only at the edge (config files, flags): `from_mapping` converts
them once, recursively, and each field is validated once, in its dataclass, with a one-line
`ConfigError` naming the field, before anything is compiled.
"""
from anisotropy_jax.config.attention_core import attention_core_note, resolve_attention_impl
from anisotropy_jax.config.base import (ConfigError, from_mapping, require, require_bool,
                                        require_choice, require_int, require_positive_float)
from anisotropy_jax.config.defaults import config_dict, field_names, with_variants
from anisotropy_jax.config.model import (ATTENTION_IMPLS, ATTENTIONS, INITS, NORM_POSITIONS,
                                         PRECISION_ALIASES, PRECISIONS, BlockConfig,
                                         TransformerConfig, precision_name)
from anisotropy_jax.config.training import (LAYER_NORM_EPS, MASK_ID, NUM_BYTES, OBJECTIVES,
                                            SHAKESPEARE, TRAIN_ATTENTION_IMPLS, TRAIN_VARIANTS,
                                            AnalysisConfig, DataConfig, ModelSpec, OptimConfig,
                                            TrainConfig, default_train_config, train_config_dict,
                                            train_config_from_mapping, vocab_size)

__all__ = [
    "ATTENTION_IMPLS", "ATTENTIONS", "INITS", "NORM_POSITIONS", "PRECISIONS", "MASK_ID",
    "NUM_BYTES", "OBJECTIVES", "SHAKESPEARE", "AnalysisConfig", "BlockConfig", "ConfigError",
    "DataConfig", "ModelSpec", "OptimConfig", "TrainConfig", "TransformerConfig", "from_mapping",
    "require", "require_bool", "require_choice", "require_int", "require_positive_float",
    "train_config_from_mapping", "vocab_size", "config_dict", "field_names", "LAYER_NORM_EPS",
    "TRAIN_VARIANTS", "default_train_config", "train_config_dict", "PRECISION_ALIASES",
    "precision_name", "with_variants", "TRAIN_ATTENTION_IMPLS", "attention_core_note",
    "resolve_attention_impl",
]
