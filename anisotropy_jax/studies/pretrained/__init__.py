"""Layer-wise anisotropy and drift of pretrained checkpoints (any family of models/registry.py)
against their untrained re-initialisation (docs/SCIENCE.md, "Pretrained models"; docs/PRETRAINED.md).

  text      sentences (a text file or the Shakespeare speeches), the tokenizer with padding off,
            `encode`, length-bucketed padded batches (`make_batches`)
  analysis  `validate(config) -> Inputs` (every check, before any compilation),
            `run(config) -> PretrainedResult`: hidden states, per-layer metrics, correlations,
            the untrained baseline
  states    the one forward loop of text, images and audio (`collect_states`: the token cloud of
            each hidden state) and its metrics (`state_metrics`, `layer_values`, `correlations`)
  media_inputs  images and audio for image/audio models (`--config.inputs=DIR`; the offline
            photographs and synthetic speech)
  embeddings  partition isotropy of the input/output embeddings (raw, centred, gain-scaled; both
            sign conventions of metrics.embedding_isotropy)
  cross_modal   every offline model of every modality on one plot, and a table
  report    `write(result, workdir, provenance)` (config.json, sentences.txt, report.txt,
            figures, npz, results.json last) and `format_report(doc)`
  study     the study protocol (`STUDY`: experiments/pretrained.py)

The checkpoint itself (config mapping, weights, forward) is `anisotropy_jax.models.registry` and
the family modules it finds.
"""
from anisotropy_jax.studies.pretrained.analysis import (PretrainedModel, PretrainedResult,
                                                        load_model, run, validate)
from anisotropy_jax.protocol import Study
from anisotropy_jax.studies.pretrained import study as _study
from anisotropy_jax.studies.pretrained.report import format_report, write

STUDY = Study(_study.validate, _study.run, write, _study.format_report)

__all__ = ["PretrainedModel", "PretrainedResult", "STUDY", "format_report", "load_model", "run",
           "validate", "write"]
