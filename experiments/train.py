"""Trains a small byte-level LM from scratch with log-spaced orbax checkpoints, then (by default)
analyses every checkpoint (experiments/qk_dynamics.py).

  python experiments/train.py --config=experiments/configs/train_clm.py --workdir=runs/clm
  python experiments/train.py --config=experiments/configs/train_mlm.py:smoke --workdir=/tmp/mlm

Killed and started again with the same command, it resumes from the newest readable checkpoint and
ends with the same parameters and loss curve as an uninterrupted run.
"""
from absl import flags

from anisotropy_jax import cli
from anisotropy_jax.studies import dynamics

_PROGRESS = flags.DEFINE_bool("progress", True, "Show a progress bar on stderr.")

if __name__ == "__main__":
    cli.main(dynamics.TRAINING_STUDY, "experiments/configs/train_clm.py",
             workdir_help="Output folder (resumed if it holds a run).", progress=_PROGRESS)
