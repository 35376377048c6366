"""Trains and analyses one training configuration with several seeds, then aggregates them: per
checkpoint the mean and 95% Student-t interval over the seeds (docs/TRAINING.md).

  python experiments/train_seeds.py --config=experiments/configs/train_clm.py:small \
      --workdir=runs/clm_small --seeds=0,1,2

Seed s trains into WORKDIR/seed_<s> with --config.seed=s and --config.data.seed=s (a run already
there is resumed; a finished one is only analysed again) and is analysed as by qk_dynamics.py;
WORKDIR/results.json holds the summary over seeds, WORKDIR/figures/seeds.png its curves.
"""
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from anisotropy_jax import cli, config as config_lib, data, results
from anisotropy_jax.studies import dynamics, training
from anisotropy_jax.studies.dynamics import seeds as seeds_lib

_CONFIG = config_flags.DEFINE_config_file("config", None, "Training config file[:variant].",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder; seed s goes to WORKDIR/seed_s.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds (>= 2, distinct).")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show progress on stderr.")


def main(argv):
    del argv  # cli.parse_flags_or_exit refuses extra arguments
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
    cfg = cli.require_flag(_CONFIG.value, "config", "experiments/configs/train_clm.py:small")
    workdir = cli.workdir(_WORKDIR.value)
    with cli.user_errors():
        provenance = results.Provenance()
        runs = {}
        for seed in seeds_lib.parse_seeds(_SEEDS.value):
            c = cfg.copy_and_resolve_references()
            c.seed, c.data.seed = seed, seed
            runs[seed] = config_lib.train_config_from_mapping(c)
            training.check_devices(runs[seed][0])
            data.BatchIterator(runs[seed][0].data)  # the split of this seed; compiles nothing
        outs = []
        for seed, (config, analysis) in runs.items():
            sub, started = workdir / f"seed_{seed}", results.Provenance()
            print(training.format_summary(training.train(config, sub, progress=_PROGRESS.value,
                                                         analysis=analysis)))
            result = dynamics.run(sub, analysis, progress=_PROGRESS.value)
            outs.append(dynamics.write(result, sub, started))
        summary = seeds_lib.aggregate(outs)
        seeds_lib.write(summary, workdir, provenance, " ".join(["python"] + sys.argv))
    print(seeds_lib.format_table(summary))
    print(f"wrote {workdir / 'results.json'}")


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags_or_exit)
