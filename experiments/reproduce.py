"""One command for every study and a verdict on each claim of docs/SCIENCE.md (docs/REPORT.md).

  python experiments/reproduce.py --config=experiments/configs/reproduce.py[:smoke|:full] \
      --workdir=DIR [--report=docs/REPORT.md] [--config.FIELD=VALUE ...]

Runs the bias sweep with its norm-matched control, the seeded training runs, the pretrained study
on every installed model, the vision/speech measurement and the depth study, each into DIR/<study>/
by its own report.write, then writes DIR/REPORT.md (with --report also a copy there, its figures
and results.json files copied beside it). A bad flag or config exits with status 2 and one line
naming the field, before anything is compiled; a non-finite metric exits with status 1.
"""
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from anisotropy_jax import cli, config, results
from anisotropy_jax.studies import reproduce

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "experiments/configs/reproduce.py[:smoke|:full]", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder (created if missing).")
_REPORT = flags.DEFINE_string("report", None, "Also write the report here (e.g. docs/REPORT.md).")


def main(argv: list[str]) -> None:
    del argv
    logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint save at INFO
    workdir = cli.workdir(_WORKDIR.value)
    cli.require_flag(_CONFIG.value, "config", "experiments/configs/reproduce.py:smoke")
    with cli.user_errors():
        cfg = config.reproduce_config_from_mapping(_CONFIG.value)  # validated: nothing compiled
        provenance = results.Provenance()
        runs = reproduce.run_all(cfg, workdir)
        verdicts = reproduce.all_verdicts({k: r.results for k, r in runs.items()},
                                          {k: r.reason for k, r in runs.items()})
        command = " ".join(["python"] + sys.argv)
        reproduce.report.write(runs, verdicts, workdir, provenance, command, _REPORT.value)
    print(reproduce.report.verdict_summary(verdicts))
    print(f"\nwrote {workdir / reproduce.report.REPORT_FILE}"
          + (f" and {_REPORT.value}" if _REPORT.value else ""))


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags_or_exit)
