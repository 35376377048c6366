"""Typed, frozen configuration of the models: one block, and a stack with embeddings."""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from anisotropy_jax.config.base import require

NORM_POSITIONS = ("post", "pre", "none")
INITS = ("bert", "lecun", "xavier")
ATTENTIONS = ("softmax", "qk_layernorm")
PRECISIONS = ("highest", "default", "bfloat16")
ATTENTION_IMPLS = ("xla", "pallas")


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    """One Transformer block. Defaults are a BERT-base encoder layer at Hugging Face initialisation.

    Attributes:
      d_model: residual width D.
      num_heads: H; D must be divisible by H (head width Dh = D / H).
      d_ff: hidden width of the MLP.
      norm_position: 'post' (BERT: h = LN(x + Attn(x)); y = LN(h + MLP(h))), 'pre' (GPT-2:
        h = x + Attn(LN(x)); y = h + MLP(LN(h))) or 'none' (no LayerNorm at all).
      init: 'bert' = untruncated N(0, init_std²) for every kernel; 'lecun' = Flax's default
        lecun_normal (truncated normal, variance 1/fan_in); 'xavier' = glorot_normal (truncated
        normal, variance 2/(fan_in + fan_out)). Biases are 0, LayerNorm γ = 1, β = 0 in all three.
      init_std: standard deviation of the 'bert' init (ignored by the others).
      layer_norm_eps: LayerNorm epsilon (BERT: 1e-12; GPT-2: 1e-5).
      attention: 'softmax' (scaled dot product) or 'qk_layernorm' (LayerNorm over Dh applied to
        queries and keys before the dot product, with learnable scale, no bias).
      logit_temperature: τ; logits are q·k / (√Dh · τ).
      causal: mask future keys.
      use_mlp: False gives the attention sublayer alone (with its norm and residual).
      use_bias: linear layers carry a bias (initialised to 0).
      precision: 'highest' (float32 matmuls at full precision), 'default' (the backend's default:
        TF32 on NVIDIA GPUs, bfloat16 passes on TPU) or 'bfloat16' (bfloat16 inputs to the
        matmuls). Attention logits and softmax are float32 in every case.
      attention_impl: 'xla' (einsums; the probes include the (B, H, L, L) logits and weights) or
        'pallas' (one fused GPU kernel, `fused_attention.py`, that returns the attention output
        and per-query softmax statistics without writing the logits to memory: the probes then
        lack attn_logits/attn_weights). 'pallas' needs L and Dh powers of two ≥ 16, L ≤ 256 and
        no padding mask; off GPU it runs in (slow) Pallas interpret mode.
    """

    d_model: int = 768
    num_heads: int = 12
    d_ff: int = 3072
    norm_position: str = "post"
    init: str = "bert"
    init_std: float = 0.02
    layer_norm_eps: float = 1e-12
    attention: str = "softmax"
    logit_temperature: float = 1.0
    causal: bool = False
    use_mlp: bool = True
    use_bias: bool = True
    precision: str = "highest"
    attention_impl: str = "xla"

    def __post_init__(self):
        require(isinstance(self.d_model, int) and self.d_model >= 1, "model.d_model",
                 f"must be a positive integer, got {self.d_model!r}")
        require(isinstance(self.num_heads, int) and self.num_heads >= 1, "model.num_heads",
                 f"must be a positive integer, got {self.num_heads!r}")
        require(self.d_model % self.num_heads == 0, "model.d_model",
                 f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}")
        require(isinstance(self.d_ff, int) and self.d_ff >= 1, "model.d_ff",
                 f"must be a positive integer, got {self.d_ff!r}")
        require(self.norm_position in NORM_POSITIONS, "model.norm_position",
                 f"unknown norm position {self.norm_position!r}; choose one of {NORM_POSITIONS}")
        require(self.init in INITS, "model.init",
                 f"unknown init {self.init!r}; choose one of {INITS}")
        require(math.isfinite(self.init_std) and self.init_std > 0, "model.init_std",
                 f"must be finite and > 0, got {self.init_std!r}")
        require(math.isfinite(self.layer_norm_eps) and self.layer_norm_eps > 0,
                 "model.layer_norm_eps", f"must be finite and > 0, got {self.layer_norm_eps!r}")
        require(self.attention in ATTENTIONS, "model.attention",
                 f"unknown attention {self.attention!r}; choose one of {ATTENTIONS}")
        require(math.isfinite(self.logit_temperature) and self.logit_temperature > 0,
                 "model.logit_temperature",
                 f"must be finite and > 0, got {self.logit_temperature!r}")
        require(self.precision in PRECISIONS, "model.precision",
                 f"unknown precision {self.precision!r}; choose one of {PRECISIONS}")
        require(self.attention_impl in ATTENTION_IMPLS, "model.attention_impl",
                 f"unknown attention_impl {self.attention_impl!r}; choose one of "
                 f"{ATTENTION_IMPLS}")
        require(self.attention_impl == "xla" or self.attention == "softmax",
                 "model.attention_impl", "'pallas' supports attention='softmax' only")

    @property
    def d_head(self) -> int:
        return self.d_model // self.num_heads

    def replace(self, **changes: Any) -> "BlockConfig":
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """A stack of blocks with embeddings, for training from scratch and for pretrained weights.

    Attributes:
      block: the configuration shared by every layer.
      num_layers: number of blocks.
      vocab_size: token vocabulary size.
      max_len: number of learned position embeddings.
      type_vocab_size: token-type (segment) embeddings, as in BERT; 0 = none.
      embedding_norm: LayerNorm after summing the embeddings (BERT: True; GPT-2: False).
      final_norm: LayerNorm after the last block (GPT-2 pre-LN: True; BERT: False).
      tie_embeddings: the output projection is the transposed token embedding.
      output_bias: the output projection has a bias (initialised to 0).
    """

    block: BlockConfig = BlockConfig()
    num_layers: int = 12
    vocab_size: int = 30522
    max_len: int = 512
    type_vocab_size: int = 0
    embedding_norm: bool = True
    final_norm: bool = False
    tie_embeddings: bool = True
    output_bias: bool = True

    def __post_init__(self):
        for name in ("num_layers", "vocab_size", "max_len"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 1, f"model.{name}",
                     f"must be a positive integer, got {value!r}")
        require(isinstance(self.type_vocab_size, int) and self.type_vocab_size >= 0,
                 "model.type_vocab_size",
                 f"must be a non-negative integer, got {self.type_vocab_size!r}")

    def replace(self, **changes: Any) -> "TransformerConfig":
        return dataclasses.replace(self, **changes)
