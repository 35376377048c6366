"""Analysis config of experiments/qk_dynamics.py (the workdir of a training run is the input).

  anisotropy-jax dynamics --workdir=runs/clm
  python experiments/qk_dynamics.py --workdir=runs/clm --config=experiments/configs/qk_dynamics.py

Variants (`--config=dynamics:VARIANT`):
  default  16 validation sequences
  smoke    8 validation sequences (CI)
The fields are those of anisotropy_jax.config.AnalysisConfig (`--config.analysis.*` in the
training configs; `anisotropy-jax dynamics --help` lists them).
"""
import ml_collections

from anisotropy_jax.config import AnalysisConfig, config_dict, with_variants

VARIANTS = ("default", "smoke")
SETTINGS = {"smoke": {"batch_size": 8}}
# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": AnalysisConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """AnalysisConfig's defaults (`run` is training's), then the variant `arg`."""
    return with_variants(config_dict(AnalysisConfig, ("batch_size", "seed")), arg, VARIANTS,
                         SETTINGS)
