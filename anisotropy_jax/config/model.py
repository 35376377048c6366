"""Typed, frozen configuration of the models: one block, and a stack with embeddings."""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from anisotropy_jax.config.base import require

NORM_POSITIONS = ("post", "pre", "none")
NORMS = ("layer", "rms")
# The gain γ of every norm (models/layers.py, `layer_norm`, `RmsNorm`): one per channel, one
# scalar per norm, or none.
NORM_GAINS = ("per_channel", "single", "none")
INITS = ("bert", "lecun", "xavier", "t5")
ATTENTIONS = ("softmax", "qk_layernorm")
# The attention normalisation step (models/attention.py, NORMALIZATIONS holds the functions;
# tests/test_model.py checks that the two lists agree).
ATTENTION_NORMALIZATIONS = ("softmax", "off_by_one", "sigmoid", "sigmoid_per_query_bias",
                            "softpick", "clipped_softmax")
# Hugging Face `hidden_act` names of the MLP activation (models/layers.py, ACTIVATIONS).
ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "silu", "swish", "relu")
# Matmul precision, one vocabulary everywhere (the configs, the benchmarks, the profilers):
# 'highest' (float32), 'default' (the backend's default: TF32 on NVIDIA GPUs) and 'bfloat16'.
PRECISIONS = ("highest", "default", "bfloat16")
# Other names accepted for them, and stored as the name they stand for.
PRECISION_ALIASES = {"tf32": "default", "float32": "highest", "bf16": "bfloat16"}


def precision_name(value: Any) -> Any:
    """The PRECISIONS name of `value` (an alias such as 'tf32' → 'default'); anything else
    unchanged, for the caller's validation to refuse."""
    return PRECISION_ALIASES.get(value, value) if isinstance(value, str) else value


def canonical_precision(config: Any, field: str = "precision") -> None:
    """Replaces an alias in `config.<field>` (a frozen dataclass, in its __post_init__) by its
    PRECISIONS name, before it is validated."""
    object.__setattr__(config, field, precision_name(getattr(config, field)))
ATTENTION_IMPLS = ("xla", "pallas", "dot_product", "flash")
# The normalisations of the 'flash' core (models/flash_attention.py, FLASH_NORMALIZATIONS: every
# one with a flash form; the clipped softmax clips the normalised weights, which needs them all).
FLASH_NORMALIZATIONS = ("softmax", "off_by_one", "sigmoid", "sigmoid_per_query_bias", "softpick")
# Its widest head: a (block, Dh) float32 accumulator per program; wider heads would spill.
FLASH_MAX_HEAD_WIDTH = 256


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    """One Transformer block: the union of every family's switches (models/block.py, `Block`).
    Defaults are a BERT-base encoder layer at Hugging Face initialisation.

    Attributes:
      d_model: residual width D.
      num_heads: H query heads.
      d_ff: hidden width of the MLP.
      norm_position: 'post' (BERT: h = LN(x + Attn(x)); y = LN(h + MLP(h))), 'pre' (GPT-2:
        h = x + Attn(LN(x)); y = h + MLP(LN(h))) or 'none' (no normalisation at all).
      norm: 'layer' (LayerNorm with gain and bias) or 'rms' (RMSNorm: gain only, no mean;
        Llama, T5). Also the kind of the QK norm and of a stack's final norm.
      norm_gain: the gain γ of every norm of the block and stack (LayerNorm and RMSNorm alike):
        'per_channel' (one γ per channel, parameter "scale" of shape (D,): LayerNorm and RMSNorm
        as usual), 'single' (one scalar γ per norm, "scale" of shape (1,): the single-scale norm
        of Outlier-Safe Pre-Training, Park et al. 2025) or 'none' (no γ; a LayerNorm keeps its
        bias β).
      init: 'bert' = untruncated N(0, init_std²) for every kernel; 'lecun' = Flax's default
        lecun_normal (truncated normal, variance 1/fan_in); 'xavier' = glorot_normal (truncated
        normal, variance 2/(fan_in + fan_out)); 't5' = T5's `_init_weights` with
        initializer_factor = init_std (N(0, (init_std²/fan))), fan = D·Dh for queries, H·Dh for
        the attention output, d_ff for the MLP output, D otherwise). Biases 0, norm gains 1 and
        LayerNorm biases 0 in all of them.
      init_std: standard deviation of the 'bert' init (the factor of 't5'; ignored by the others).
      residual_init_std: 'bert' only: the standard deviation of the two kernels that write into
        the residual stream (attention `out`, MLP `fc_out`); None = init_std (GPT-2 scales it by
        1/√(2·layers)).
      layer_norm_eps: epsilon of every norm of the block (LayerNorm or RMSNorm).
      attention: 'softmax' (scaled dot product) or 'qk_layernorm' (a norm over Dh applied to
        queries and keys before the dot product, with learnable gain, no bias).
      attention_normalization: the function that turns masked logits into attention weights
        (models/attention.py, NORMALIZATIONS): 'softmax'; 'off_by_one' e^ℓ/(1 + Σ e^ℓ);
        'sigmoid' σ(ℓ − ln L), L the key length, one scalar bias (Ramapuram et al. 2024);
        'sigmoid_per_query_bias' σ(ℓ − ln n), n the query's visible keys; 'softpick'
        ReLU(e^ℓ − 1)/(Σ|e^ℓ − 1| + 1e-6) (Zuhri et al. 2025); 'clipped_softmax'
        clip((ζ − γ)·softmax + γ, 0, 1) (Bondarenko et al. 2023). Only softmax rows sum to one;
        the others need attention_impl='xla'.
      clip_zeta: ζ ≥ 1 of 'clipped_softmax' (ignored by the others).
      clip_gamma: γ ≤ 0 of 'clipped_softmax' (ignored by the others); the default −0.025 is the
        value we take from Bondarenko et al.'s BERT runs (ζ = 1, γ = 0 is the softmax).
      attention_output_gate: multiply each head's mixed output by σ(x·w_h + b_h) before the
        output projection (Bondarenko et al.'s gated attention: a Dense D → H named `gate`,
        N(0, init_std²)-style init of `init`, bias 0; x the attention input); needs
        attention_impl='xla'. Off: no `gate` parameters.
      logit_temperature: τ; logits are q·k / (√Dh · τ) (or q·k · logit_scale).
      logit_scale: when set, logits are q·k · logit_scale instead (T5: 1.0, no 1/√Dh).
      causal: mask future keys.
      use_mlp: False gives the attention sublayer alone (with its norm and residual).
      use_bias: linear layers carry a bias (initialised to 0).
      qkv_bias, out_bias, mlp_bias: per group of linear layers, overriding use_bias when set
        (Qwen2: biases on q, k, v only).
      activation: the MLP's activation by its Hugging Face name: 'gelu' (exact erf),
        'gelu_new' / 'gelu_pytorch_tanh' (tanh approximation), 'silu' / 'swish', 'relu'.
      gated_mlp: fc_out(act(fc_gate(x)) · fc_in(x)) (Llama SwiGLU, T5 v1.1 gated-gelu) instead
        of fc_out(act(fc_in(x))).
      parallel_residual: 'pre' only: y = x + Attn(LN₁(x)) + MLP(LN₂(x)) (GPT-NeoX, GPT-J).
      num_kv_heads: key/value heads (grouped-query attention; query head h reads key/value head
        h // (H / H_kv)); 0 = num_heads.
      head_dim: Dh; 0 = d_model / num_heads (which must then divide).
      rotary_dims: rotary position embedding on the first `rotary_dims` (even) dims of every
        query and key head, GPT-NeoX/Llama "rotate_half" pairing; 0 = none.
      rotary_base: the rotary base θ.
      local_chunk: > 0: attention only within consecutive chunks of this many positions
        (CANINE's local character encoder).
      residual_scale: α; each residual branch is added as x + α·branch (depth study).
      skip_scale: the attention sublayer's skip path is skip_scale·x (depth study's
        attention-only stacks); 1 = the plain residual.
      precision: 'highest' (float32 matmuls at full precision), 'default' (the backend's default:
        TF32 on NVIDIA GPUs, bfloat16 passes on TPU; 'tf32' is accepted for it) or 'bfloat16'
        (bfloat16 inputs to the matmuls). Attention logits and normalisation are float32 in
        every case.
      attention_impl: 'xla' (einsums; the probes include the (B, H, L, L) logits and weights) or
        'pallas' (one fused GPU kernel, `fused_attention.py`, that returns the attention output
        and per-query softmax statistics without writing the logits to memory: the probes then
        lack attn_logits/attn_weights). 'pallas' needs L and Dh powers of two ≥ 16, L ≤ 256, no
        padding mask, softmax, and none of GQA, a logit bias or local chunks; off GPU it runs in
        (slow) Pallas interpret mode. 'dot_product' (for training): `jax.nn.dot_product_attention`,
        cuDNN's fused attention on GPUs at bfloat16, XLA's elsewhere; the probes lack the
        (B, H, L, L) tensors and the per-query statistics; the same restrictions as 'pallas'.
        'flash' (for training): flash attention with a backward pass, Pallas kernels
        (`flash_attention.py`), for every normalisation in FLASH_NORMALIZATIONS and any gate,
        QK norm or grouped key/value heads; causal or no mask (no padding mask, logit bias,
        local chunks or sliding window); no probes of the core; off GPU in interpret mode.
      sandwich_norms: 'pre' only: each branch's output is normalised too before it is added
        (Gemma-2/3: x + norm(Attn(norm(x))), parameters `post_attention_norm`, `post_mlp_norm`).
      sliding_window: > 0: a query at position i sees keys j with i − j < sliding_window only
        (Gemma-3's local layers, on top of the causal mask); needs attention_impl='xla'.
    """

    d_model: int = 768
    num_heads: int = 12
    d_ff: int = 3072
    norm_position: str = "post"
    norm: str = "layer"
    norm_gain: str = "per_channel"
    init: str = "bert"
    init_std: float = 0.02
    residual_init_std: float | None = None
    layer_norm_eps: float = 1e-12
    attention: str = "softmax"
    attention_normalization: str = "softmax"
    clip_zeta: float = 1.0
    clip_gamma: float = -0.025
    attention_output_gate: bool = False
    logit_temperature: float = 1.0
    logit_scale: float | None = None
    causal: bool = False
    use_mlp: bool = True
    use_bias: bool = True
    qkv_bias: bool | None = None
    out_bias: bool | None = None
    mlp_bias: bool | None = None
    activation: str = "gelu"
    gated_mlp: bool = False
    parallel_residual: bool = False
    num_kv_heads: int = 0
    head_dim: int = 0
    rotary_dims: int = 0
    rotary_base: float = 10000.0
    local_chunk: int = 0
    residual_scale: float = 1.0
    skip_scale: float = 1.0
    precision: str = "highest"
    attention_impl: str = "xla"
    # Gemma-3
    sandwich_norms: bool = False
    sliding_window: int = 0

    def __post_init__(self):
        canonical_precision(self)
        for name in ("d_model", "num_heads", "d_ff"):
            value = getattr(self, name)
            require(isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                    f"model.{name}", f"must be a positive integer, got {value!r}")
        for name in ("num_kv_heads", "head_dim", "rotary_dims", "local_chunk"):
            value = getattr(self, name)
            require(isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                    f"model.{name}", f"must be an integer >= 0, got {value!r}")
        require(self.head_dim or self.d_model % self.num_heads == 0, "model.d_model",
                f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}")
        require(self.num_heads % self.kv_heads == 0, "model.num_kv_heads",
                f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.kv_heads}")
        require(self.rotary_dims % 2 == 0 and self.rotary_dims <= self.d_head,
                "model.rotary_dims", f"must be even and <= the head width {self.d_head}, got "
                f"{self.rotary_dims}")
        for name, choices in (("norm_position", NORM_POSITIONS), ("norm", NORMS),
                              ("norm_gain", NORM_GAINS),
                              ("init", INITS), ("attention", ATTENTIONS),
                              ("attention_normalization", ATTENTION_NORMALIZATIONS),
                              ("activation", ACTIVATIONS), ("precision", PRECISIONS),
                              ("attention_impl", ATTENTION_IMPLS)):
            value = getattr(self, name)
            require(value in choices, f"model.{name}",
                    f"unknown {name} {value!r}; choose one of {choices}")
        for name in ("init_std", "layer_norm_eps", "logit_temperature", "rotary_base"):
            value = getattr(self, name)
            require(math.isfinite(value) and value > 0, f"model.{name}",
                    f"must be finite and > 0, got {value!r}")
        for name in ("residual_init_std", "logit_scale"):
            value = getattr(self, name)
            require(value is None or (math.isfinite(value) and value > 0), f"model.{name}",
                    f"must be None or finite and > 0, got {value!r}")
        for name in ("residual_scale", "skip_scale"):
            value = getattr(self, name)
            require(math.isfinite(value), f"model.{name}", f"must be finite, got {value!r}")
        self._check_normalization()
        require(not self.parallel_residual or self.norm_position == "pre",
                "model.parallel_residual", "needs norm_position='pre'")
        require(self.attention_impl in ("xla", "flash") or (
            self.attention == "softmax" and self.attention_normalization == "softmax"
            and self.kv_heads == self.num_heads and not self.local_chunk),
            "model.attention_impl", "'pallas' and 'dot_product' support softmax attention "
                                    "without QK norm, grouped key/value heads or local chunks "
                                    "only")
        # Gemma-3
        require(isinstance(self.sliding_window, int) and not isinstance(self.sliding_window, bool)
                and self.sliding_window >= 0, "model.sliding_window",
                f"must be an integer >= 0, got {self.sliding_window!r}")
        require(not self.sliding_window or self.attention_impl == "xla", "model.sliding_window",
                "needs attention_impl='xla'")
        require(not self.sandwich_norms or self.norm_position == "pre", "model.sandwich_norms",
                "needs norm_position='pre'")

    def _check_normalization(self) -> None:
        """The clipped softmax's ζ ≥ 1 and γ ≤ 0; the gate a bool; 'pallas' and 'dot_product'
        softmax-only, 'flash' its normalisations."""
        require(math.isfinite(self.clip_zeta) and self.clip_zeta >= 1, "model.clip_zeta",
                f"must be finite and >= 1, got {self.clip_zeta!r}")
        require(math.isfinite(self.clip_gamma) and self.clip_gamma <= 0, "model.clip_gamma",
                f"must be finite and <= 0, got {self.clip_gamma!r}")
        require(isinstance(self.attention_output_gate, bool), "model.attention_output_gate",
                f"must be True or False, got {self.attention_output_gate!r}")
        if self.attention_impl == "flash":
            require(self.attention_normalization in FLASH_NORMALIZATIONS and not self.local_chunk
                    and self.d_head <= FLASH_MAX_HEAD_WIDTH, "model.attention_impl",
                    f"'flash' computes {FLASH_NORMALIZATIONS} without local chunks, heads up to "
                    f"{FLASH_MAX_HEAD_WIDTH} wide; attention_normalization="
                    f"{self.attention_normalization!r}, local_chunk={self.local_chunk}, head "
                    f"width {self.d_head} need attention_impl='xla'")
            return
        require(self.attention_impl == "xla" or (self.attention_normalization == "softmax"
                                                 and not self.attention_output_gate),
                "model.attention_impl", f"{self.attention_impl!r} computes softmax attention "
                f"only: attention_normalization={self.attention_normalization!r} and "
                f"attention_output_gate={self.attention_output_gate} need attention_impl='xla'")

    @property
    def d_head(self) -> int:
        """Dh, the width of one head."""
        return self.head_dim or self.d_model // self.num_heads

    @property
    def kv_heads(self) -> int:
        """H_kv, the number of key/value heads."""
        return self.num_kv_heads or self.num_heads

    def bias(self, group: str) -> bool:
        """Whether the linear layers of `group` ('qkv', 'out', 'mlp') carry a bias."""
        value = getattr(self, f"{group}_bias")
        return self.use_bias if value is None else value

    def replace(self, **changes: Any) -> "BlockConfig":
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """A stack of blocks with embeddings (models/transformer.py, `Transformer`): the from-scratch
    LMs of the training study and the BERT, GPT-2, GPT-NeoX, Llama and Qwen2 families.

    Attributes:
      block: the configuration shared by every layer.
      num_layers: number of blocks.
      vocab_size: token vocabulary size.
      max_len: number of learned position embeddings (with rotary blocks: the longest input).
      learned_positions: a learned position table is added to the token embedding (BERT,
        GPT-2); False for rotary models (GPT-NeoX, Llama).
      type_vocab_size: token-type (segment) embeddings, as in BERT; 0 = none.
      embedding_norm: a norm after summing the embeddings (BERT: True; GPT-2: False).
      final_norm: a norm (of `block.norm` kind) after the last block (pre-LN: True; BERT: False).
      tie_embeddings: the output projection is the transposed token embedding.
      output_bias: the output projection has a bias (initialised to 0).
      output_embedding: keep an untied output embedding (`output` Dense) in the parameters even
        when the model is applied without its head (a checkpoint's LM head, for the embedding
        analysis).
      embedding_scale: the token embedding is multiplied by this before the blocks (Gemma: √D);
        the tied head reads the unscaled table.
      layer_blocks: one BlockConfig per layer, where layers differ (Gemma-3's local layers:
        sliding window and their own rotary base); () = `block` for every layer.
    """

    block: BlockConfig = BlockConfig()
    num_layers: int = 12
    vocab_size: int = 30522
    max_len: int = 512
    learned_positions: bool = True
    type_vocab_size: int = 0
    embedding_norm: bool = True
    final_norm: bool = False
    tie_embeddings: bool = True
    output_bias: bool = True
    output_embedding: bool = False
    # Gemma-3
    embedding_scale: float = 1.0
    layer_blocks: tuple[BlockConfig, ...] = ()

    def __post_init__(self):
        for name in ("num_layers", "vocab_size", "max_len"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 1, f"model.{name}",
                     f"must be a positive integer, got {value!r}")
        require(isinstance(self.type_vocab_size, int) and self.type_vocab_size >= 0,
                 "model.type_vocab_size",
                 f"must be a non-negative integer, got {self.type_vocab_size!r}")
        # Gemma-3
        require(math.isfinite(self.embedding_scale) and self.embedding_scale > 0,
                "model.embedding_scale", f"must be finite and > 0, got {self.embedding_scale!r}")
        require(len(self.layer_blocks) in (0, self.num_layers), "model.layer_blocks",
                f"needs one BlockConfig per layer ({self.num_layers}), got "
                f"{len(self.layer_blocks)}")

    @property
    def blocks(self) -> tuple[BlockConfig, ...]:
        """The BlockConfig of every layer (`layer_blocks`, else `block` repeated)."""
        return self.layer_blocks or (self.block,) * self.num_layers

    def replace(self, **changes: Any) -> "TransformerConfig":
        return dataclasses.replace(self, **changes)
