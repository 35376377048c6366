"""Training-throughput benchmark config: `train:gpu`'s step against its
PyTorch peer (benchmarks/train_torch.py) in one process on one card.

Run (GPU: d = 384, 6 layers, 6 heads, L = 256, batch 64, AdamW, clip 1.0, TF32 and bf16):
  python -m benchmarks.train_throughput --config=benchmarks/configs/train_throughput.py \
      --workdir=runs/train_bench
Variants (the `:arg` suffix):
  :cpu    `train:small` on the 2-core CPU against eager PyTorch (a few minutes)
  :smoke  `train:smoke`, a few steps, CPU, seconds (CI)
Override any field with --config.FIELD=VALUE.
"""
import ml_collections

VARIANTS = ("default", "cpu", "smoke")


def get_config(arg=None):
    variant = arg or "default"
    if variant not in VARIANTS:
        raise ValueError(f"config variant: unknown variant {variant!r}; choose one of {VARIANTS}")
    c = ml_collections.ConfigDict()
    c.train_variant = {"default": "gpu", "cpu": "small", "smoke": "smoke"}[variant]  # train:X
    # global batch (data.batch_size and eval_batch_size); 0 = the variant's. On N devices the
    # batch is split over them: N x the variant's batch compares N devices at equal work per device
    c.batch_size = 0
    c.precisions = ("default", "bfloat16")  # each side at each: TF32 ('default') and bf16
    c.jax_loops = ("async", "sync")  # 'async': the training loop's; 'sync': read back every step
    # JAX: the `model.attention_impl` values timed, each distinct resolved core once: 'auto' (what
    # `anisotropy-jax train` runs), 'xla', 'dot_product' (cuDNN's fused attention on GPUs at bf16,
    # XLA's own elsewhere), 'flash' (the Pallas flash kernels; interpret mode, slow, off GPU);
    # e.g. --config.jax_attention='("dot_product",)'. A core the normalisation rules out is skipped.
    c.jax_attention = ("auto", "xla", "dot_product", "flash")
    # model.attention_normalization of the timed model, e.g. off_by_one, softpick; the PyTorch
    # peer is softmax attention, so it is timed for 'softmax' only
    c.attention_normalization = "softmax"
    # PyTorch: 'eager' and the torch.compile modes; the best is the peer of the targets
    c.torch_modes = ("eager", "default", "reduce-overhead", "max-autotune-no-cudagraphs")
    c.warmup_steps = 20  # untimed steps (compilation, autotuning, CUDA graph capture)
    c.steps = 200  # timed steps per run
    c.repeats = 2  # timed runs per variant (the best is reported)
    c.log_every = 50  # the JAX loop's readback period ('async')
    c.matmul_n = 8192  # n of the n×n×n matmul whose rate the MFU is also quoted against
    if variant == "cpu":
        c.precisions, c.jax_attention, c.torch_modes = ("highest",), ("auto",), ("eager",)
        c.warmup_steps, c.steps, c.matmul_n = 3, 20, 1024
    elif variant == "smoke":
        c.precisions, c.jax_attention, c.torch_modes = ("highest",), ("auto",), ("eager",)
        c.warmup_steps, c.steps, c.repeats, c.log_every, c.matmul_n = 2, 4, 1, 2, 128
    return c
