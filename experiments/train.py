"""Trains a small byte-level LM from scratch with log-spaced orbax checkpoints, then (by default)
analyses every checkpoint (experiments/qk_dynamics.py).

  python experiments/train.py --config=experiments/configs/train_clm.py --workdir=runs/clm
  python experiments/train.py --config=experiments/configs/train_mlm.py:smoke --workdir=/tmp/mlm

Killed and started again with the same command, it resumes from the newest readable checkpoint and
ends with the same parameters and loss curve as an uninterrupted run.
"""
from absl import app, flags, logging
from ml_collections import config_flags

from anisotropy_jax import cli, config as config_lib, data, results
from anisotropy_jax.studies import dynamics, training

_CONFIG = config_flags.DEFINE_config_file("config", None, "Training config file[:variant].",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder (resumed if it holds a run).")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show a progress bar on stderr.")


def main(argv):
    del argv  # cli.parse_flags_or_exit refuses extra arguments
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
    cfg = cli.require_flag(_CONFIG.value, "config", "experiments/configs/train_clm.py")
    workdir = cli.workdir(_WORKDIR.value)
    with cli.user_errors():
        config, analysis = config_lib.train_config_from_mapping(cfg)
        training.check_devices(config)
        data.BatchIterator(config.data)  # loads the corpus and checks the split; compiles nothing
        summary = training.train(config, workdir, progress=_PROGRESS.value, analysis=analysis)
        print(training.format_summary(summary))
        if analysis.run:
            provenance = results.Provenance()
            result = dynamics.run(workdir, analysis, progress=_PROGRESS.value)
            dynamics.write(result, workdir, provenance)
            print(dynamics.format_report(result))
            print(f"wrote {workdir / 'results.json'}")


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags_or_exit)
