"""Config of the embedding-isotropy study (docs/EMBEDDINGS.md): Machina & Mercer's partition
isotropy of the input, output and gain-scaled output embeddings of GPT-NeoX-style causal LMs
trained on a byte-level BPE vocabulary, per checkpoint and width.

Run (default: widths 32/64/128, 2 layers, vocabulary 4,096, 400 steps, 3 seeds; a few minutes on
a 2-core CPU):

  anisotropy-jax embeddings --workdir=runs/embeddings
  python experiments/embedding_isotropy.py --config=experiments/configs/embedding_isotropy.py \
      --workdir=runs/embeddings

Variants (`--config=embeddings:VARIANT` or `experiments/configs/embedding_isotropy.py:VARIANT`):
  smoke  vocabulary 300 on the first 200,000 characters, widths 16/32, 1 layer, 12 steps, 1 seed
         (CI)
  gpu    widths 128/256/512, 4 layers, vocabulary 8,192, L = 256, batch 32, 1,500 steps,
         3 seeds, TF32 matmuls (sized for one H100: estimated 3-4 minutes, not yet measured)
Any field can be overridden, e.g. `--config.widths='(64, 128)' --config.steps=800
--config.checkpoint_steps='(0, 100, 800)' --config.optim.learning_rate=1e-3`.
Fields, defaults and their meaning: EmbeddingsConfig in anisotropy_jax/config/embeddings.py
(`anisotropy-jax embeddings --help` lists them).
"""
import ml_collections

from anisotropy_jax.config import EmbeddingsConfig, config_dict

VARIANTS = ("default", "smoke", "gpu")
# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": EmbeddingsConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = arg or "default"
    if variant not in VARIANTS:
        raise ValueError(f"config: unknown variant {variant!r}; choose one of {VARIANTS}")
    c = config_dict(EmbeddingsConfig)  # its defaults
    if variant == "smoke":
        c.vocab_size, c.corpus_chars, c.chunk_len = 300, 200_000, 2048
        c.widths, c.head_dim, c.num_layers = (16, 32), 8, 1
        c.seq_len, c.batch_size, c.steps, c.eval_batches = 16, 4, 12, 1
        c.checkpoint_steps, c.optim.warmup_steps, c.seeds = (0, 4, 12), 4, (0,)
    elif variant == "gpu":
        c.vocab_size = 8192
        c.widths, c.head_dim, c.num_layers = (128, 256, 512), 64, 4
        c.seq_len, c.batch_size, c.steps, c.eval_batches = 256, 32, 1500, 8
        c.checkpoint_steps = (0, 10, 30, 100, 300, 1000, 1500)
        c.seeds, c.precision = (0, 1, 2), "default"
        c.optim.learning_rate, c.optim.warmup_steps = 2e-3, 100
    return c
