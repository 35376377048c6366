"""Trains and analyses one training configuration with several seeds, then aggregates them: per
checkpoint the mean and 95% Student-t interval over the seeds (docs/TRAINING.md).

  python experiments/train_seeds.py --config=experiments/configs/train_clm.py:small \
      --workdir=runs/clm_small --seeds=0,1,2

Seed s trains into WORKDIR/seed_<s> with --config.seed=s and --config.data.seed=s (a run already
there is resumed; a finished one is only analysed again) and is analysed as by qk_dynamics.py;
WORKDIR/results.json holds the summary over seeds, WORKDIR/figures/seeds.png its curves.
"""
from absl import flags

from anisotropy_jax import cli
from anisotropy_jax.studies import dynamics

_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds (>= 2, distinct).")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show progress on stderr.")

if __name__ == "__main__":
    cli.main(dynamics.SEEDS_STUDY, "experiments/configs/train_clm.py:small",
             workdir_help="Output folder; seed s goes to WORKDIR/seed_s.", seeds=_SEEDS,
             progress=_PROGRESS)
