"""Per-checkpoint query/key analysis of a training run made by experiments/train.py.

  python experiments/qk_dynamics.py --workdir=runs/clm
  python experiments/qk_dynamics.py --workdir=runs/clm --config=experiments/configs/qk_dynamics.py:smoke

Reads DIR/config.json and DIR/checkpoints/, writes DIR/results.json (provenance, config, the
per-checkpoint metrics, the Spearman correlation of entropy with |mean q·mean k|, and the SCIENCE.md
expected trends with their numbers), DIR/dynamics.npz and DIR/figures/*.png.
"""
import pathlib
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from anisotropy_jax import cli

_HERE = pathlib.Path(__file__).resolve().parent
_CONFIG = config_flags.DEFINE_config_file(
    "config", str(_HERE / "configs" / "qk_dynamics.py"), "Analysis config file[:variant].",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Workdir of a training run (experiments/train.py).")
_PROGRESS = flags.DEFINE_bool("progress", True, "Print one line per analysed checkpoint.")


def _check(config) -> None:
    from anisotropy_jax.config import ConfigError

    known = {"batch_size", "seed"}
    for key in config:
        if key not in known:
            raise ConfigError(f"{key}: unknown field; known fields are {sorted(known)}")
    if not (isinstance(config.batch_size, int) and config.batch_size >= 2):
        raise ConfigError(f"batch_size: must be an integer >= 2 (cross-sequence pairs), got "
                          f"{config.batch_size!r}")
    if not (isinstance(config.seed, int) and config.seed >= 0):
        raise ConfigError(f"seed: must be a non-negative integer, got {config.seed!r}")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
    from anisotropy_jax.config import ConfigError

    try:
        if not _WORKDIR.value:
            raise ConfigError("--workdir: required (the workdir of a training run)")
        _check(_CONFIG.value)
        if not (pathlib.Path(_WORKDIR.value) / "config.json").exists():
            raise ConfigError(f"--workdir: {_WORKDIR.value}/config.json not found; not a "
                              f"training run of experiments/train.py")
        from anisotropy_jax import dynamics
        dynamics.load_run_config(_WORKDIR.value)  # validates before any compilation
    except (ConfigError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    out = dynamics.analyze_and_write(_WORKDIR.value, _CONFIG.value.batch_size, _CONFIG.value.seed,
                                     progress=_PROGRESS.value)
    trends = out.get("trends", {})
    for name, value in trends.items():
        if isinstance(value, dict) and "holds" in value:
            print(f"{name}: holds={value['holds']} "
                  f"{ {k: v for k, v in value.items() if k not in ('holds',) and not isinstance(v, list)} }")
    print(f"wrote {pathlib.Path(_WORKDIR.value) / 'results.json'}")


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags_or_exit)
