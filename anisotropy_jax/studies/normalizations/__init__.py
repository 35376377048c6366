"""The normalisation grid (docs/NORMALIZATIONS.md): causal LMs trained with each attention
normalisation (models/attention.py NORMALIZATIONS) on Shakespeare and on the synthetic
Bigram-Backcopy task (anisotropy_jax/bigram_backcopy.py), several seeds each as one vmapped
program, analysed at every checkpoint: anisotropy, attention sinks, massive activations,
kurtosis and |cos(q̄, k̄)|, summarised per cell with intervals over the seeds.

  grid     one cell: train the seeds, analyse each run, its per-checkpoint scalars (grid_run.json)
  summary  per cell: mean and t-interval over seeds; the markdown table and the figure
  study    STUDY, the protocol's four verbs (`anisotropy-jax normalizations`)
"""
from anisotropy_jax.studies.normalizations.study import STUDY

__all__ = ["STUDY"]
