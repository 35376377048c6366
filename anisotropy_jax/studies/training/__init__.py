"""Training small byte-level LMs from scratch, with every log-spaced step checkpointed
(docs/TRAIN.md; the data of docs/SCIENCE.md, "The training-dynamics experiment").

Two models from `models.transformer.Transformer` (`TrainConfig.transformer_config`):
  mlm  BERT-style post-LN encoder (embedding LayerNorm, no final LayerNorm), masked-LM loss on the
       15% selected positions (80/10/10 mask/random/keep, `data.mlm_mask`).
  clm  GPT-style pre-LN causal LM with a final LayerNorm, next-byte loss on every position.
Both: learned position embeddings, tied or untied output embedding (`model.tie_embeddings`).

  optimizers  the optimiser of `optim.optimizer` (AdamW, Muon, SGD, AdamW in a rotated basis),
        warmup + cosine, clipping
  step  loss, model state, the jitted update, the data mesh
  logs  config.json, metrics.jsonl, eval.jsonl: writing, reading, truncating on resume
  loop  `train(config, workdir) -> TrainSummary`: train or resume, checkpoint, stop on non-finite
  seeds `train_seeds(configs, workdirs)`: several seeds as one vmapped program, each run as `train`'s
  learned  did the model learn? The one rule a verdict that needs a trained model applies first
        (final validation loss below (1 − MARGIN)·ln V, else "not testable")
"""
from anisotropy_jax.studies.training.logs import (read_evals, read_jsonl, read_metrics,
                                                  read_train_config)
from anisotropy_jax.studies.training.loop import HANG_ENV, TrainSummary, format_summary, train
from anisotropy_jax.studies.training.seeds import train_seeds
from anisotropy_jax.studies.training.optimizers import learning_rate_schedule, optimizer
from anisotropy_jax.studies.training.step import (abstract_state, check_devices, eval_loss,
                                                  init_state, train_step, weighted_cross_entropy)

__all__ = ["HANG_ENV", "TrainSummary", "abstract_state", "check_devices", "eval_loss",
           "format_summary", "init_state", "learning_rate_schedule", "optimizer", "read_evals",
           "read_jsonl", "read_metrics", "read_train_config", "train", "train_seeds", "train_step",
           "weighted_cross_entropy"]
