"""Config of experiments/checkpoint_series.py: the per-layer metrics of the pretrained study and
the per-head query/key analysis against the step, over a directory of checkpoints of one model
(docs/PRETRAINED.md, "Checkpoint series").

  anisotropy-jax series --config.series_dir=/path/to/series --workdir=runs/series
  python experiments/checkpoint_series.py --config=experiments/configs/checkpoint_series.py \
      --config.series_dir=/path/to/series --workdir=runs/series

Smoke run (seconds per checkpoint; 16 sentences, 1000 sampled pairs, 4-sentence head batch):

  python experiments/checkpoint_series.py --config=experiments/configs/checkpoint_series.py:smoke \
      --config.series_dir=/path/to/series --workdir=/tmp/series_smoke

Variants (`--config=series:VARIANT`):
  default  256 sentences, 10,000 sampled pairs, 16-sentence head batch
  smoke    16 sentences, 1000 sampled pairs, 4-sentence head batch (CI)
Every field is a SeriesConfig field (anisotropy_jax/config/series.py holds their defaults and
meaning, and validates each one; `anisotropy-jax series --help` lists them) and can be
overridden with --config.FIELD=VALUE.
"""
import ml_collections

from anisotropy_jax.config import SeriesConfig, config_dict, with_variants

VARIANTS = ("default", "smoke")
SETTINGS = {"smoke": {"num_sentences": 16, "batch_size": 8, "num_pairs": 1000,
                      "head_batch_size": 4}}
# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": SeriesConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """SeriesConfig's defaults (series_dir is required), then the variant `arg`."""
    return with_variants(config_dict(SeriesConfig), arg, VARIANTS, SETTINGS)
