"""Config of the untrained-block bias sweep (docs/SCIENCE.md "The untrained-block experiment").

Run (default = the docs/SCIENCE.md protocol: one BERT-base post-LN layer at N(0, 0.02²) init, B = 16,
L = 128, 3 seeds, s = 0 and 2^-2 … 2^12 in half-octave steps):

  anisotropy-jax sweep --workdir=runs/bias_sweep
  python experiments/bias_sweep.py --config=experiments/configs/bias_sweep.py \
      --workdir=runs/bias_sweep

Variants (`--config=sweep:VARIANT`, or `--config=experiments/configs/bias_sweep.py:VARIANT`):
  smoke           tiny block and grid, for CI (seconds)
  pre_ln          GPT-2-style pre-LN layer (LayerNorm eps 1e-5)
  lecun           Flax's default lecun_normal init instead of N(0, 0.02²)
  attention_only  the attention sublayer alone (post-LN, no MLP)
  post_vs_pre     post-LN and pre-LN into shared figures (compare_field = norm_position)
  init_std        N(0, σ²) for σ in 0.01, 0.02, 0.05 into shared figures
  temperature     logit temperature τ in 0.5, 1, 2 into shared figures
  dense_1024      1,024 bias norms (0 and 1,023 log-spaced in [2^-2, 2^12]), B = 32, 1 seed:
                  the memory check (chunk_size bounds the points in flight)
  control         biased inputs x = z + s·u and the norm-matched control x = z·√(1 + s²/d) into
                  shared figures (compare_field = inputs; same weights, seeds and grid)
  fixed_norm      biased inputs and the fixed-norm control x = (z + s·u)/√(1 + s²/d) (the shared
                  direction without the norm growth), shared figures
  per_sequence    biased inputs and the per-sequence control x_b = z_b + s·u_b (one direction per
                  sequence: shared within a sequence only), shared figures
  controls        all four side by side: biased, norm_matched, fixed_norm, per_sequence
                  (docs/BIAS_SWEEP.md "The controls"; `:pre_ln+controls` for the pre-LN block)
  normalizations  every attention normalisation (softmax, off_by_one, sigmoid, softpick,
                  clipped_softmax) and softmax with the head-wise output gate, each on the biased
                  inputs and the norm-matched control (12 sweeps, same weights, seeds and grid),
                  with the attention mass, sink rate and no-op score (docs/BIAS_SWEEP.md
                  "Softmax alternatives at init"; `:smoke+normalizations` for CI)
Variants combine with '+', e.g. `:smoke+post_vs_pre`. Any field can be overridden on the command
line, e.g. `--config.num_seeds=5 --config.model.init_std=0.05 --config.chunk_size=4`.
Fields, defaults and their meaning: SweepConfig and BlockConfig (`model`) in anisotropy_jax/config
(`sweep_config_dict`: top-level `precision`, `compare_field`, `compare_values`);
`anisotropy-jax sweep --help` lists them.
"""
import ml_collections

from anisotropy_jax.config import BlockConfig, SweepConfig, sweep_config_dict, with_variants

# Every inputs kind, the biased inputs first (config/sweep.py INPUTS).
CONTROLS = ("biased", "norm_matched", "fixed_norm", "per_sequence")
# The normalisations side by side (models/attention.py NORMALIZATIONS; the gate with softmax),
# each on the biased inputs and the norm-matched control.
NORMALIZATION_RUNS = tuple((name, gate, kind) for name, gate in (
    ("softmax", False), ("off_by_one", False), ("sigmoid", False), ("softpick", False),
    ("clipped_softmax", False), ("softmax", True)) for kind in ("biased", "norm_matched"))
DENSE_1024_BIAS_NORMS = (0.0,) + tuple(2.0 ** (-2 + 14 * k / 1022) for k in range(1023))
# The fields each variant sets (`with_variants`; a nested one by its dotted path).
SETTINGS = {
    "smoke": {"model.d_model": 64, "model.num_heads": 4, "model.d_ff": 128, "batch_size": 4,
              "seq_len": 16, "num_seeds": 2,
              "bias_norms": (0.0, 1.0, 4.0, 16.0, 64.0, 256.0, 1024.0), "chunk_size": 8},
    "pre_ln": {"model.norm_position": "pre", "model.layer_norm_eps": 1e-5},
    "lecun": {"model.init": "lecun"},
    "attention_only": {"model.use_mlp": False},
    "post_vs_pre": {"compare_field": "norm_position", "compare_values": ("post", "pre")},
    "init_std": {"compare_field": "init_std", "compare_values": (0.01, 0.02, 0.05)},
    "temperature": {"compare_field": "logit_temperature", "compare_values": (0.5, 1.0, 2.0)},
    "dense_1024": {"bias_norms": DENSE_1024_BIAS_NORMS, "batch_size": 32, "num_seeds": 1},
    "control": {"compare_field": "inputs", "compare_values": ("biased", "norm_matched")},
    "fixed_norm": {"compare_field": "inputs", "compare_values": ("biased", "fixed_norm")},
    "per_sequence": {"compare_field": "inputs", "compare_values": ("biased", "per_sequence")},
    "controls": {"compare_field": "inputs", "compare_values": CONTROLS},
    "normalizations": {"compare_field": "attention_normalization,attention_output_gate,inputs",
                       "compare_values": NORMALIZATION_RUNS, "sink_metrics": True},
}
VARIANTS = tuple(SETTINGS)

# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": (SweepConfig, sweep_config_dict), "model": BlockConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """SweepConfig's defaults and fields (anisotropy_jax/config), then the variants of `arg`."""
    return with_variants(sweep_config_dict(), arg, VARIANTS, SETTINGS, combine=True)
