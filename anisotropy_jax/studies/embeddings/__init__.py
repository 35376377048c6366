"""Machina & Mercer's object: the partition isotropy of the embedding matrices of GPT-NeoX-style
causal LMs trained from scratch on a byte-level BPE vocabulary, at several widths, along
training (docs/EMBEDDINGS.md; docs/SCIENCE.md, "Claims and where they stand").

  tokens  the BPE vocabulary (`tokenizers`, trained on the training split) and token streams
  train   the model (`models.transformer.Transformer` as GPT-NeoX, untied LM head), its
          training with the training study's step, and the per-checkpoint measurement
  study   `run(config) -> EmbeddingsResult` (numpy; no writes), and the study protocol
          (`STUDY`: experiments/embeddings.py)
  report  `write(result, workdir, provenance)`, `format_report`, `format_table`
"""
from anisotropy_jax.protocol import Study
from anisotropy_jax.studies.embeddings import study as _study
from anisotropy_jax.studies.embeddings.study import EmbeddingsResult, devices, run
from anisotropy_jax.studies.embeddings.train import (CONTROL, GAIN_KEYS, MATRICES, STATS,
                                                     Checkpoint, measure_params,
                                                     transformer_config)

STUDY = Study(_study.validate, _study.run_study, _study.write, _study.format_study)

__all__ = ["CONTROL", "GAIN_KEYS", "MATRICES", "STATS", "STUDY", "Checkpoint", "EmbeddingsResult", "devices",
           "measure_params", "run", "transformer_config"]
