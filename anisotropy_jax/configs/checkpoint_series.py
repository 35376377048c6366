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

from anisotropy_jax.config import SeriesConfig, config_dict

VARIANTS = ("default", "smoke")
# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": SeriesConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = arg or "default"
    if variant not in VARIANTS:
        raise ValueError(f"config variant: unknown variant {variant!r}; choose one of {VARIANTS}")
    c = config_dict(SeriesConfig)  # its defaults; series_dir is required
    if variant == "smoke":
        c.num_sentences = 16
        c.batch_size = 8
        c.num_pairs = 1000
        c.head_batch_size = 4
    return c
