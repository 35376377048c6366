"""A series of checkpoints of one model, measured against the training step (docs/PRETRAINED.md,
"Checkpoint series"); and our own training runs exported as such a series.

  layout    the series directory (`step_N/`, `stepN/`, `checkpoint-N/`, `N/` sub-folders, each a
            Hugging Face directory of one registered family), every check before compilation
  analysis  `validate(config) -> Inputs`, `run(config) -> SeriesResult`: per checkpoint the
            per-layer metrics of the pretrained study and the per-head query/key analysis of the
            dynamics study, on one fixed set of sentences
  export    `export_training_run(workdir, out_dir)`: experiments/train.py checkpoints → bert
            (mlm) / gpt2 (clm) directories with a byte-level tokenizer.json
  report    `write(result, workdir, provenance)` (figures, series.npz, results.json last) and
            `format_report(doc)`
  study     the study protocol (`STUDY`: experiments/series.py)
"""
from anisotropy_jax.studies.series.analysis import (HEAD_MODEL_TYPES, SeriesResult, run,
                                                    validate)
from anisotropy_jax.studies.series.export import export_training_run
from anisotropy_jax.studies.series.layout import SeriesError, check, scan, step_of
from anisotropy_jax.protocol import Study
from anisotropy_jax.studies.series import study as _study
from anisotropy_jax.studies.series.report import format_report, write

STUDY = Study(_study.validate, _study.run, write, _study.format_report)

__all__ = ["HEAD_MODEL_TYPES", "STUDY", "SeriesError", "SeriesResult", "check",
           "export_training_run", "format_report", "run", "scan", "step_of", "validate", "write"]
