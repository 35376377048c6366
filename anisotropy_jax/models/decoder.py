"""The pre-norm causal decoder shared by the GPT-2, GPT-NeoX and Llama families.

One configurable stack covers the three (each family module maps its config.json and tensor names
onto it, `models/gpt2.py`, `models/gpt_neox.py`, `models/llama.py`):

  embeddings   token embedding (+ learned positions for GPT-2)
  block        x → norm → attention (rotary on the first `rotary_dims` dims of each head, grouped
               key/value heads) → + x; then the MLP on norm(resid_mid), or, with
               `parallel_residual` (GPT-NeoX), on norm(x): resid_post = x + attn_out + mlp_out
  final norm   LayerNorm or RMSNorm after the last block

Probes of a block follow the contract of models/block.py, with two family-specific readings:
queries and keys are taken after the rotary rotation (what the logits use), and with grouped
key/value heads (Llama GQA) keys and values are repeated to the H query heads, as attention uses
them. With `parallel_residual`, resid_mid = x + attn_out is not the MLP's input (norm(x) is).

The forward equals Hugging Face's within 1e-4 in float32 for every hidden state and the attention
probabilities (tests/test_families_causal.py).
"""
from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.models.attention import attention_core
from anisotropy_jax.models.bert import PretrainedError
from anisotropy_jax.models.layers import ACTIVATIONS, RmsNorm, precision_settings
from anisotropy_jax.models.rotary import apply_rotary

Array = jax.Array
Probes = dict[str, Any]
NORMS = ("layer", "rms")


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
    """A causal decoder (module docstring). `output_embedding`: the checkpoint has an untied LM
    head (a (V, D) output embedding kept for the embedding analysis, unused by the forward)."""

    model_type: str
    num_layers: int
    d_model: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    d_ff: int
    vocab_size: int
    max_len: int
    norm: str = "layer"
    norm_eps: float = 1e-5
    activation: str = "gelu"
    gated_mlp: bool = False
    parallel_residual: bool = False
    learned_positions: bool = False
    rotary_dims: int = 0
    rotary_base: float = 10000.0
    qkv_bias: bool = True
    out_bias: bool = True
    mlp_bias: bool = True
    tie_embeddings: bool = True
    output_embedding: bool = False
    init_std: float = 0.02
    residual_init_std: float = 0.02
    precision: str = "highest"

    def __post_init__(self):
        for name in ("num_layers", "d_model", "num_heads", "num_kv_heads", "head_dim", "d_ff",
                     "vocab_size", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_attention_heads {self.num_heads} is not a multiple of "
                             f"num_key_value_heads {self.num_kv_heads}")
        if self.norm not in NORMS:
            raise ValueError(f"norm {self.norm!r} not in {NORMS}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"hidden_act {self.activation!r} not supported (supported: "
                             f"{sorted(ACTIVATIONS)})")
        if self.rotary_dims % 2 or not 0 <= self.rotary_dims <= self.head_dim:
            raise ValueError(f"rotary width {self.rotary_dims} must be even and <= head_dim "
                             f"{self.head_dim}")
        precision_settings(self.precision)


def _norm(cfg: DecoderConfig, name: str) -> nn.Module:
    if cfg.norm == "rms":
        return RmsNorm(epsilon=cfg.norm_eps, name=name)
    return nn.LayerNorm(epsilon=cfg.norm_eps, dtype=jnp.float32, param_dtype=jnp.float32,
                        name=name)


def _dense(cfg: DecoderConfig, features: int, use_bias: bool, name: str,
           std: float | None = None) -> nn.Dense:
    dtype, precision = precision_settings(cfg.precision)
    return nn.Dense(features, use_bias=use_bias, dtype=dtype, param_dtype=jnp.float32,
                    precision=precision, name=name,
                    kernel_init=nn.initializers.normal(cfg.init_std if std is None else std),
                    bias_init=nn.initializers.zeros)


class DecoderAttention(nn.Module):
    config: DecoderConfig

    @nn.compact
    def __call__(self, x_BxLxD: Array, positions_L: Array, key_mask_BxL: Array | None
                 ) -> tuple[Array, Probes]:
        cfg = self.config
        batch, seq_len, _ = x_BxLxD.shape
        heads, kv_heads, dh = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        _, precision = precision_settings(cfg.precision)
        q = _dense(cfg, heads * dh, cfg.qkv_bias, "query")(x_BxLxD)
        k = _dense(cfg, kv_heads * dh, cfg.qkv_bias, "key")(x_BxLxD)
        v = _dense(cfg, kv_heads * dh, cfg.qkv_bias, "value")(x_BxLxD)
        q = q.reshape(batch, seq_len, heads, dh)
        k = k.reshape(batch, seq_len, kv_heads, dh)
        v = v.reshape(batch, seq_len, kv_heads, dh)
        if cfg.rotary_dims:
            q = apply_rotary(q, positions_L, cfg.rotary_dims, cfg.rotary_base)
            k = apply_rotary(k, positions_L, cfg.rotary_dims, cfg.rotary_base)
        if kv_heads != heads:  # query head h reads key/value head h // (H / H_kv)
            k = jnp.repeat(k, heads // kv_heads, axis=2)
            v = jnp.repeat(v, heads // kv_heads, axis=2)
        probes: Probes = {"queries": q, "keys": k, "values": v}
        mixed, core = attention_core(q, k, v, scale=dh ** -0.5, precision=precision, causal=True,
                                     key_mask_BxL=key_mask_BxL)
        probes.update(core)
        out = _dense(cfg, cfg.d_model, cfg.out_bias, "out", cfg.residual_init_std)(
            mixed.reshape(batch, seq_len, heads * dh))
        return out.astype(jnp.float32), probes


class DecoderMlp(nn.Module):
    """fc_out(act(fc_in(x))), or with `gated_mlp` fc_out(act(fc_gate(x)) · fc_in(x))."""

    config: DecoderConfig

    @nn.compact
    def __call__(self, x_BxLxD: Array) -> Array:
        cfg = self.config
        act = ACTIVATIONS[cfg.activation]
        h = _dense(cfg, cfg.d_ff, cfg.mlp_bias, "fc_in")(x_BxLxD)
        if cfg.gated_mlp:
            h = act(_dense(cfg, cfg.d_ff, cfg.mlp_bias, "fc_gate")(x_BxLxD)) * h
        else:
            h = act(h)
        out = _dense(cfg, cfg.d_model, cfg.mlp_bias, "fc_out", cfg.residual_init_std)(h)
        return out.astype(jnp.float32)


class DecoderBlock(nn.Module):
    config: DecoderConfig

    @nn.compact
    def __call__(self, x_BxLxD: Array, positions_L: Array, key_mask_BxL: Array | None
                 ) -> tuple[Array, Probes]:
        cfg = self.config
        probes: Probes = {"resid_pre": x_BxLxD}
        attn_out, attn_probes = DecoderAttention(cfg, name="attention")(
            _norm(cfg, "attention_norm")(x_BxLxD), positions_L, key_mask_BxL)
        probes.update(attn_probes)
        probes["attn_out"] = attn_out
        resid_mid = x_BxLxD + attn_out
        probes["resid_mid"] = resid_mid
        mlp_in = x_BxLxD if cfg.parallel_residual else resid_mid
        mlp_out = DecoderMlp(cfg, name="mlp")(_norm(cfg, "mlp_norm")(mlp_in))
        probes["mlp_out"] = mlp_out
        probes["resid_post"] = resid_mid + mlp_out
        return probes["resid_post"], probes


class Decoder(nn.Module):
    """Embeddings → blocks → final norm; returns (final_hidden, probes) (registry.apply_fn)."""

    config: DecoderConfig

    @nn.compact
    def __call__(self, tokens_BxL: Array, key_mask_BxL: Array | None = None
                 ) -> tuple[Array, Probes]:
        cfg = self.config
        seq_len = tokens_BxL.shape[1]
        if seq_len > cfg.max_len:
            raise ValueError(f"sequence length {seq_len} > max_position_embeddings {cfg.max_len}")
        init = nn.initializers.normal(cfg.init_std)
        positions_L = jnp.arange(seq_len)
        x = nn.Embed(cfg.vocab_size, cfg.d_model, embedding_init=init,
                     name="token_embedding")(tokens_BxL)
        if cfg.learned_positions:
            x = x + nn.Embed(cfg.max_len, cfg.d_model, embedding_init=init,
                             name="position_embedding")(positions_L)[None]
        if cfg.output_embedding and not cfg.tie_embeddings:
            self.param("output_embedding", init, (cfg.vocab_size, cfg.d_model), jnp.float32)
        x = x.astype(jnp.float32)
        probes: Probes = {"embeddings": x, "blocks": []}
        for layer in range(cfg.num_layers):
            x, block_probes = DecoderBlock(cfg, name=f"block_{layer}")(x, positions_L,
                                                                       key_mask_BxL)
            probes["blocks"].append(block_probes)
        probes["final_norm_in"] = x
        x = _norm(cfg, "final_norm")(x)
        probes["final_hidden"] = x
        return x, probes


# --------------------------------------------------------------------------------------------
# The family interface (models/registry.py), shared by the three decoder families

def state_labels(cfg: DecoderConfig) -> tuple[str, ...]:
    return ("embeddings",) + tuple(f"layer_{i + 1}" for i in range(cfg.num_layers)) + (
        "final_norm",)


@functools.lru_cache(maxsize=8)
def apply_fn(cfg: DecoderConfig) -> Callable[..., Any]:
    module = Decoder(cfg)
    return jax.jit(lambda params, tokens, mask=None: module.apply(params, tokens, mask))


@functools.lru_cache(maxsize=8)
def hidden_states_fn(cfg: DecoderConfig) -> Callable[..., Array]:
    """jit(params, tokens, token_types (ignored), mask) → (num_layers + 2, B, L, D): embeddings,
    every block's output, the final norm's output (`state_labels`)."""
    module = Decoder(cfg)

    @jax.jit
    def forward(params, tokens_BxL, types_BxL, mask_BxL):
        del types_BxL
        _, probes = module.apply(params, tokens_BxL, mask_BxL)
        return jnp.stack([probes["embeddings"]] + [b["resid_post"] for b in probes["blocks"]]
                         + [probes["final_hidden"]])

    return forward


@functools.lru_cache(maxsize=8)
def _init_fn(cfg: DecoderConfig) -> Callable[..., Any]:
    return jax.jit(Decoder(cfg).init)


def init_params(cfg: DecoderConfig, key: Array) -> Any:
    """Hugging Face's init: N(0, init_std²) kernels and embeddings (N(0, residual_init_std²) for
    the attention and MLP output kernels), zero biases, norm gains 1 (and LayerNorm bias 0)."""
    return _init_fn(cfg)(key, jnp.zeros((1, 2), jnp.int32))


def embedding_matrices(params: Any, cfg: DecoderConfig) -> dict[str, np.ndarray | None]:
    tree = params["params"]
    token = np.asarray(tree["token_embedding"]["embedding"])
    output = token if cfg.tie_embeddings else (
        np.asarray(tree["output_embedding"]) if "output_embedding" in tree else None)
    return {"input": token, "output": output,
            "final_norm_scale": np.asarray(tree["final_norm"]["scale"])}


def summary(cfg: DecoderConfig) -> dict[str, Any]:
    out = {"num_layers": cfg.num_layers, "d_model": cfg.d_model, "num_heads": cfg.num_heads,
           "num_kv_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim, "d_ff": cfg.d_ff,
           "vocab_size": cfg.vocab_size, "max_len": cfg.max_len, "norm": cfg.norm,
           "rotary_dims": cfg.rotary_dims, "parallel_residual": cfg.parallel_residual,
           "tie_embeddings": cfg.tie_embeddings}
    out["untrained_init"] = (f"normal(0, {cfg.init_std}^2) kernels and embeddings (output "
                             f"projections normal(0, {cfg.residual_init_std:.4g}^2)), zero "
                             "biases, norm gains 1")
    return out


def pad_token_id(hf_config: dict[str, Any]) -> int:
    """config.json's pad_token_id, else its eos_token_id, else 0 (padding is masked anyway)."""
    for key in ("pad_token_id", "eos_token_id"):
        value = hf_config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


# --------------------------------------------------------------------------------------------
# Conversion helpers

class TensorReader:
    """Takes Hugging Face tensors by name (after a prefix), checks shapes, records use."""

    def __init__(self, tensors: dict[str, np.ndarray], prefix: str):
        self.tensors, self.prefix = tensors, prefix
        self.used: set[str] = set()
        self.missing: list[str] = []
        self.wrong: list[str] = []

    def get(self, name: str, shape: Sequence[int], prefixed: bool = True) -> np.ndarray | None:
        """The float32 tensor `prefix + name` (just `name` when not `prefixed`: e.g. an LM head
        stored beside the base model), or None with the problem recorded."""
        full = self.prefix + name if prefixed else name
        if full not in self.tensors:
            self.missing.append(full)
            return None
        value = np.asarray(self.tensors[full])
        self.used.add(full)
        if tuple(value.shape) != tuple(shape):
            self.wrong.append(f"{full} has shape {tuple(value.shape)}, expected {tuple(shape)}")
            return None
        if not jnp.issubdtype(value.dtype, jnp.floating):
            self.wrong.append(f"{full} has dtype {value.dtype}, expected float")
            return None
        return value.astype(np.float32)

    def linear(self, name: str, d_in: int, d_out: int, bias: bool) -> dict[str, Any]:
        """nn.Linear (out, in) weight → Dense kernel (in, out)."""
        weight = self.get(name + ".weight", (d_out, d_in))
        out = {"kernel": None if weight is None else np.ascontiguousarray(weight.T)}
        if bias:
            out["bias"] = self.get(name + ".bias", (d_out,))
        return out

    def norm(self, name: str, width: int, bias: bool) -> dict[str, Any]:
        out = {"scale": self.get(name + ".weight", (width,))}
        if bias:
            out["bias"] = self.get(name + ".bias", (width,))
        return out

    def finish(self, params: dict[str, Any], source: str, layer_pattern: str, num_layers: int
               ) -> tuple[dict[str, Any], list[str]]:
        """({"params": tree}, unused names), or a one-line PretrainedError naming `source` and
        the missing or misshapen tensors, or a tensor of a layer beyond num_layers."""
        if self.missing:
            shown = ", ".join(self.missing[:8]) + (
                f", ... ({len(self.missing)} missing in all)" if len(self.missing) > 8 else "")
            raise PretrainedError(f"{source}: missing tensors {shown}")
        if self.wrong:
            raise PretrainedError(f"{source}: {'; '.join(self.wrong[:4])}")
        unused = sorted(set(self.tensors) - self.used)
        extra = [k for k in unused if re.match(re.escape(self.prefix) + layer_pattern, k)]
        if extra:
            raise PretrainedError(f"{source}: tensors of layers beyond num_hidden_layers="
                                  f"{num_layers}, e.g. {extra[0]}")
        return {"params": jax.tree.map(jnp.asarray, params)}, unused


def detect_prefix(tensors: dict[str, np.ndarray], embedding_name: str,
                  prefixes: Sequence[str]) -> str:
    """The prefix ('' or e.g. 'model.') under which `embedding_name` is stored."""
    for prefix in ("",) + tuple(prefixes):
        if prefix + embedding_name in tensors:
            return prefix
    return ""


def config_error(source: str, error: Exception) -> PretrainedError:
    return PretrainedError(f"{source}: {' '.join(str(error).split())}")


def require_keys(hf_config: dict[str, Any], keys: Sequence[str], source: str) -> None:
    missing = [k for k in keys if k not in hf_config]
    if missing:
        raise PretrainedError(f"{source}: missing required keys {missing}")
