"""The per-checkpoint query/key analysis of a training run (docs/TRAINING.md; docs/SCIENCE.md,
"The training-dynamics experiment").

  analysis  `run(workdir, analysis_config) -> DynamicsResult`: every readable checkpoint of the
            run on one fixed validation batch; the jitted per-checkpoint metrics
  trends    the Spearman correlation of entropy with |q̄·k̄|/√Dh and the expected trends
  report    dynamics.npz, figures, results.json (last), and the printed trend lines
"""
from anisotropy_jax.studies.dynamics import report
from anisotropy_jax.studies.dynamics.analysis import (HEAD_METRICS, LAYER_METRICS,
                                                      DynamicsResult, analysis_tokens,
                                                      head_metrics, load_run_config,
                                                      make_analysis_fn, run)
from anisotropy_jax.studies.dynamics.report import format_report, write
from anisotropy_jax.studies.dynamics.trends import expected_trends, spearman_entropy_vs_qk

__all__ = ["HEAD_METRICS", "LAYER_METRICS", "DynamicsResult", "analysis_tokens",
           "expected_trends", "format_report", "head_metrics", "load_run_config",
           "make_analysis_fn", "report", "run", "spearman_entropy_vs_qk", "write"]
