"""Config of the depth study (docs/DEPTH.md): untrained stacks of independently initialised
layers on x = z + s·u, metrics after every layer.

Run (default = :bert_base):

  anisotropy-jax depth --config=depth:bert_base --workdir=runs/depth_bert_base
  python experiments/depth.py --config=depth:bert_base --workdir=runs/depth_bert_base

Variants (`--config=depth:VARIANT` or `anisotropy_jax/configs/depth.py:VARIANT`; several
combine with '+', e.g. `:llm+scaled`; smoke applies last wherever it stands, so `:X+smoke` is X's
block settings on the smoke stacks, and `:cpu+smoke`, `:bert_base+smoke` are smoke):
  smoke      tiny stacks (D = 32, 3 layers), for CI (seconds)
  cpu        D = 128, 256, 512, 16 layers, B = 4, L = 32: the committed CPU run
  bert_base  12 layers × 768 (BERT-base shapes, float32 'highest'), B = 16, L = 128
  llm        D = 1,024 … 8,192, 48 layers, bfloat16 matmuls, causal, LayerNorm eps 1e-5
  lecun      lecun_normal init (variance 1/fan_in) instead of N(0, 0.02²)
  scaled     residual branches × 1/√(2N) (GPT-2's scaling of the output projections)
Any field can be overridden at its dataclass path, e.g. `--config.num_layers=24
--config.widths='(256, 512)' --config.model.precision=bfloat16`.
Fields, defaults and their meaning: DepthConfig in anisotropy_jax/configs/depth.py (`model`: its
template block; the fields in PER_STACK_FIELDS are set per stack and stay at their defaults);
`anisotropy-jax depth --help` lists them.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import ml_collections

from anisotropy_jax.config import BlockConfig, with_variants
from anisotropy_jax.config.base import from_mapping, require, require_bool, require_int
from anisotropy_jax.config.defaults import config_dict
from anisotropy_jax.configs.sweep import _as_bias_norms, upgrade_recorded

# The settings: each field, its meaning and its check.
# post: BERT (x ← LN(x + α·Attn(x)), x ← LN(x + α·MLP(x))); pre: GPT-2 (x ← x + α·Attn(LN x),
# x ← x + α·MLP(LN x)); attention_only: no LayerNorm, no MLP, x ← skip·x + α·Attn(x)
# (skip = 0: the pure attention of Dong, Cordonnier & Loukas 2021).
ARCHITECTURES = ("post", "pre", "attention_only")
# stacked: every layer's parameters drawn first (num_layers × P floats per seed in flight) and
# scanned over; per_layer: each layer's parameters drawn inside the scan from its key (P floats).
WEIGHT_MODES = ("auto", "stacked", "per_layer")
STACKED_WEIGHTS_BYTES = 2 ** 30  # 'auto' stacks a stack's weights up to 1 GiB (BERT-base: 0.34 GB)
# The template block's fields that every stack sets itself (`DepthConfig.block_for`,
# studies/depth/grid.py), and the DepthConfig fields that set them: they must stay at
# BlockConfig's defaults (a one-line ConfigError names them otherwise).
PER_STACK_FIELDS = {
    "d_model": "widths", "num_heads": "widths and head_dim", "d_ff": "ff_ratio",
    "head_dim": "head_dim", "norm_position": "architectures", "use_mlp": "architectures",
    "residual_scale": "branch_scale and scale_with_depth", "skip_scale": "attention_only_skip"}


def _check_per_stack(model: Mapping[str, Any]) -> None:
    """The template block's PER_STACK_FIELDS in `model` (its fields) are at their defaults."""
    for name, by in PER_STACK_FIELDS.items():
        value, default = model.get(name, getattr(BlockConfig, name)), getattr(BlockConfig, name)
        require(value == default, f"model.{name}",
                f"set per stack by {by}; leave it at its default {default!r}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class DepthConfig:
    """A depth sweep.

    Attributes:
      model: the template block (init, init_std, layer_norm_eps, attention, temperature, causal,
        use_bias, precision, ...); its d_model, num_heads, d_ff, head_dim, norm_position,
        use_mlp, residual_scale and skip_scale are set per (architecture, width) and stay at
        their defaults here (PER_STACK_FIELDS).
      architectures: stacks to run, from ARCHITECTURES.
      widths: residual widths D; num_heads = D / head_dim, d_ff = ff_ratio · D.
      head_dim: Dh of every width.
      ff_ratio: MLP hidden width / D.
      num_layers: depth N of every stack; metrics after every layer give every depth ≤ N (layer l
        of a seed is the same whatever N, so a shallower stack is a prefix of a deeper one).
      branch_scale: α multiplying every residual branch (attention and MLP outputs).
      scale_with_depth: α = branch_scale / √(2·num_layers) (GPT-2's output-projection scaling).
      attention_only_skip: the skip weight of 'attention_only' (0 = no residual connection).
      batch_size, seq_len, bias_norms, num_seeds, seed: the inputs x = z + s·u, as the bias sweep
        (B sequences of L tokens; s from 0 to 4096 by factors of 4 by default).
      chunk_size: grid points (seed × s) in flight over all devices; 0 = a whole (arch, width).
      weights: WEIGHT_MODES; 'per_layer' never holds more than one layer's parameters;
        'stacked' draws every layer before the scan: it compiled faster on a GPU, not on the CPU
        (docs/results/depth/bert_base/weights_modes_h100.txt); 'auto' = 'stacked'
        where a stack's float32 parameters take at most STACKED_WEIGHTS_BYTES, else 'per_layer'.
        Same numbers in every mode.
      points_per_step: points vmapped at once inside a chunk; 0 = auto (1 on CPU, all on GPU).
    """

    model: BlockConfig = BlockConfig()
    architectures: tuple[str, ...] = ARCHITECTURES
    widths: tuple[int, ...] = (768,)
    head_dim: int = 64
    ff_ratio: int = 4
    num_layers: int = 12
    branch_scale: float = 1.0
    scale_with_depth: bool = False
    attention_only_skip: float = 0.0
    batch_size: int = 16
    seq_len: int = 128
    bias_norms: tuple[float, ...] = (0.0, 1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0)
    num_seeds: int = 3
    seed: int = 0
    chunk_size: int = 24
    weights: str = "auto"
    points_per_step: int = 0

    def __post_init__(self):
        require(isinstance(self.model, BlockConfig), "model",
                f"expected a BlockConfig, got {type(self.model).__name__}")
        _check_per_stack(dataclasses.asdict(self.model))
        for name, minimum in (("head_dim", 1), ("ff_ratio", 1), ("num_layers", 1),
                              ("batch_size", 1), ("seq_len", 2), ("num_seeds", 1), ("seed", 0),
                              ("chunk_size", 0), ("points_per_step", 0)):
            require_int(getattr(self, name), name, minimum)
        require(isinstance(self.architectures, tuple) and len(self.architectures) > 0
                and all(a in ARCHITECTURES for a in self.architectures)
                and len(set(self.architectures)) == len(self.architectures), "architectures",
                f"must be distinct values of {ARCHITECTURES}, got {self.architectures!r}")
        require(isinstance(self.widths, tuple) and len(self.widths) > 0
                and len(set(self.widths)) == len(self.widths), "widths",
                f"must be a non-empty tuple of distinct integers, got {self.widths!r}")
        for w in self.widths:
            require(isinstance(w, int) and not isinstance(w, bool) and w >= self.head_dim
                    and w % self.head_dim == 0, "widths",
                    f"{w!r} is not a positive multiple of head_dim={self.head_dim}")
        for name in ("branch_scale", "attention_only_skip"):
            value = getattr(self, name)
            require(isinstance(value, (int, float)) and not isinstance(value, bool)
                    and math.isfinite(value) and value >= 0, name,
                    f"must be a finite number >= 0, got {value!r}")
        require_bool(self.scale_with_depth, "scale_with_depth")
        require(self.weights in WEIGHT_MODES, "weights",
                f"unknown mode {self.weights!r}; choose one of {WEIGHT_MODES}")
        require(isinstance(self.bias_norms, tuple), "bias_norms",
                f"must be a non-empty tuple of floats, got {self.bias_norms!r}")
        object.__setattr__(self, "bias_norms", _as_bias_norms(self.bias_norms))

    @property
    def alpha(self) -> float:
        """The residual branch multiplier α."""
        if self.scale_with_depth:
            return float(self.branch_scale) / math.sqrt(2 * self.num_layers)
        return float(self.branch_scale)

    def block_for(self, architecture: str, width: int) -> BlockConfig:
        """The block of one (architecture, width)."""
        return self.model.replace(
            d_model=width, num_heads=width // self.head_dim, d_ff=self.ff_ratio * width,
            norm_position="none" if architecture == "attention_only" else architecture,
            use_mlp=architecture != "attention_only")

    def replace(self, **changes: Any) -> "DepthConfig":
        return dataclasses.replace(self, **changes)


def depth_config_dict() -> ml_collections.ConfigDict:
    """DepthConfig's defaults as the experiment form that `depth_config_from_mapping` reads
    (anisotropy_jax/configs/depth.py starts from it): every field at its dataclass path, the
    template block's under `model` (its `precision` included)."""
    return config_dict(DepthConfig)


def depth_config_from_mapping(fields: Mapping[str, Any]) -> DepthConfig:
    """Validates an experiment config (e.g. a ConfigDict) into a DepthConfig; a recorded config
    of the older form is read too (`configs.sweep.upgrade_recorded`)."""
    rest = upgrade_recorded(fields)
    if isinstance(rest.get("model"), Mapping):
        _check_per_stack(rest["model"])  # before the block's own checks (d_model % num_heads)
    if "bias_norms" in rest:
        rest["bias_norms"] = _as_bias_norms(rest["bias_norms"])
    return from_mapping(DepthConfig, rest)


# The named variants (`--config=depth:VARIANT`).
# The fields each variant sets (`with_variants`; a nested one by its dotted path); bert_base is
# the defaults.
SETTINGS = {
    "smoke": {"widths": (32,), "head_dim": 16, "num_layers": 3, "batch_size": 2, "seq_len": 8,
              "num_seeds": 2, "bias_norms": (0.0, 4.0, 16.0), "chunk_size": 4},
    "cpu": {"widths": (128, 256, 512), "num_layers": 16, "batch_size": 4, "seq_len": 32,
            "num_seeds": 3, "bias_norms": (0.0, 4.0, 16.0, 64.0, 256.0), "chunk_size": 8},
    "bert_base": {},
    "llm": {"widths": (1024, 2048, 4096, 8192), "num_layers": 48,
            "model.precision": "bfloat16",
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
    return with_variants(depth_config_dict(), arg, VARIANTS, SETTINGS)
