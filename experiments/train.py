"""Trains a small byte-level LM from scratch with log-spaced orbax checkpoints, then (by default)
analyses every checkpoint (experiments/qk_dynamics.py).

  python experiments/train.py --config=experiments/configs/train_clm.py --workdir=runs/clm
  python experiments/train.py --config=experiments/configs/train_mlm.py:smoke --workdir=/tmp/mlm

Killed and started again with the same command, it resumes from the newest readable checkpoint and
ends with the same parameters and loss curve as an uninterrupted run.
"""
import pathlib
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from anisotropy_jax import cli

_CONFIG = config_flags.DEFINE_config_file("config", None, "Training config file[:variant].",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder (resumed if it holds a run).")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show a progress bar on stderr.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
    from anisotropy_jax import train
    from anisotropy_jax.config import ConfigError

    try:
        if _CONFIG.value is None:
            raise ConfigError("--config: required, e.g. experiments/configs/train_clm.py")
        if not _WORKDIR.value:
            raise ConfigError("--workdir: required")
        config = train.config_from_mapping(_CONFIG.value)
        analysis = dict(_CONFIG.value.get("analysis", {}))
        for key in analysis:
            if key not in ("run", "batch_size", "seed"):
                raise ConfigError(f"analysis.{key}: unknown field; known fields are "
                                  f"['batch_size', 'run', 'seed']")
        if not (isinstance(analysis.get("batch_size", 16), int)
                and analysis.get("batch_size", 16) >= 2):
            raise ConfigError(f"analysis.batch_size: must be an integer >= 2, got "
                              f"{analysis.get('batch_size')!r}")
        train.check_devices(config)
        from anisotropy_jax import data as data_lib
        data_lib.BatchIterator(config.data)  # loads the corpus and checks the split, no compile
    except (ConfigError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    try:
        summary = train.train(config, _WORKDIR.value, progress=_PROGRESS.value,
                              extra_config={"analysis": analysis})
    except ConfigError as error:  # e.g. the workdir holds a different run
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    print(f"trained {config.objective} for {summary['final_step']} steps: loss "
          f"{summary['first_loss']:.4f} -> {summary['final_loss']:.4f}; val "
          f"{summary['eval'][0]['val_loss']:.4f} -> {summary['eval'][-1]['val_loss']:.4f}")
    if analysis.get("run", True):
        from anisotropy_jax import dynamics
        out = dynamics.analyze_and_write(_WORKDIR.value, analysis.get("batch_size", 16),
                                           analysis.get("seed", 0), progress=_PROGRESS.value)
        for name, value in out.get("trends", {}).items():
            if isinstance(value, dict) and "holds" in value:
                print(f"{name}: holds={value['holds']}")
        print(f"wrote {pathlib.Path(_WORKDIR.value) / 'results.json'}")


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags_or_exit)
