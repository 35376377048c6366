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

from anisotropy_jax.config import BlockConfig, DepthConfig, depth_config_dict, with_variants

# The fields each variant sets (`with_variants`; a nested one by its dotted path); bert_base is
# the defaults.
SETTINGS = {
    "smoke": {"widths": (32,), "head_dim": 16, "num_layers": 3, "batch_size": 2, "seq_len": 8,
              "num_seeds": 2, "bias_norms": (0.0, 4.0, 16.0), "chunk_size": 4},
    "cpu": {"widths": (128, 256, 512), "num_layers": 16, "batch_size": 4, "seq_len": 32,
            "num_seeds": 3, "bias_norms": (0.0, 4.0, 16.0, 64.0, 256.0), "chunk_size": 8},
    "bert_base": {},
    "llm": {"widths": (1024, 2048, 4096, 8192), "num_layers": 48, "precision": "bfloat16",
            "model.causal": True, "model.layer_norm_eps": 1e-5,
            "bias_norms": (0.0, 4.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0), "num_seeds": 2,
            "chunk_size": 8},
    "lecun": {"model.init": "lecun"},
    "scaled": {"scale_with_depth": True},
}
VARIANTS = tuple(SETTINGS)

# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": DepthConfig, "model": BlockConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """DepthConfig's defaults and fields (anisotropy_jax/config), then the variants of `arg`."""
    return with_variants(depth_config_dict(), arg, VARIANTS, SETTINGS, combine=True)
