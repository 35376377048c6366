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

from anisotropy_jax.config import AnalysisConfig, config_dict

VARIANTS = ("default", "smoke")
# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": AnalysisConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = arg or "default"
    if variant not in VARIANTS:
        raise ValueError(f"config variant: unknown variant {variant!r}; choose one of {VARIANTS}")
    c = config_dict(AnalysisConfig, ("batch_size", "seed"))  # its defaults (`run` is training's)
    if variant == "smoke":
        c.batch_size = 8
    return c
