"""Trains and analyses one training configuration with several seeds, then aggregates them: per
checkpoint the mean and 95% Student-t interval over the seeds (docs/TRAINING.md).

  python experiments/train_seeds.py --config=experiments/configs/train_clm.py:small \
      --workdir=runs/clm_small --seeds=0,1,2

Seed s trains into WORKDIR/seed_<s> with --config.seed=s and --config.data.seed=s (a run already
there is resumed; a finished one is only analysed again) and is analysed as by qk_dynamics.py. The
seeds train as one vmapped, jitted program (split over the devices when there are several), each
with its own data stream, logs and checkpoints; their losses equal the seeds' separate train.py
runs within float32 rounding (anisotropy_jax/studies/training/seeds.py).
WORKDIR/results.json holds the summary over seeds, WORKDIR/figures/seeds.png its curves.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("seeds", "experiments/configs/train_clm.py:small")
