"""Primitives shared by attention and the block: initialisers, matmul precision, dense layers,
LayerNorm and RMSNorm, the activations (one table, Hugging Face names) and the MLP. Every linear
layer gets a named initialiser (never a silent framework default)."""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from anisotropy_jax.config import BlockConfig

Array = jax.Array


# The two kernels that write into the residual stream (GPT-2's scaled init, T5's fan-ins).
RESIDUAL_KERNELS = ("out", "fc_out")


def kernel_init(config: BlockConfig, name: str = "") -> nn.initializers.Initializer:
    """The named initialiser of the linear kernel `name` of a block (never a silent framework
    default; BlockConfig.init says which)."""
    if config.init == "bert":
        # Hugging Face _init_weights: normal_(0, initializer_range), untruncated.
        std = config.init_std
        if name in RESIDUAL_KERNELS and config.residual_init_std is not None:
            std = config.residual_init_std
        return nn.initializers.normal(stddev=std)
    if config.init == "t5":
        # T5PreTrainedModel._init_weights with initializer_factor = init_std.
        fan = {"query": config.d_model * config.d_head, "out": config.num_heads * config.d_head,
               "fc_out": config.d_ff}.get(name, config.d_model)
        return nn.initializers.normal(stddev=config.init_std * fan ** -0.5)
    if config.init == "lecun":
        return nn.initializers.lecun_normal()  # Flax's default: truncated normal, var 1/fan_in.
    if config.init == "xavier":
        return nn.initializers.glorot_normal()  # truncated normal, var 2/(fan_in + fan_out).
    raise ValueError(f"model.init: unknown init {config.init!r}")


def embedding_init(config: BlockConfig) -> nn.initializers.Initializer:
    """Embeddings: N(0, init_std²) for 'bert' (as Hugging Face), N(0, 1/D) otherwise."""
    if config.init == "bert":
        return nn.initializers.normal(stddev=config.init_std)
    return nn.initializers.normal(stddev=config.d_model ** -0.5)


PRECISION_SETTINGS = {"highest": (jnp.float32, jax.lax.Precision.HIGHEST),
                      "default": (jnp.float32, jax.lax.Precision.DEFAULT),
                      "bfloat16": (jnp.bfloat16, jax.lax.Precision.DEFAULT)}


def precision_settings(precision: str) -> tuple[Any, jax.lax.Precision]:
    """(compute dtype, lax precision) of the matmuls for a precision name."""
    if precision not in PRECISION_SETTINGS:
        raise ValueError(f"model.precision: unknown precision {precision!r}; choose one of "
                         f"{tuple(PRECISION_SETTINGS)}")
    return PRECISION_SETTINGS[precision]


def matmul_settings(config: Any) -> tuple[Any, jax.lax.Precision]:
    """(compute dtype, lax precision) of the matmuls for `config.precision`."""
    return precision_settings(config.precision)


# XLA's GPU compiler autotunes Triton GEMM tilings for every matmul shape at compile time; for the
# sweep's full-metric chunk that search was most of the first call, and cuBLAS GEMMs run as fast
# (measured: docs/PERFORMANCE.md, "Compilation"; raw logs in docs/benchmarks/compile_options_h100/).
GPU_COMPILER_OPTIONS = {"xla_gpu_enable_triton_gemm": False}


def compiler_options(platform: str) -> dict[str, Any] | None:
    """XLA options for jitting a study's chunk on `platform` ('gpu'/'cuda': no Triton GEMM
    autotuning, see GPU_COMPILER_OPTIONS; None elsewhere: CPUs and TPUs keep XLA's defaults)."""
    return dict(GPU_COMPILER_OPTIONS) if platform in ("gpu", "cuda") else None


def dense(config: BlockConfig, features: int, name: str, use_bias: bool | None = None
          ) -> nn.Dense:
    """A linear layer with the block's precision and the named initialiser of `name`
    (`use_bias` None: config.use_bias)."""
    dtype, precision = matmul_settings(config)
    return nn.Dense(features, use_bias=config.use_bias if use_bias is None else use_bias,
                    kernel_init=kernel_init(config, name), bias_init=nn.initializers.zeros,
                    dtype=dtype, param_dtype=jnp.float32, precision=precision, name=name)


class DenseParams(nn.Module):
    """The parameters of an `nn.Dense` (same names, shapes and initialisation), returned as
    (kernel (in, out), bias (out,) or None) for the caller to apply (e.g. fused with others)."""

    config: BlockConfig
    in_features: int
    features: int
    use_bias: bool = True

    @nn.compact
    def __call__(self) -> tuple[Array, Array | None]:
        kernel = self.param("kernel", kernel_init(self.config, self.name),
                            (self.in_features, self.features), jnp.float32)
        bias = (self.param("bias", nn.initializers.zeros, (self.features,), jnp.float32)
                if self.use_bias else None)
        return kernel, bias


def layer_norm(config: BlockConfig, name: str, use_bias: bool = True) -> nn.Module:
    """LayerNorm in float32 (γ = 1, β = 0 at init) with the gain `config.norm_gain` says:
    per channel (Flax's nn.LayerNorm, parameters "scale" (D,) and "bias" (D,)), one scalar
    ("scale" (1,), `SingleGainLayerNorm`) or none (nn.LayerNorm without its scale)."""
    if config.norm_gain == "single":
        return SingleGainLayerNorm(epsilon=config.layer_norm_eps, use_bias=use_bias, name=name)
    return nn.LayerNorm(epsilon=config.layer_norm_eps, use_bias=use_bias,
                        use_scale=config.norm_gain == "per_channel", dtype=jnp.float32,
                        param_dtype=jnp.float32, name=name)


class SingleGainLayerNorm(nn.Module):
    """LayerNorm with one scalar gain for every channel: (x − mean) / sqrt(var + eps) · γ + β,
    γ "scale" of shape (1,) (initialised to 1), β "bias" of shape (D,) (0) unless `use_bias` is
    False. The normalisation is Flax's nn.LayerNorm's, which holds no parameter here."""

    epsilon: float
    use_bias: bool = True

    @nn.compact
    def __call__(self, x: Array) -> Array:
        normalized = nn.LayerNorm(epsilon=self.epsilon, use_bias=False, use_scale=False,
                                  dtype=jnp.float32, param_dtype=jnp.float32)(x)
        lead = (1,) * (x.ndim - 1)  # explicit broadcasting (no rank promotion)
        scale = self.param("scale", nn.initializers.ones, (1,), jnp.float32)
        y = normalized * scale.reshape(lead + (1,))
        if self.use_bias:
            bias = self.param("bias", nn.initializers.zeros, (x.shape[-1],), jnp.float32)
            y = y + bias.reshape(lead + (-1,))
        return y


def norm(config: BlockConfig, name: str, use_bias: bool = True) -> nn.Module:
    """The block's norm kind (`config.norm`): LayerNorm, or RMSNorm (which has no bias), with
    the gain `config.norm_gain`."""
    if config.norm == "rms":
        return RmsNorm(epsilon=config.layer_norm_eps, gain=config.norm_gain, name=name)
    return layer_norm(config, name, use_bias)


# erf(x) ≈ x·P(x²)/Q(x²) on [-4, 4] (clamped outside, where |erf| = 1 to float32): the rational
# approximation XLA and Eigen use for float32 erf.
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
          -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
          -7.37332916720468e-03, -1.42647390514189e-02)


def erf_float32(x: Array) -> Array:
    """erf in float32 arithmetic (any input dtype, result in float32); |error| < 5e-7 against
    scipy's float64 erf (tests/test_model.py). Plain multiply-adds and one division, so XLA fuses
    it into its neighbours, where XLA's own GPU erf made the GELU pass of a BERT-base MLP slower
    (measured: docs/PERFORMANCE.md)."""
    x = jnp.clip(x.astype(jnp.float32), -4.0, 4.0)
    x2 = x * x
    p = jnp.full_like(x2, _ERF_P[0])
    for c in _ERF_P[1:]:
        p = p * x2 + c
    q = jnp.full_like(x2, _ERF_Q[0])
    for c in _ERF_Q[1:]:
        q = q * x2 + c
    return x * p / q


def gelu_exact(x: Array) -> Array:
    """The exact (erf, not tanh) GELU x·Φ(x) = x·(1 + erf(x/√2))/2, computed in float32 and
    returned in x's dtype (as Hugging Face's "gelu")."""
    x32 = x.astype(jnp.float32)
    return (0.5 * x32 * (1.0 + erf_float32(x32 * 0.7071067811865476))).astype(x.dtype)


class Tapped(nn.Module):
    """A module with named activations (the block, its attention, its MLP): each passes through
    `tap(name, value)`, which returns `value` unchanged. `models.patching` intercepts these calls
    (Flax's `nn.intercept_methods`) to read or replace an activation inside the one forward; with
    no interceptor a tap adds no operation, so the forward is exactly the untapped one."""

    def tap(self, name: str, value: Array) -> Array:
        del name
        return value


class Mlp(Tapped):
    """D → d_ff → activation → D, or gated: fc_out(act(fc_gate(x)) · fc_in(x)). Taps mlp_pre (the
    activation's input: fc_gate(x) when gated, else fc_in(x)) and mlp_post (fc_out's input)."""

    config: BlockConfig

    @nn.compact
    def __call__(self, x_BxLxD: Array) -> Array:
        cfg = self.config
        act, bias = ACTIVATIONS[cfg.activation], cfg.bias("mlp")
        h_BxLxF = dense(cfg, cfg.d_ff, "fc_in", bias)(x_BxLxD)
        if cfg.gated_mlp:
            gate_BxLxF = self.tap("mlp_pre", dense(cfg, cfg.d_ff, "fc_gate", bias)(x_BxLxD))
            h_BxLxF = act(gate_BxLxF) * h_BxLxF
        else:
            h_BxLxF = act(self.tap("mlp_pre", h_BxLxF))
        h_BxLxF = self.tap("mlp_post", h_BxLxF)
        return dense(cfg, cfg.d_model, "fc_out", bias)(h_BxLxF).astype(jnp.float32)


# --------------------------------------------------------------------------------------------
# Norms and activations of the pretrained families

def rms_norm(x: Array, scale: Array | None, eps: float) -> Array:
    """RMSNorm (Llama, T5): x / sqrt(mean(x²) + eps) · scale, in float32 (no mean subtraction,
    no bias). As Hugging Face's LlamaRMSNorm/T5LayerNorm for float32 inputs. `scale`: (D,), or
    (1,) for one gain of every channel, or None for no gain."""
    x32 = x.astype(jnp.float32)
    variance = jnp.mean(x32 * x32, axis=-1, keepdims=True)
    normalized = x32 * jax.lax.rsqrt(variance + eps)
    if scale is None:
        return normalized
    return normalized * scale.astype(jnp.float32).reshape((1,) * (x32.ndim - 1) + (-1,))


class RmsNorm(nn.Module):
    """`rms_norm` with a learnable gain "scale" (initialised to 1): one per channel (D,) for
    `gain` 'per_channel', one scalar (1,) for 'single', none for 'none' (BlockConfig.norm_gain)."""

    epsilon: float = 1e-6
    gain: str = "per_channel"

    @nn.compact
    def __call__(self, x: Array) -> Array:
        if self.gain == "none":
            return rms_norm(x, None, self.epsilon)
        shape = (x.shape[-1],) if self.gain == "per_channel" else (1,)
        return rms_norm(x, self.param("scale", nn.initializers.ones, shape, jnp.float32),
                        self.epsilon)


def gelu_tanh(x: Array) -> Array:
    """The tanh approximation of GELU, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), in float32
    (Hugging Face "gelu_new" / "gelu_pytorch_tanh", GPT-2's activation)."""
    x32 = x.astype(jnp.float32)
    inner = 0.7978845608028654 * (x32 + 0.044715 * x32 * x32 * x32)
    return (0.5 * x32 * (1.0 + jnp.tanh(inner))).astype(x.dtype)


def silu(x: Array) -> Array:
    """x·sigmoid(x) in float32 (Hugging Face "silu")."""
    x32 = x.astype(jnp.float32)
    return (x32 * jax.nn.sigmoid(x32)).astype(x.dtype)


def relu(x: Array) -> Array:
    return jnp.maximum(x, 0)


# Hugging Face `hidden_act` names → functions (float32 math, input dtype out).
ACTIVATIONS = {"gelu": gelu_exact, "gelu_new": gelu_tanh, "gelu_pytorch_tanh": gelu_tanh,
               "silu": silu, "swish": silu, "relu": relu}


def conv1d(x_BxCxT: Array, kernel_OxIxK: Array, bias_O: Array | None, stride: int = 1,
           padding: int = 0, groups: int = 1) -> Array:
    """torch.nn.functional.conv1d in PyTorch's layout (NCW input, OIW kernel) at HIGHEST
    precision: (B, C, T) → (B, O, T') (the Whisper and wav2vec 2.0 front ends)."""
    y = jax.lax.conv_general_dilated(x_BxCxT, kernel_OxIxK, (stride,), ((padding, padding),),
                                     dimension_numbers=("NCH", "OIH", "NCH"),
                                     feature_group_count=groups,
                                     precision=jax.lax.Precision.HIGHEST)
    return y if bias_O is None else y + bias_O[None, :, None]
