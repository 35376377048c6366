"""The studies (the top layer, .importlinter).

Every study offers the protocol of `anisotropy_jax.protocol` as a `Study` value (validate → run →
write → format_report) that `cli.main` drives for its script: `STUDY` of each package, and
`dynamics.TRAINING_STUDY` / `SEEDS_STUDY` for training (which its analysis follows). `run`
returns a Result (numpy arrays and scalars) and reports through the one `Progress`; `write`
writes results.json last. The library functions (`sweep.run`, `depth.run`, `pretrained.run`,
...) are the same code without the script.

  sweep       the untrained-block bias sweep (docs/SWEEP.md)
  depth       untrained stacks against depth and width (docs/DEPTH.md)
  training    byte-level LMs trained from scratch with log-spaced checkpoints (docs/TRAIN.md)
  dynamics    the per-checkpoint query/key analysis of a training run, and several seeds
              (docs/TRAIN.md)
  pretrained  layer-wise anisotropy and drift of pretrained checkpoints of any modality, and the
              cross-modal comparison (docs/PRETRAINED.md, docs/CROSS_MODAL.md)
  modalities  the offline images and speech of the image and audio models
  embeddings  partition isotropy of the embedding matrices of trained BPE LMs (docs/EMBEDDINGS.md)
  series      a series of checkpoints of one model against the step (docs/PRETRAINED.md)
  reproduce   every study and a verdict per claim (docs/REPORT.md)
"""
