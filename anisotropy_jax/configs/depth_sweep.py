"""Config of the depth study (docs/DEPTH.md): untrained stacks of independently initialised
layers on x = z + s·u, metrics after every layer.

Run (default = :bert_base):

  anisotropy-jax depth --config=depth:bert_base --workdir=runs/depth_bert_base
  python experiments/depth_sweep.py --config=experiments/configs/depth_sweep.py:bert_base \
      --workdir=runs/depth_bert_base

Variants (`--config=depth:VARIANT` or `experiments/configs/depth_sweep.py:VARIANT`, combined
with '+'):
  smoke      tiny stacks (D = 32, 3 layers), for CI (seconds)
  cpu        D = 128, 256, 512, 16 layers, B = 4, L = 32: the committed CPU run
  bert_base  12 layers × 768 (BERT-base shapes, float32 'highest'), B = 16, L = 128
  llm        D = 1,024 … 8,192, 48 layers, bfloat16 matmuls, causal, LayerNorm eps 1e-5
  lecun      lecun_normal init (variance 1/fan_in) instead of N(0, 0.02²)
  scaled     residual branches × 1/√(2N) (GPT-2's scaling of the output projections)
Any field can be overridden, e.g. `--config.num_layers=24 --config.widths='(256, 512)'`.
Fields, defaults and their meaning: DepthConfig in anisotropy_jax/config/depth.py (`model`: its
template block's DEPTH_MODEL_FIELDS; `precision` at top level); `anisotropy-jax depth --help`
lists them.
"""
import ml_collections

from anisotropy_jax.config import BlockConfig, DepthConfig, depth_config_dict

VARIANTS = ("smoke", "cpu", "bert_base", "llm", "lecun", "scaled")

# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": DepthConfig, "model": BlockConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    config = depth_config_dict()  # DepthConfig's defaults and fields (anisotropy_jax/config)
    for variant in (arg or "").split("+"):
        _apply_variant(config, variant.strip())
    return config


def _apply_variant(config: ml_collections.ConfigDict, variant: str) -> None:
    if variant in ("", "default", "bert_base"):
        return
    if variant == "smoke":
        config.widths, config.head_dim, config.num_layers = (32,), 16, 3
        config.batch_size, config.seq_len, config.num_seeds = 2, 8, 2
        config.bias_norms, config.chunk_size = (0.0, 4.0, 16.0), 4
    elif variant == "cpu":
        config.widths, config.num_layers = (128, 256, 512), 16
        config.batch_size, config.seq_len, config.num_seeds = 4, 32, 3
        config.bias_norms, config.chunk_size = (0.0, 4.0, 16.0, 64.0, 256.0), 8
    elif variant == "llm":
        config.widths, config.num_layers = (1024, 2048, 4096, 8192), 48
        config.precision, config.model.causal, config.model.layer_norm_eps = "bfloat16", True, 1e-5
        config.bias_norms = (0.0, 4.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0)
        config.num_seeds, config.chunk_size = 2, 8
    elif variant == "lecun":
        config.model.init = "lecun"
    elif variant == "scaled":
        config.scale_with_depth = True
    else:
        raise ValueError(f"config: unknown variant {variant!r}; choose from {VARIANTS}")
