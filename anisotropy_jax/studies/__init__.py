"""The studies (the top layer, .importlinter).

Each is `run(config, ...) -> Result` (numpy arrays and scalars, no file writes) plus
`report.write(result, workdir, provenance)` (results.json, npz, figures) and, where they exist,
its closed forms.

  sweep       the untrained-block bias sweep (docs/BIAS_SWEEP.md)
  training    byte-level LMs trained from scratch with log-spaced checkpoints (docs/TRAINING.md)
  dynamics    the per-checkpoint query/key analysis of a training run (docs/TRAINING.md)
  pretrained  layer-wise anisotropy and drift of pretrained checkpoints (docs/PRETRAINED.md)
"""
