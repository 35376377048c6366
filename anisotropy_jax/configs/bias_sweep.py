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
Variants combine with '+', e.g. `:smoke+post_vs_pre`. Any field can be overridden on the command
line, e.g. `--config.num_seeds=5 --config.model.init_std=0.05 --config.chunk_size=4`.
Fields, defaults and their meaning: SweepConfig and BlockConfig (`model`) in anisotropy_jax/config
(`sweep_config_dict`: top-level `precision`, `compare_field`, `compare_values`);
`anisotropy-jax sweep --help` lists them.
"""
import ml_collections

from anisotropy_jax.config import BlockConfig, SweepConfig, sweep_config_dict

DENSE_1024_BIAS_NORMS = (0.0,) + tuple(2.0 ** (-2 + 14 * k / 1022) for k in range(1023))
VARIANTS = ("smoke", "pre_ln", "lecun", "attention_only", "post_vs_pre", "init_std",
            "temperature", "dense_1024", "control")

# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": (SweepConfig, sweep_config_dict), "model": BlockConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    config = sweep_config_dict()  # SweepConfig's defaults and fields (anisotropy_jax/config)
    for variant in (arg or "").split("+"):
        _apply_variant(config, variant.strip())
    return config


def _apply_variant(config: ml_collections.ConfigDict, variant: str) -> None:
    if variant in ("", "default"):
        return
    if variant == "smoke":
        config.model.d_model, config.model.num_heads, config.model.d_ff = 64, 4, 128
        config.batch_size, config.seq_len, config.num_seeds = 4, 16, 2
        config.bias_norms = (0.0, 1.0, 4.0, 16.0, 64.0, 256.0, 1024.0)
        config.chunk_size = 8
    elif variant == "pre_ln":
        config.model.norm_position, config.model.layer_norm_eps = "pre", 1e-5
    elif variant == "lecun":
        config.model.init = "lecun"
    elif variant == "attention_only":
        config.model.use_mlp = False
    elif variant == "post_vs_pre":
        config.compare_field, config.compare_values = "norm_position", ("post", "pre")
    elif variant == "init_std":
        config.compare_field, config.compare_values = "init_std", (0.01, 0.02, 0.05)
    elif variant == "temperature":
        config.compare_field, config.compare_values = "logit_temperature", (0.5, 1.0, 2.0)
    elif variant == "control":
        config.compare_field, config.compare_values = "inputs", ("biased", "norm_matched")
    elif variant == "dense_1024":
        config.bias_norms, config.batch_size, config.num_seeds = DENSE_1024_BIAS_NORMS, 32, 1
    else:
        raise ValueError(f"config: unknown variant {variant!r}; choose from {VARIANTS}")
