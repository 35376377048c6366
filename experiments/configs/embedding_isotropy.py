"""Config of the embedding-isotropy study (docs/EMBEDDINGS.md): Machina & Mercer's partition
isotropy of the input, output and gain-scaled output embeddings of GPT-NeoX-style causal LMs
trained on a byte-level BPE vocabulary, per checkpoint and width.

Run (default: widths 32/64/128, 2 layers, vocabulary 4,096, 400 steps, 3 seeds; a few minutes on
a 2-core CPU):

  python experiments/embedding_isotropy.py --config=experiments/configs/embedding_isotropy.py \
      --workdir=runs/embeddings

Variants (`--config=experiments/configs/embedding_isotropy.py:VARIANT`):
  smoke  vocabulary 300 on the first 200,000 characters, widths 16/32, 1 layer, 12 steps, 1 seed
         (CI)
  gpu    widths 128/256/512, 4 layers, vocabulary 8,192, L = 256, batch 32, 1,500 steps,
         3 seeds, TF32 matmuls (sized for one H100: estimated 3-4 minutes, not yet measured)
Any field can be overridden, e.g. `--config.widths='(64, 128)' --config.steps=800
--config.checkpoint_steps='(0, 100, 800)' --config.optim.learning_rate=1e-3`.
Fields: anisotropy_jax/config/embeddings.py.
"""
import ml_collections

VARIANTS = ("default", "smoke", "gpu")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = arg or "default"
    if variant not in VARIANTS:
        raise ValueError(f"config: unknown variant {variant!r}; choose one of {VARIANTS}")
    c = ml_collections.ConfigDict()
    c.vocab_size = 4096                   # BPE entries (256 bytes + merges); N ≫ D
    c.corpus_chars = 0                    # first N characters of the corpus (0 = all, ~5 MB)
    c.chunk_len = 4096                    # characters per split chunk
    c.val_fraction = 0.05                 # held-out chunks (validation loss; not in the BPE)
    c.data_seed = 0                       # split seed
    c.widths = (32, 64, 128)              # residual widths D
    c.head_dim = 16                       # heads = D / head_dim
    c.num_layers = 2
    c.ff_ratio = 4                        # d_ff = ff_ratio · D
    c.rotary_pct = 0.25                   # GPT-NeoX / Pythia
    c.init_std = 0.02                     # N(0, σ²) kernels and embeddings
    c.seq_len = 64
    c.batch_size = 16
    c.steps = 400
    c.checkpoint_steps = (0, 25, 50, 100, 200, 400)
    c.eval_batches = 4                    # fixed validation batches of batch_size windows
    c.seeds = (0, 1, 2)                   # model init and batch order (intervals over seeds)
    c.precision = "highest"               # 'highest' | 'default' (TF32 on GPUs) | 'bfloat16'
    c.optim = ml_collections.ConfigDict()
    c.optim.learning_rate = 3e-3
    c.optim.warmup_steps = 50
    c.optim.end_lr_ratio = 0.1
    c.optim.weight_decay = 0.01
    c.optim.b1, c.optim.b2, c.optim.eps = 0.9, 0.98, 1e-9
    c.optim.grad_clip = 1.0
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
