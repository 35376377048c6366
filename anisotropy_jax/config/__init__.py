"""Every typed, frozen config of the package, and the one mapping → dataclass converter (the
bottom layer: imports nothing else from the package).

ml_collections ConfigDicts exist only at the edge (experiment files, flags): `from_mapping`
converts them once, recursively, and each field is validated once, in its dataclass, with a
one-line `ConfigError` naming the field, before anything is compiled. Defaults and field docs
live once, in the dataclasses: experiment files start from `config_dict` (or a study's
`*_config_dict`, its experiment form) and apply only their named variants.
"""
from anisotropy_jax.config.base import (ConfigError, from_mapping, require, require_bool,
                                        require_choice, require_int, require_positive_float)
from anisotropy_jax.config.defaults import config_dict, field_names, with_variants
from anisotropy_jax.config.depth import (ARCHITECTURES, WEIGHT_MODES, DepthConfig,
                                         depth_config_dict, depth_config_from_mapping)
from anisotropy_jax.config.embeddings import EmbeddingsConfig
from anisotropy_jax.config.model import (ATTENTION_IMPLS, ATTENTIONS, INITS, NORM_POSITIONS,
                                         PRECISION_ALIASES, PRECISIONS, BlockConfig,
                                         TransformerConfig, precision_name)
from anisotropy_jax.config.pretrained import (CrossModalConfig, PretrainedConfig,
                                             cross_modal_config_dict)
from anisotropy_jax.config.reproduce import (ModalitiesConfig, ReproduceConfig,
                                             reproduce_config_from_mapping)
from anisotropy_jax.config.series import SeriesConfig
from anisotropy_jax.config.sweep import (DEFAULT_BIAS_NORMS, SweepConfig, default_label,
                                         sweep_config_dict, sweep_configs_from_mapping)
from anisotropy_jax.config.training import (LAYER_NORM_EPS, MASK_ID, NUM_BYTES, OBJECTIVES,
                                            SHAKESPEARE, TRAIN_VARIANTS, AnalysisConfig,
                                            DataConfig, ModelSpec, OptimConfig, TrainConfig,
                                            default_train_config, train_config_dict,
                                            train_config_from_mapping, vocab_size)

__all__ = [
    "ARCHITECTURES", "WEIGHT_MODES", "DepthConfig", "depth_config_from_mapping",
    "ATTENTION_IMPLS", "ATTENTIONS", "INITS", "NORM_POSITIONS", "PRECISIONS", "DEFAULT_BIAS_NORMS",
    "MASK_ID", "NUM_BYTES", "OBJECTIVES", "SHAKESPEARE", "AnalysisConfig", "BlockConfig",
    "ConfigError", "DataConfig", "EmbeddingsConfig", "ModelSpec", "OptimConfig", "PretrainedConfig",
    "SweepConfig", "TrainConfig", "TransformerConfig", "default_label", "from_mapping", "require",
    "require_bool", "require_choice", "require_int", "require_positive_float",
    "ModalitiesConfig", "ReproduceConfig", "reproduce_config_from_mapping", "SeriesConfig",
    "sweep_configs_from_mapping", "train_config_from_mapping", "vocab_size",
    "config_dict", "field_names", "depth_config_dict", "sweep_config_dict", "CrossModalConfig",
    "cross_modal_config_dict", "LAYER_NORM_EPS", "TRAIN_VARIANTS", "default_train_config",
    "train_config_dict", "PRECISION_ALIASES", "precision_name", "with_variants",
]
