"""Per-checkpoint query/key analysis of a training run made by experiments/train.py.

  python experiments/qk_dynamics.py --workdir=runs/clm
  python experiments/qk_dynamics.py --workdir=runs/clm \
      --config=experiments/configs/qk_dynamics.py:smoke

Reads DIR/config.json and DIR/checkpoints/, writes DIR/results.json (provenance, config, the
per-checkpoint metrics, the Spearman correlation of entropy with |mean q·mean k|, and the expected
trends of docs/SCIENCE.md with their numbers), DIR/dynamics.npz and DIR/figures/*.png.
"""
import pathlib

from absl import app, flags, logging
from ml_collections import config_flags

from anisotropy_jax import cli, config as config_lib, results
from anisotropy_jax.studies import dynamics

_HERE = pathlib.Path(__file__).resolve().parent
_CONFIG = config_flags.DEFINE_config_file(
    "config", str(_HERE / "configs" / "qk_dynamics.py"), "Analysis config file[:variant].",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Workdir of a training run (experiments/train.py).")
_PROGRESS = flags.DEFINE_bool("progress", True, "Print one line per analysed checkpoint.")


def main(argv):
    del argv  # cli.parse_flags_or_exit refuses extra arguments
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
    workdir = cli.workdir(_WORKDIR.value)
    with cli.user_errors():
        analysis = config_lib.from_mapping(config_lib.AnalysisConfig, _CONFIG.value)
        dynamics.load_run_config(workdir)  # the run's config is valid: before any compilation
        provenance = results.Provenance()
        result = dynamics.run(workdir, analysis, progress=_PROGRESS.value)
        dynamics.write(result, workdir, provenance)
    print(dynamics.format_report(result))
    print(f"wrote {workdir / 'results.json'}")


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags_or_exit)
