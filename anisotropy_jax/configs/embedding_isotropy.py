"""Config of the embedding-isotropy study (docs/EMBEDDINGS.md): Machina & Mercer's partition
isotropy of the input, output and gain-scaled output embeddings of GPT-NeoX-style causal LMs
trained on a byte-level BPE vocabulary, per checkpoint and width.

Run (default: widths 32/64/128, 2 layers, vocabulary 4,096, 400 steps, 5 seeds; 418 s on the 16
CPU cores of a device machine, docs/results/embeddings/README.md):

  anisotropy-jax embeddings --workdir=runs/embeddings
  python experiments/embedding_isotropy.py --config=experiments/configs/embedding_isotropy.py \
      --workdir=runs/embeddings

Variants (`--config=embeddings:VARIANT` or `experiments/configs/embedding_isotropy.py:VARIANT`):
  smoke  vocabulary 300 on the first 200,000 characters, widths 16/32, 1 layer, 12 steps, 1 seed
         (CI)
  gpu    widths 128/256/512, 4 layers, vocabulary 8,192, L = 256, batch 32, 1,500 steps,
         5 seeds, TF32 matmuls (sized for one H100: 370 s there)
Any field can be overridden, e.g. `--config.widths='(64, 128)' --config.steps=800
--config.checkpoint_steps='(0, 100, 800)' --config.optim.learning_rate=1e-3`.
Fields, defaults and their meaning: EmbeddingsConfig in anisotropy_jax/config/embeddings.py
(`anisotropy-jax embeddings --help` lists them).
"""
import ml_collections

from anisotropy_jax.config import EmbeddingsConfig, config_dict, with_variants

VARIANTS = ("default", "smoke", "gpu")
SETTINGS = {
    "smoke": {"vocab_size": 300, "corpus_chars": 200_000, "chunk_len": 2048, "widths": (16, 32),
              "head_dim": 8, "num_layers": 1, "seq_len": 16, "batch_size": 4, "steps": 12,
              "eval_batches": 1, "checkpoint_steps": (0, 4, 12), "optim.warmup_steps": 4,
              "seeds": (0,)},
    "gpu": {"vocab_size": 8192, "widths": (128, 256, 512), "head_dim": 64, "num_layers": 4,
            "seq_len": 256, "batch_size": 32, "steps": 1500, "eval_batches": 8,
            "checkpoint_steps": (0, 10, 30, 100, 300, 1000, 1500), "seeds": (0, 1, 2, 3, 4),
            "precision": "default", "optim.learning_rate": 2e-3, "optim.warmup_steps": 100},
}
# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": EmbeddingsConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """EmbeddingsConfig's defaults, then the variant `arg`."""
    return with_variants(config_dict(EmbeddingsConfig), arg, VARIANTS, SETTINGS,
                         error="config: unknown variant {!r}; choose one of {}")
