"""Per-checkpoint query/key analysis of a training run made by experiments/train.py.

  python experiments/qk_dynamics.py --workdir=runs/clm
  python experiments/qk_dynamics.py --workdir=runs/clm \
      --config=experiments/configs/qk_dynamics.py:smoke

Reads DIR/config.json and DIR/checkpoints/, writes DIR/results.json (provenance, config, the
per-checkpoint metrics, the Spearman correlation of entropy with |mean q·mean k|, and the expected
trends of docs/SCIENCE.md with their numbers), DIR/dynamics.npz and DIR/figures/*.png.
"""
import pathlib

from absl import flags

from anisotropy_jax import cli
from anisotropy_jax.studies import dynamics

_PROGRESS = flags.DEFINE_bool("progress", True, "Print one line per analysed checkpoint.")

if __name__ == "__main__":
    cli.main(dynamics.STUDY, config_default=str(pathlib.Path(__file__).resolve().parent /
                                                "configs" / "qk_dynamics.py"),
             workdir_help="Workdir of a training run (experiments/train.py).", progress=_PROGRESS)
