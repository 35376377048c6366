"""Trains a small byte-level LM from scratch with log-spaced orbax checkpoints, then (by default)
analyses every checkpoint (experiments/qk_dynamics.py).

  python experiments/train.py --config=experiments/configs/train_clm.py --workdir=runs/clm
  python experiments/train.py --config=experiments/configs/train_mlm.py:smoke --workdir=/tmp/mlm

Killed and started again with the same command, it resumes from the newest readable checkpoint and
ends with the same parameters and loss curve as an uninterrupted run.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("train", "experiments/configs/train_clm.py")
