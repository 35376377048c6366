"""One encoder layer of the Hugging Face encoder families (T5/ByT5, MPNet, CANINE) with the probe
contract of `models.block` (README "Probes"), and the tensor reader that fills it.

The layer is either BERT-like post-LayerNorm (MPNet, CANINE: h = LN(x + Attn(x)),
y = LN(h + MLP(h)), biases everywhere) or T5-like pre-RMSNorm (h = x + Attn(RMS(x)),
y = h + MLP(RMS(h)), no biases). Attention goes through `attention.attention_core` with an
optional additive `logit_bias` (relative positions) and, for CANINE's local encoder, in
independent chunks of `local_chunk` positions (each chunk attends only to itself, as
`CanineAttention(local=True)`). The MLP is act(x W_in) W_out, or gated:
(act(x W_gate) ⊙ x W_in) W_out (T5 v1.1 / ByT5 "gated-gelu").

Probes: resid_pre, queries, keys, values (B, L, H, Dh), attn_logits, attn_weights (B, H, Lq, Lk),
attn_entropy, attn_max, attn_sink (B, H, Lq), attn_out, resid_mid, mlp_out, resid_post. In local
(chunked) attention the (B, H, L, L) logits and weights are block-diagonal (logits MASK_VALUE and
weights 0 outside a query's chunk) and attn_sink is the mass on the first key of the query's
chunk.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.config import require
from anisotropy_jax.models.attention import MASK_VALUE, attention_core
from anisotropy_jax.models.bert import PretrainedError
from anisotropy_jax.models.layers import gelu_exact, matmul_settings

Array = jax.Array
Probes = dict[str, Any]

NORMS = ("post_layer_norm", "pre_rms_norm")
ACTIVATIONS = ("gelu", "gelu_new", "relu", "silu")  # Hugging Face ACT2FN names
INITS = ("bert", "t5")


@dataclasses.dataclass(frozen=True)
class EncoderLayerConfig:
    """One layer. `d_head` may differ from d_model / num_heads (T5's d_kv). `init` is the
    Hugging Face initialisation of the untrained baseline: 'bert' (every kernel N(0, init_std²))
    or 't5' (T5PreTrainedModel._init_weights with initializer_factor = init_std)."""

    d_model: int
    num_heads: int
    d_head: int
    d_ff: int
    norm: str
    norm_eps: float
    use_bias: bool
    activation: str
    gated: bool = False
    logit_scale: float = 1.0
    local_chunk: int = 0  # > 0: CANINE local attention in chunks of this many positions
    init: str = "bert"
    init_std: float = 0.02
    precision: str = "highest"

    def __post_init__(self):
        for name in ("d_model", "num_heads", "d_head", "d_ff"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 1, name,
                    f"must be a positive integer, got {value!r}")
        require(self.norm in NORMS, "norm", f"unknown norm {self.norm!r}; choose one of {NORMS}")
        require(self.activation in ACTIVATIONS, "activation",
                f"unsupported activation {self.activation!r}; supported: {ACTIVATIONS}")
        require(self.init in INITS, "init", f"unknown init {self.init!r}; choose one of {INITS}")
        require(self.norm_eps > 0 and self.init_std > 0 and self.logit_scale > 0, "norm_eps",
                "norm_eps, init_std and logit_scale must be > 0")
        require(isinstance(self.local_chunk, int) and self.local_chunk >= 0, "local_chunk",
                f"must be an integer >= 0, got {self.local_chunk!r}")
        require(self.precision in ("highest", "default", "bfloat16"), "precision",
                f"unknown precision {self.precision!r}")

    @property
    def inner_dim(self) -> int:
        return self.num_heads * self.d_head


def activation_fn(name: str):
    """Hugging Face ACT2FN: 'gelu' exact erf, 'gelu_new' tanh approximation, 'relu', 'silu'."""
    return {"gelu": gelu_exact, "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
            "relu": jax.nn.relu, "silu": jax.nn.silu}[name]


class RMSNorm(nn.Module):
    """T5LayerNorm: x / sqrt(mean(x²) + eps) · scale (no mean subtraction, no bias), float32."""

    eps: float

    @nn.compact
    def __call__(self, x: Array) -> Array:
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],), jnp.float32)
        x = x.astype(jnp.float32)
        inv_rms = jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return x * inv_rms * scale.reshape((1,) * (x.ndim - 1) + (-1,))


def norm_layer(cfg: EncoderLayerConfig, name: str) -> nn.Module:
    if cfg.norm == "pre_rms_norm":
        return RMSNorm(cfg.norm_eps, name=name)
    return nn.LayerNorm(epsilon=cfg.norm_eps, dtype=jnp.float32, param_dtype=jnp.float32,
                        name=name)


def kernel_std(cfg: EncoderLayerConfig, name: str) -> float:
    """Standard deviation of a kernel at Hugging Face initialisation (see EncoderLayerConfig)."""
    if cfg.init == "bert":
        return cfg.init_std
    fan = {"query": cfg.d_model * cfg.d_head, "out": cfg.inner_dim, "fc_out": cfg.d_ff}
    return cfg.init_std * fan.get(name, cfg.d_model) ** -0.5


def dense(cfg: EncoderLayerConfig, features: int, name: str) -> nn.Dense:
    dtype, precision = matmul_settings(cfg)  # reads cfg.precision only
    return nn.Dense(features, use_bias=cfg.use_bias,
                    kernel_init=nn.initializers.normal(kernel_std(cfg, name)),
                    bias_init=nn.initializers.zeros, dtype=dtype, param_dtype=jnp.float32,
                    precision=precision, name=name)


def _local_core(q, k, v, cfg: EncoderLayerConfig, precision, key_mask_BxL):
    """Attention within consecutive chunks of cfg.local_chunk positions (the last may be
    shorter), each chunk its own softmax; probes assembled over the full length."""
    batch, seq_len = q.shape[:2]
    mixed, stats, logits, weights = [], {}, [], []
    starts = list(range(0, seq_len, cfg.local_chunk))
    for start in starts:
        end = min(seq_len, start + cfg.local_chunk)
        mask = None if key_mask_BxL is None else key_mask_BxL[:, start:end]
        out, probes = attention_core(q[:, start:end], k[:, start:end], v[:, start:end],
                                     scale=cfg.logit_scale, precision=precision,
                                     key_mask_BxL=mask)
        mixed.append(out)
        for name in ("attn_entropy", "attn_max", "attn_sink"):
            stats.setdefault(name, []).append(probes[name])
        logits.append((start, end, probes["attn_logits"]))
        weights.append((start, end, probes["attn_weights"]))
    full_logits = jnp.full((batch, cfg.num_heads, seq_len, seq_len), MASK_VALUE, jnp.float32)
    full_weights = jnp.zeros((batch, cfg.num_heads, seq_len, seq_len), jnp.float32)
    for (start, end, lg), (_, _, wt) in zip(logits, weights):
        full_logits = full_logits.at[:, :, start:end, start:end].set(lg)
        full_weights = full_weights.at[:, :, start:end, start:end].set(wt)
    probes = {name: jnp.concatenate(parts, axis=-1) for name, parts in stats.items()}
    probes.update(attn_logits=full_logits, attn_weights=full_weights)
    return jnp.concatenate(mixed, axis=1), probes


class Attention(nn.Module):
    """Multi-head self-attention (query, key, value, out); returns (output (B, L, D), probes)."""

    config: EncoderLayerConfig

    @nn.compact
    def __call__(self, x_BxLxD, key_mask_BxL, logit_bias) -> tuple[Array, Probes]:
        cfg = self.config
        batch, seq_len, _ = x_BxLxD.shape
        dtype, precision = matmul_settings(cfg)  # reads cfg.precision only
        heads = [dense(cfg, cfg.inner_dim, n)(x_BxLxD.astype(dtype)).reshape(
            batch, seq_len, cfg.num_heads, cfg.d_head) for n in ("query", "key", "value")]
        probes: Probes = dict(zip(("queries", "keys", "values"), heads))
        if cfg.local_chunk:
            mixed, core = _local_core(*heads, cfg, precision, key_mask_BxL)
        else:
            mixed, core = attention_core(*heads, scale=cfg.logit_scale, precision=precision,
                                         key_mask_BxL=key_mask_BxL, logit_bias=logit_bias)
        probes.update(core)
        mixed_BxLxI = mixed.reshape(batch, seq_len, cfg.inner_dim).astype(dtype)
        return dense(cfg, cfg.d_model, "out")(mixed_BxLxI).astype(jnp.float32), probes


class Mlp(nn.Module):
    """act(x W_in) W_out, or gated (act(x W_gate) ⊙ x W_in) W_out; float32 output."""

    config: EncoderLayerConfig

    @nn.compact
    def __call__(self, x_BxLxD: Array) -> Array:
        cfg = self.config
        dtype, _ = matmul_settings(cfg)
        x_BxLxD = x_BxLxD.astype(dtype)
        act = activation_fn(cfg.activation)
        h_BxLxF = act(dense(cfg, cfg.d_ff, "fc_gate" if cfg.gated else "fc_in")(x_BxLxD))
        if cfg.gated:
            h_BxLxF = h_BxLxF * dense(cfg, cfg.d_ff, "fc_in")(x_BxLxD)
        return dense(cfg, cfg.d_model, "fc_out")(h_BxLxF.astype(dtype)).astype(jnp.float32)


class EncoderLayer(nn.Module):
    """One layer; returns (resid_post (B, L, D) float32, probes)."""

    config: EncoderLayerConfig

    @nn.compact
    def __call__(self, x_BxLxD: Array, key_mask_BxL: Array | None = None,
                 logit_bias: Array | None = None) -> tuple[Array, Probes]:
        cfg = self.config
        x_BxLxD = x_BxLxD.astype(jnp.float32)
        pre = cfg.norm == "pre_rms_norm"
        probes: Probes = {"resid_pre": x_BxLxD}
        attn_in = norm_layer(cfg, "attention_norm")(x_BxLxD) if pre else x_BxLxD
        attn_out, attn_probes = Attention(cfg, name="attention")(attn_in, key_mask_BxL,
                                                                  logit_bias)
        probes.update(attn_probes)
        probes["attn_out"] = attn_out
        resid_mid = x_BxLxD + attn_out
        if not pre:
            resid_mid = norm_layer(cfg, "attention_norm")(resid_mid)
        probes["resid_mid"] = resid_mid
        mlp_in = norm_layer(cfg, "mlp_norm")(resid_mid) if pre else resid_mid
        mlp_out = Mlp(cfg, name="mlp")(mlp_in)
        probes["mlp_out"] = mlp_out
        resid_post = resid_mid + mlp_out
        if not pre:
            resid_post = norm_layer(cfg, "mlp_norm")(resid_post)
        probes["resid_post"] = resid_post
        return resid_post, probes


# --------------------------------------------------------------------------------------------
# Hugging Face tensors → parameters

class TensorReader:
    """Takes Hugging Face tensors by name (under `prefix`) as float32, recording the tensors
    used, missing, or of the wrong shape; `finish` raises one PretrainedError line for them."""

    def __init__(self, tensors: dict[str, np.ndarray], prefix: str = ""):
        self.tensors, self.prefix = tensors, prefix
        self.used: set[str] = set()
        self.missing: list[str] = []
        self.wrong: list[str] = []

    def get(self, name: str, shape: tuple[int, ...]) -> np.ndarray | None:
        key = self.prefix + name
        if key not in self.tensors:
            self.missing.append(key)
            return None
        value = np.asarray(self.tensors[key])
        self.used.add(key)
        if tuple(value.shape) != tuple(shape):
            self.wrong.append(f"{key} has shape {tuple(value.shape)}, expected {tuple(shape)}")
            return None
        if not jnp.issubdtype(value.dtype, jnp.floating):
            self.wrong.append(f"{key} has dtype {value.dtype}, expected float")
            return None
        return value.astype(np.float32)

    def linear(self, name: str, d_in: int, d_out: int, bias: bool = True) -> dict[str, Any]:
        """A Dense layer: the (out, in) weight transposed to the (in, out) kernel."""
        weight = self.get(name + ".weight", (d_out, d_in))
        params = {"kernel": None if weight is None else np.ascontiguousarray(weight.T)}
        if bias:
            params["bias"] = self.get(name + ".bias", (d_out,))
        return params

    def norm(self, name: str, width: int, bias: bool = True) -> dict[str, Any]:
        params = {"scale": self.get(name + ".weight", (width,))}
        if bias:
            params["bias"] = self.get(name + ".bias", (width,))
        return params

    def finish(self, source: str, layer_pattern: str, num_layers: int) -> list[str]:
        """Raises PretrainedError for missing or malformed tensors, or tensors of layers beyond
        `num_layers` (`layer_pattern` is a regex whose group 1 is the layer index); returns the
        names of the tensors not used."""
        if self.missing:
            shown = ", ".join(self.missing[:8])
            more = f", ... ({len(self.missing)} missing in all)" if len(self.missing) > 8 else ""
            raise PretrainedError(f"{source}: missing tensors {shown}{more}")
        if self.wrong:
            raise PretrainedError(f"{source}: {'; '.join(self.wrong[:4])}")
        unused = sorted(set(self.tensors) - self.used)
        beyond = [k for k in unused if (m := re.match(layer_pattern, k)) and
                  int(m.group(1)) >= num_layers]
        if beyond:
            raise PretrainedError(f"{source}: tensors of layers beyond num_layers={num_layers}, "
                                  f"e.g. {beyond[0]}")
        return unused


LAYER_PARTS = ("query", "key", "value", "out", "attention_norm", "fc_gate", "fc_in", "fc_out",
               "mlp_norm")


def layer_params(read: TensorReader, names: dict[str, str], cfg: EncoderLayerConfig
                 ) -> dict[str, Any]:
    """EncoderLayer parameters from the Hugging Face module names of one layer (`names` maps
    each of LAYER_PARTS the layer has to its module name)."""
    d, inner, f, bias = cfg.d_model, cfg.inner_dim, cfg.d_ff, cfg.use_bias
    attention = {part: read.linear(names[part], d, inner, bias) for part in ("query", "key",
                                                                             "value")}
    attention["out"] = read.linear(names["out"], inner, d, bias)
    mlp = {"fc_in": read.linear(names["fc_in"], d, f, bias),
           "fc_out": read.linear(names["fc_out"], f, d, bias)}
    if cfg.gated:
        mlp["fc_gate"] = read.linear(names["fc_gate"], d, f, bias)
    layer_norm_bias = cfg.norm == "post_layer_norm"
    return {"attention": attention, "mlp": mlp,
            "attention_norm": read.norm(names["attention_norm"], d, layer_norm_bias),
            "mlp_norm": read.norm(names["mlp_norm"], d, layer_norm_bias)}
