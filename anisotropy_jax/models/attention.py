"""Multi-head self-attention as named steps: project → logits → mask → statistics → mix → output.

Explicit einsums; logits and softmax in float32 at every matmul precision. The attention core —
'xla' (einsums; the (B, H, L, L) logits and weights are probes) or 'pallas' (one fused GPU kernel,
`fused_attention`, that never writes them) — is chosen in one place, `_use_fused_kernel`.

A caller may supply the input projection instead of letting attention compute x·[W_q W_k W_v] + b,
through the small `PrecomputedQKV` protocol (the bias sweep shares one projection across the bias
norms of a seed this way: studies/sweep/affine.py). Attention never learns what the projection
stands for.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import flax.linen as nn
import jax
import jax.numpy as jnp

from anisotropy_jax import metrics
from anisotropy_jax.config import BlockConfig
from anisotropy_jax.models import fused_attention
from anisotropy_jax.models.layers import DenseParams, dense, layer_norm, matmul_settings

Array = jax.Array
Probes = dict[str, Any]

# Masked logits get the most negative float32: exp underflows to exactly 0 after max-subtraction,
# and, unlike -inf, a row whose keys are all masked stays finite (uniform) instead of NaN.
MASK_VALUE = float(jnp.finfo(jnp.float32).min)
QKV_NAMES = ("query", "key", "value")


class AffineQKV(NamedTuple):
    """A projection given as base + t·slope: `base_BxLx3D` (B, L, 3D), `slope_3D` (3D,), scalar t."""

    base_BxLx3D: Array
    slope_3D: Array
    coefficient: Array


class PrecomputedQKV(Protocol):
    """An attention input projection computed by the caller.

    It must equal x·[W_q W_k W_v] + b for the x passed alongside and the attention's own
    parameters (the caller's tests check this; tests/test_sweep.py for the sweep's).
    """

    def assemble(self) -> Array:
        """The projection, (B, L, 3D) float32."""

    def affine_form(self) -> AffineQKV | None:
        """The same projection as base + t·slope, or None. The fused kernel then forms q and v on
        chip and never writes the per-t projection."""


class StoredQKV(NamedTuple):
    """A projection already in memory (B, L, 3D): the plain `PrecomputedQKV`."""

    qkv_BxLx3D: Array

    def assemble(self) -> Array:
        return self.qkv_BxLx3D

    def affine_form(self) -> None:
        return None


def attention_mask(seq_len: int, causal: bool, key_mask_BxL: Array | None) -> Array | None:
    """Boolean (B|1, 1, Lq, Lk) mask of visible keys, or None when everything is visible."""
    mask = None
    if causal:
        mask = jnp.tril(jnp.ones((seq_len, seq_len), dtype=bool))[None, None]
    if key_mask_BxL is not None:
        key_mask = key_mask_BxL.astype(bool)[:, None, None, :]
        mask = key_mask if mask is None else jnp.logical_and(mask, key_mask)
    return mask


def concat_qkv(dense_params) -> tuple[Array, Array | None]:
    """[(kernel (D, D), bias (D,) | None)] × 3 → (kernel (D, 3D), bias (3D,) | None)."""
    kernel_Dx3D = jnp.concatenate([kernel for kernel, _ in dense_params], axis=1)
    biases = [bias for _, bias in dense_params]
    bias_3D = None if biases[0] is None else jnp.concatenate(biases)
    return kernel_Dx3D, bias_3D


def stored_qkv(attention_params: Any) -> tuple[Array, Array | None]:
    """(kernel (D, 3D), bias (3D,) | None) of the query/key/value projections of stored
    `SelfAttention` parameters (the concatenation `SelfAttention` applies to its own)."""
    return concat_qkv([(attention_params[n]["kernel"], attention_params[n].get("bias"))
                       for n in QKV_NAMES])


def split_heads(qkv_BxLx3D: Array, heads: int) -> tuple[Array, Array, Array]:
    """(B, L, 3D) → q, k, v, each (B, L, H, Dh)."""
    batch, seq_len, width = qkv_BxLx3D.shape
    return tuple(part.reshape(batch, seq_len, heads, width // (3 * heads))
                 for part in jnp.split(qkv_BxLx3D, 3, axis=-1))


def attention_logits(q_BxLxHxDh: Array, k_BxLxHxDh: Array, scale: float,
                     precision: jax.lax.Precision) -> Array:
    """q·k · scale, (B, H, Lq, Lk) float32."""
    return jnp.einsum("bqhd,bkhd->bhqk", q_BxLxHxDh, k_BxLxHxDh, precision=precision,
                      preferred_element_type=jnp.float32) * scale


def mix_values(weights_BxHxLxL: Array, v_BxLxHxDh: Array, precision) -> Array:
    """Σ_k p_qk v_k per head → (B, L, H, Dh) float32."""
    # Heads-major output, then one transpose: with "->bqhd" directly, XLA on the CPU lowered this
    # product 2-3× slower (39 vs 14 ms for B = 8, L = 128, 12 heads).
    mixed_BxHxLxDh = jnp.einsum("bhqk,bkhd->bhqd", weights_BxHxLxL.astype(v_BxLxHxDh.dtype),
                                v_BxLxHxDh, precision=precision,
                                preferred_element_type=jnp.float32)
    return mixed_BxHxLxDh.transpose(0, 2, 1, 3)


def attention_core(q_BxLxHxDh: Array, k_BxLxHxDh: Array, v_BxLxHxDh: Array, *, scale: float,
                   precision, causal: bool = False, key_mask_BxL: Array | None = None,
                   logit_bias: Array | None = None) -> tuple[Array, Probes]:
    """logits → mask → statistics → mix: the plain core every family shares.

    `logit_bias` (broadcastable to (B, H, Lq, Lk), e.g. a relative-position bias) is added to the
    scaled logits before masking. Returns (mixed (B, L, H, Dh) float32, probes attn_logits,
    attn_weights and the per-query statistics attn_entropy, attn_max, attn_sink).
    """
    logits_BxHxLxL = attention_logits(q_BxLxHxDh, k_BxLxHxDh, scale, precision)
    if logit_bias is not None:
        logits_BxHxLxL = logits_BxHxLxL + jnp.asarray(logit_bias, jnp.float32)
    mask = attention_mask(q_BxLxHxDh.shape[1], causal, key_mask_BxL)
    if mask is not None:
        logits_BxHxLxL = jnp.where(mask, logits_BxHxLxL, MASK_VALUE)
    weights_BxHxLxL = jax.nn.softmax(logits_BxHxLxL, axis=-1)
    probes = {"attn_logits": logits_BxHxLxL, "attn_weights": weights_BxHxLxL}
    stats = metrics.attention_statistics(logits_BxHxLxL, mask)
    probes.update({f"attn_{name}": value for name, value in stats.items()})
    return mix_values(weights_BxHxLxL, v_BxLxHxDh, precision), probes


def xla_core(q, k, v, cfg: BlockConfig, key_mask_BxL: Array | None) -> tuple[Array, Probes]:
    """`attention_core` with the block's scale, precision and mask."""
    _, precision = matmul_settings(cfg)
    return attention_core(q, k, v, scale=fused_attention.logit_scale(cfg.d_head,
                                                                     cfg.logit_temperature),
                          precision=precision, causal=cfg.causal, key_mask_BxL=key_mask_BxL)


def fused_core(q, k, v, cfg: BlockConfig, affine: AffineQKV | None,
               reduction_statistics: bool = False) -> tuple[Array, Probes]:
    """The fused kernel: output and the per-query statistics, no (B, H, L, L) tensor written.
    With an affine projection, q and k, v are the base parts and the slopes go to the kernel.
    `reduction_statistics`: also the kernel's on-chip inputs of the sweep's metric reduction
    (`fused_attention.REDUCTION_STATISTICS`)."""
    dtype, precision = matmul_settings(cfg)
    slopes = {}
    if affine is not None:
        q, k, v = split_heads(affine.base_BxLx3D, cfg.num_heads)
        k, v = k.astype(dtype), v.astype(dtype)  # q stays float32: q + t·slope is formed on chip
        slope_q, slope_k, slope_v = (part.reshape(cfg.num_heads, cfg.d_head)
                                     for part in jnp.split(affine.slope_3D, 3))
        slopes = dict(query_slope_HxDh=slope_q, value_slope_HxDh=slope_v,
                      coefficient=affine.coefficient)
        if reduction_statistics:
            slopes["key_slope_HxDh"] = slope_k
    mixed, stats = fused_attention.fused_attention(
        q, k, v, logit_scale=fused_attention.logit_scale(cfg.d_head, cfg.logit_temperature),
        causal=cfg.causal, precision=precision, interpret=jax.default_backend() != "gpu",
        reduction_statistics=reduction_statistics,
        **fused_attention.tiling(k.dtype, q.shape[1]), **slopes)
    return mixed, stats


def _use_fused_kernel(cfg: BlockConfig, seq_len: int, key_mask_BxL, initializing: bool) -> bool:
    """The one place where the core is chosen. `init` (often on dummy shapes) always takes the
    plain path: the core owns no parameters."""
    if cfg.attention_impl != "pallas" or initializing:
        return False
    if key_mask_BxL is not None or not fused_attention.supported(seq_len, cfg.d_head):
        raise ValueError(
            f"model.attention_impl: 'pallas' needs L and Dh powers of two >= 16, "
            f"L <= {fused_attention.MAX_SEQ_LEN} and no padding mask (L={seq_len}, "
            f"Dh={cfg.d_head}, mask={key_mask_BxL is not None})")
    return True


class SelfAttention(nn.Module):
    """Multi-head self-attention; returns (output (B, L, D) float32, probes)."""

    config: BlockConfig

    @nn.compact
    def __call__(self, x_BxLxD: Array, key_mask_BxL: Array | None = None,
                 precomputed_qkv: PrecomputedQKV | None = None,
                 reduction_statistics: bool = False) -> tuple[Array, Probes]:
        """`reduction_statistics`: with the fused kernel, add its on-chip statistics for the
        bias sweep's metric reduction to the probes (`fused_core`); the plain path ignores it
        (its logits and weights are probes already)."""
        cfg = self.config
        batch, seq_len, d_model = x_BxLxD.shape
        if d_model != cfg.d_model:
            raise ValueError(f"input width {d_model} != model.d_model {cfg.d_model}")
        dtype, precision = matmul_settings(cfg)

        # project: one (D, 3D) matmul (a wider GEMM runs closer to the matmul rate than three
        # D×D ones); the parameters stay three Dense-shaped sets.
        dense_qkv = [DenseParams(cfg, d_model, d_model, name=n)() for n in QKV_NAMES]
        if precomputed_qkv is None:
            kernel_Dx3D, bias_3D = concat_qkv(dense_qkv)
            qkv_BxLx3D = jnp.dot(x_BxLxD.astype(dtype), kernel_Dx3D.astype(dtype),
                                 precision=precision)
            if bias_3D is not None:
                qkv_BxLx3D = qkv_BxLx3D + bias_3D.astype(dtype)[None, None, :]
        else:
            qkv_BxLx3D = precomputed_qkv.assemble()
            if qkv_BxLx3D.shape != (batch, seq_len, 3 * d_model):
                raise ValueError(f"precomputed_qkv: shape {qkv_BxLx3D.shape} != "
                                 f"{(batch, seq_len, 3 * d_model)}")
        q, k, v = split_heads(qkv_BxLx3D.astype(dtype), cfg.num_heads)
        if cfg.attention == "qk_layernorm":
            q = layer_norm(cfg, "query_norm", use_bias=False)(q)
            k = layer_norm(cfg, "key_norm", use_bias=False)(k)
        probes: Probes = {"queries": q, "keys": k, "values": v}

        # logits → mask → statistics → mix
        if _use_fused_kernel(cfg, seq_len, key_mask_BxL, self.is_initializing()):
            affine = None if precomputed_qkv is None else precomputed_qkv.affine_form()
            mixed_BxLxHxDh, core_probes = fused_core(q, k, v, cfg, affine, reduction_statistics)
        else:
            mixed_BxLxHxDh, core_probes = xla_core(q, k, v, cfg, key_mask_BxL)
        probes.update(core_probes)

        # output
        mixed_BxLxD = mixed_BxLxHxDh.reshape(batch, seq_len, d_model)
        return dense(cfg, d_model, "out")(mixed_BxLxD).astype(jnp.float32), probes
