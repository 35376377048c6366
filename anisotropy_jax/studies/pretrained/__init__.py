"""Layer-wise anisotropy and drift of pretrained checkpoints (any family of models/registry.py)
against their untrained re-initialisation (docs/SCIENCE.md, "Pretrained models"; docs/PRETRAINED.md).

  text      sentences (a text file or the Shakespeare speeches), the tokenizer with padding off,
            `encode`, length-bucketed padded batches (`make_batches`)
  analysis  `validate(config) -> Inputs` (every check, before any compilation),
            `run(config) -> PretrainedResult`: hidden states, per-layer metrics, correlations,
            the untrained baseline
  states    the token cloud of each hidden state and its metrics (`cloud_metrics`,
            `layer_metrics`, `correlations`)
  media_inputs  images and audio for image/audio models (`--config.inputs=DIR`)
  embeddings  partition isotropy of the input/output embeddings (raw, centred, gain-scaled; both
            sign conventions of metrics.embedding_isotropy)
  cross_modal   every offline model of every modality on one plot, and a table
  report    `write(result, workdir, provenance)` (config.json, sentences.txt, report.txt,
            figures, npz, results.json last) and `format_report(result)`

The checkpoint itself (config mapping, weights, forward) is `anisotropy_jax.models.registry` and
the family modules it finds.
"""
from anisotropy_jax.studies.pretrained.analysis import (PretrainedModel, PretrainedResult,
                                                        load_model, run, validate)
from anisotropy_jax.studies.pretrained.report import format_report, write

__all__ = ["PretrainedModel", "PretrainedResult", "format_report", "load_model", "run",
           "validate", "write"]
