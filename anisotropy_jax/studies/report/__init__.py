"""The one-command reproduction (experiments/report.py): every study through its library API,
then REPORT.md with a verdict on each claim of docs/SCIENCE.md ("Claims and where they stand").

  runner          `run_all(config, workdir)`: each study into WORKDIR/<study>/ via its report.write
                  (the vision/speech study is the cross-modal comparison on its models)
  verdicts        one pure function per claim: holds / does not hold / not measured + criterion
  report          REPORT.md (and a bundled copy, e.g. docs/REPORT.md with docs/results/report/)
  study           the study protocol (`STUDY`: experiments/report.py)
"""
from anisotropy_jax.protocol import Study
from anisotropy_jax.studies.report import report, study as _study, verdicts
from anisotropy_jax.studies.report.runner import StudyRun, run_all
from anisotropy_jax.studies.report.verdicts import CLAIMS, VERDICTS, Verdict, all_verdicts

STUDY = Study(_study.validate, _study.run, _study.write, _study.format_report, quiet_logs=True)

__all__ = ["CLAIMS", "STUDY", "VERDICTS", "StudyRun", "Verdict", "all_verdicts", "report",
           "run_all", "verdicts"]
