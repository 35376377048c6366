"""Benchmark config: the bias sweep against PyTorch peers and the device's matmul rate.

Run (GPU, the reference workload: BERT-base block, B = 32, L = 128, 256 bias norms, TF32):
  python -m benchmarks.benchmark --config=benchmarks/configs/benchmark.py --workdir=runs/bench
  python -m benchmarks.benchmark --config=benchmarks/configs/benchmark.py --workdir=runs/bench \
      --config.precision=bfloat16
Variants (the `:arg` suffix):
  :cpu    the same block on the 2-core CPU with 8 bias norms and B = 8 (a few minutes)
  :smoke  tiny shapes, CPU, seconds (CI)
Override any field with --config.FIELD=VALUE.
"""
import ml_collections

VARIANTS = ("default", "cpu", "smoke")


def get_config(arg=None):
    variant = arg or "default"
    if variant not in VARIANTS:
        raise ValueError(f"config variant: unknown variant {variant!r}; choose one of {VARIANTS}")
    c = ml_collections.ConfigDict()
    c.model = ml_collections.ConfigDict()
    c.model.d_model = 768  # BERT-base width
    c.model.num_heads = 12  # heads of 64
    c.model.d_ff = 3072  # MLP width
    c.model.init_std = 0.02  # N(0, init_std²) weights (BERT init) on both sides
    c.model.layer_norm_eps = 1e-12  # BERT LayerNorm epsilon

    c.batch_size = 32  # sequences per grid point
    c.seq_len = 128  # tokens per sequence
    c.num_bias_norms = 256  # bias norms s of the timed sweep (log-spaced, 0 first)
    c.chunk = 32  # bias norms per compiled call (JAX) and per folded forward (PyTorch)
    # 'highest' (true float32) | 'default' (TF32 on NVIDIA GPUs; 'tf32' is accepted for it) |
    # 'bfloat16', the same on every side
    c.precision = "default"
    c.attention_impl = "auto"  # 'auto' (fused Pallas kernel on GPU below 'highest') | 'xla' | 'pallas'
    c.repeats = 5  # timed repetitions of every variant (median reported)
    c.seed = 0  # seed of weights, z and u

    c.jax_loop = True  # time the Python loop of jitted single-s calls
    c.torch = True  # time the PyTorch peers when torch and transformers are installed
    c.torch_variants = ("loop", "folded", "folded_compiled")  # which PyTorch peers
    c.matmul_size = 8192  # n of the n×n×n matmul that measures the device's rate
    c.memory_chunks = (8, 16, 32, 64)  # chunk sizes whose compiled memory footprint is reported
    c.device_counts = (1, 2, 4)  # sweep throughput on the first k devices (those that exist)

    c.metrics_at_scale = True  # time average cosine and IsoScore at scale
    c.cosine_n = 1_000_000  # vectors for the average cosine
    c.isoscore_n = 100_000  # vectors for IsoScore
    c.max_blocked_n = 1_000_000  # largest N of the N×N-in-blocks baseline (else extrapolated)

    if variant == "cpu":
        c.batch_size = 8
        c.num_bias_norms = 8
        c.chunk = 8  # one projection z·W per seed for all 8 (the sweep runs them one at a time)
        c.precision = "highest"
        c.repeats = 3
        c.torch_variants = ("loop", "folded")  # torch.compile on CPU compiles C++ for minutes
        c.matmul_size = 2048
        c.memory_chunks = (2, 4, 8)
        c.device_counts = (1,)
        c.cosine_n = 1_000_000
        c.isoscore_n = 100_000
        c.max_blocked_n = 16_384
    elif variant == "smoke":
        c.model.d_model = 64
        c.model.num_heads = 4
        c.model.d_ff = 128
        c.batch_size = 2
        c.seq_len = 16
        c.num_bias_norms = 8
        c.chunk = 4
        c.precision = "highest"
        c.repeats = 2
        c.torch_variants = ("loop", "folded")
        c.matmul_size = 256
        c.memory_chunks = (2, 4)
        c.device_counts = (1, 2)
        c.cosine_n = 4096
        c.isoscore_n = 2048
        c.max_blocked_n = 1024
    return c
