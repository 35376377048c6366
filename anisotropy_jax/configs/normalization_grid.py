"""Config of the normalisation grid (docs/NORMALIZATIONS.md): clm runs with each attention
normalisation × {shakespeare, bigram_backcopy} × seeds, each (normalisation, dataset) one vmapped
program of its seeds, analysed at every checkpoint and summarised with intervals over seeds.

  anisotropy-jax normalizations --config=normalizations --workdir=runs/normalizations
  python experiments/normalization_grid.py \
      --config=experiments/configs/normalization_grid.py[:VARIANT] --workdir=DIR

Variants (`--config=normalizations:VARIANT`):
  default  3 seeds, 1,500 steps, batch 32 × 128 tokens, TF32 matmuls: Shakespeare on train_clm's
           :small model (d = 128, 4 layers), bigram_backcopy on the same with 2 layers; sized
           for one H100 (docs/NORMALIZATIONS.md gives the estimate)
  smoke    softmax and sigmoid only, 2 seeds, 24 steps, d = 32, 2 layers, L = 16 (CI)
  cpu      3 seeds, 300 steps, d = 64, 2 layers, L = 64, batch 16: the committed CPU preliminary
  full     5 seeds, 4,000 steps, batch 64 × 256: Shakespeare on train_clm's :gpu model (d = 384,
           6 layers), bigram_backcopy on a 3-layer one (documented only; not run)
Fields: NormalizationGridConfig (anisotropy_jax/config/normalizations.py); `shakespeare` and
`bigram_backcopy` are TrainConfigs (anisotropy_jax/config/training.py), `analysis` an
AnalysisConfig; e.g. --config.normalizations='("softmax", "sigmoid")' --config.seeds='(0, 1)'.
"""
import ml_collections

from anisotropy_jax.config import AnalysisConfig, TrainConfig
from anisotropy_jax.config.normalizations import (VARIANTS, NormalizationGridConfig,
                                                  grid_config_dict)

__all__ = ["FIELD_DOCS", "VARIANTS", "get_config"]
FIELD_DOCS = {"": NormalizationGridConfig, "shakespeare": TrainConfig,
              "bigram_backcopy": TrainConfig, "analysis": AnalysisConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """NormalizationGridConfig's experiment form with the variant `arg`."""
    return grid_config_dict(arg)
