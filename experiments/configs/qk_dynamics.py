"""Analysis config of experiments/qk_dynamics.py (the workdir of a training run is the input).

  python experiments/qk_dynamics.py --workdir=runs/clm --config=experiments/configs/qk_dynamics.py
Variants: :smoke (a smaller validation batch, for CI). The fields are those of
anisotropy_jax.config.AnalysisConfig (`--config.analysis.*` in the training configs).
"""
import ml_collections

from anisotropy_jax.config import AnalysisConfig, config_dict

VARIANTS = ("default", "smoke")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = arg or "default"
    if variant not in VARIANTS:
        raise ValueError(f"config variant: unknown variant {variant!r}; choose one of {VARIANTS}")
    c = config_dict(AnalysisConfig, ("batch_size", "seed"))  # its defaults (`run` is training's)
    if variant == "smoke":
        c.batch_size = 8
    return c
