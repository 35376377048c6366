"""The per-checkpoint query/key analysis of a training run (docs/TRAIN.md; docs/SCIENCE.md,
"The training-dynamics experiment").

  analysis  `run(workdir, analysis_config) -> DynamicsResult`: every readable checkpoint of the
            run on one fixed validation batch; the jitted per-checkpoint metrics
  trends    per checkpoint, Spearman ρ across heads of entropy with the key-dependent logit
            term; the expected trends along the checkpoints
  report    dynamics.npz, figures, results.json (last), and the printed trend lines
  seeds     several seeds of one configuration: per-checkpoint mean and 95% t-interval over
            seeds (experiments/seeds.py)
  study     the study protocol: STUDY (the analysis, experiments/dynamics.py),
            TRAINING_STUDY (train then analyse, experiments/train.py), SEEDS_STUDY
            (experiments/seeds.py)
"""
from anisotropy_jax.studies.train import report, seeds
from anisotropy_jax.studies.train.analysis import (HEAD_METRICS, LAYER_METRICS,
                                                      DynamicsResult, analysis_tokens,
                                                      head_metrics, load_run_config,
                                                      make_analysis_fn, run)
from anisotropy_jax.studies.train.report import format_report, write
from anisotropy_jax.studies.train.study import ANALYSIS as STUDY
from anisotropy_jax.studies.train.study import SEEDS as SEEDS_STUDY
from anisotropy_jax.studies.train.study import TRAINING as TRAINING_STUDY
from anisotropy_jax.studies.train.study import analysed
from anisotropy_jax.studies.train.trends import (entropy_correlations_across_heads,
                                                    expected_trends)

__all__ = ["HEAD_METRICS", "LAYER_METRICS", "DynamicsResult", "SEEDS_STUDY", "STUDY",
           "TRAINING_STUDY", "analysed", "analysis_tokens", "entropy_correlations_across_heads",
           "expected_trends", "format_report", "head_metrics", "load_run_config",
           "make_analysis_fn", "report", "run", "seeds", "write"]
