"""Multi-head self-attention as named steps: project → logits → mask → normalise → mix → output.

Explicit einsums; logits and their normalisation in float32 at every matmul precision. Every
family's attention is this one module (`SelfAttention`), switched by its BlockConfig: grouped
key/value heads, rotary positions, a QK norm, an additive logit bias (relative positions, given
by the stack), local chunks (CANINE), a head-wise sigmoid output gate. The normalisation is one
named, selectable function (`NORMALIZATIONS`: softmax, off-by-one, sigmoid with a scalar or a
per-query bias, softpick, clipped softmax; `BlockConfig.attention_normalization`). The core —
'xla' (einsums; the (B, H, L, L) logits and weights are probes), the chunked local core, or a
fused one without them: 'pallas' (`fused_attention`, forward only), 'dot_product' (cuDNN on GPUs),
both softmax only, or 'flash' (`flash_attention`, with a backward) — is chosen in one place, the
core step of `SelfAttention` (`_use_fused_kernel`, `_unfused_core`).

A caller may supply the input projection x·[W_q W_k W_v] + b through the small `PrecomputedQKV`
protocol (the bias sweep shares one projection across the bias norms of a seed this way:
studies/sweep/affine.py). Attention never learns what the projection stands for.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Protocol

import flax.linen as nn
import jax
import jax.numpy as jnp

from anisotropy_jax import metrics
from anisotropy_jax.config import BlockConfig
from anisotropy_jax.models import flash_attention, fused_attention
from anisotropy_jax.models.layers import DenseParams, Tapped, dense, matmul_settings, norm
# The normalisation step's registry, name → function (models/normalizations.py).
from anisotropy_jax.models.normalizations import NORMALIZATIONS, clipped_softmax, softmax
from anisotropy_jax.models.rotary import apply_rotary

Array = jax.Array
Probes = dict[str, Any]
Tap = Callable[[str, Array], Array] | None  # a hook point, (name, x) → x: `layers.Tapped.tap`

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
    """An attention input projection computed by the caller: it must equal x·[W_q W_k W_v] + b
    for the x passed alongside and the attention's own parameters (tests/test_sweep.py)."""

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


def attention_mask(seq_len: int, causal: bool, key_mask_BxL: Array | None,
                   sliding_window: int = 0) -> Array | None:
    """Boolean (B|1, 1, Lq, Lk) mask of visible keys, or None when everything is visible.
    `sliding_window` > 0: query i sees keys j with i − j < sliding_window only (Gemma-3)."""
    mask = None
    if causal:
        mask = jnp.tril(jnp.ones((seq_len, seq_len), dtype=bool))[None, None]
    if sliding_window:
        near = jnp.triu(jnp.ones((seq_len, seq_len), dtype=bool), 1 - sliding_window)[None, None]
        mask = near if mask is None else jnp.logical_and(mask, near)
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


def split_heads(qkv_BxLxW: Array, heads: int, kv_heads: int | None = None
                ) -> tuple[Array, Array, Array]:
    """(B, L, (H + 2·H_kv)·Dh) → q (B, L, H, Dh), k and v (B, L, H_kv, Dh)."""
    batch, seq_len, width = qkv_BxLxW.shape
    kv_heads = heads if kv_heads is None else kv_heads
    d_head = width // (heads + 2 * kv_heads)
    if kv_heads == heads:
        parts = jnp.split(qkv_BxLxW, 3, axis=-1)
    else:
        parts = jnp.split(qkv_BxLxW, [heads * d_head, (heads + kv_heads) * d_head], axis=-1)
    return tuple(part.reshape(batch, seq_len, n, d_head)
                 for part, n in zip(parts, (heads, kv_heads, kv_heads)))


def normalization_function(cfg: BlockConfig) -> Callable[[Array, Array | None], Array]:
    """The block's normalisation, with its parameters (clipped softmax: ζ, γ from cfg)."""
    if cfg.attention_normalization == "clipped_softmax":
        return functools.partial(clipped_softmax, zeta=cfg.clip_zeta, gamma=cfg.clip_gamma)
    return NORMALIZATIONS[cfg.attention_normalization]


def attention_logits(q_BxLxHxDh: Array, k_BxLxHxDh: Array, scale: float,
                     precision: jax.lax.Precision) -> Array:
    """q·k · scale, (B, H, Lq, Lk) float32."""
    return jnp.einsum("bqhd,bkhd->bhqk", q_BxLxHxDh, k_BxLxHxDh, precision=precision,
                      preferred_element_type=jnp.float32) * scale


def mix_values(weights_BxHxLxL: Array, v_BxLxHxDh: Array, precision) -> Array:
    """Σ_k p_qk v_k per head → (B, L, H, Dh) float32."""
    # Heads-major output, then one transpose: with "->bqhd" directly, XLA on the CPU lowered this
    # product several times slower (docs/PERFORMANCE.md).
    mixed_BxHxLxDh = jnp.einsum("bhqk,bkhd->bhqd", weights_BxHxLxL.astype(v_BxLxHxDh.dtype),
                                v_BxLxHxDh, precision=precision,
                                preferred_element_type=jnp.float32)
    return mixed_BxHxLxDh.transpose(0, 2, 1, 3)


def attention_core(q_BxLxHxDh: Array, k_BxLxHxDh: Array, v_BxLxHxDh: Array, *, scale: float,
                   precision, causal: bool = False, key_mask_BxL: Array | None = None,
                   logit_bias: Array | None = None, normalization: str | Callable = "softmax",
                   sliding_window: int = 0, tap: Tap = None) -> tuple[Array, Probes]:
    """logits → mask → normalise → mix, and the per-query statistics: the plain core.

    `logit_bias` (broadcastable to (B, H, Lq, Lk), e.g. a relative-position bias) is added to the
    scaled logits before masking. `normalization`: a NORMALIZATIONS name or function. Returns
    (mixed (B, L, H, Dh) float32, probes attn_logits, attn_weights and the per-query statistics
    attn_entropy, attn_max, attn_sink; for a normalisation other than softmax, of the weights as
    given (`metrics.attention_statistics`), with attn_mass). `tap` (a hook point): the masked
    logits and the weights pass through it; weights it changes give the statistics themselves.
    """
    tap = tap or (lambda name, value: value)
    normalize = NORMALIZATIONS[normalization] if isinstance(normalization, str) else normalization
    mask = attention_mask(q_BxLxHxDh.shape[1], causal, key_mask_BxL, sliding_window)
    logits_BxHxLxL = tap("attn_logits", masked_logits(q_BxLxHxDh, k_BxLxHxDh, scale, precision,
                                                      logit_bias, mask))
    normalized_BxHxLxL = normalize(logits_BxHxLxL, mask)
    weights_BxHxLxL = tap("attn_weights", normalized_BxHxLxL)
    probes = {"attn_logits": logits_BxHxLxL, "attn_weights": weights_BxHxLxL}
    from_logits = normalize is softmax and weights_BxHxLxL is normalized_BxHxLxL
    stats = metrics.attention_statistics(
        logits_BxHxLxL, mask, weights=None if from_logits else weights_BxHxLxL)
    probes.update({f"attn_{name}": value for name, value in stats.items()})
    return mix_values(weights_BxHxLxL, v_BxLxHxDh, precision), probes


def masked_logits(q_BxLxHxDh: Array, k_BxLxHxDh: Array, scale: float, precision,
                  logit_bias: Array | None, mask: Array | None) -> Array:
    """q·k · scale (+ logit_bias), masked keys MASK_VALUE: (B, H, Lq, Lk) float32."""
    logits_BxHxLxL = attention_logits(q_BxLxHxDh, k_BxLxHxDh, scale, precision)
    if logit_bias is not None:
        logits_BxHxLxL = logits_BxHxLxL + jnp.asarray(logit_bias, jnp.float32)
    if mask is not None:
        logits_BxHxLxL = jnp.where(mask, logits_BxHxLxL, MASK_VALUE)
    return logits_BxHxLxL


def block_logit_scale(cfg: BlockConfig) -> float:
    """The factor of q·k: cfg.logit_scale when set (T5: 1), else 1/(√Dh τ)."""
    if cfg.logit_scale is not None:
        return cfg.logit_scale
    return fused_attention.logit_scale(cfg.d_head, cfg.logit_temperature)


def xla_core(q, k, v, cfg: BlockConfig, key_mask_BxL: Array | None,
             logit_bias: Array | None = None, tap: Tap = None) -> tuple[Array, Probes]:
    """`attention_core` with the block's scale, precision, mask and normalisation."""
    _, precision = matmul_settings(cfg)
    return attention_core(q, k, v, scale=block_logit_scale(cfg), precision=precision,
                          causal=cfg.causal, key_mask_BxL=key_mask_BxL, logit_bias=logit_bias,
                          normalization=normalization_function(cfg),
                          sliding_window=cfg.sliding_window, tap=tap)


def local_core(q, k, v, cfg: BlockConfig, key_mask_BxL: Array | None, tap: Tap = None
               ) -> tuple[Array, Probes]:
    """Attention within consecutive chunks of cfg.local_chunk positions (the last may be shorter),
    each as `attention_core` (CANINE's `CanineAttention(local=True)`). The (B, H, L, L) logits and
    weights are block-diagonal (logits MASK_VALUE and weights 0 outside a query's chunk);
    attn_sink is the mass on the first key of the query's chunk. `tap` sees these full matrices
    (entries outside the chunks unused)."""
    _, precision = matmul_settings(cfg)
    seq_len, normalize, size = q.shape[1], normalization_function(cfg), cfg.local_chunk
    chunks = [(start, min(seq_len, start + size)) for start in range(0, seq_len, size)]
    masks = [attention_mask(end - start, cfg.causal,
                            None if key_mask_BxL is None else key_mask_BxL[:, start:end],
                            cfg.sliding_window) for start, end in chunks]
    logits, full_logits = _tap_chunks(tap, "attn_logits", chunks, MASK_VALUE, [
        masked_logits(q[:, start:end], k[:, start:end], block_logit_scale(cfg), precision, None,
                      mask) for (start, end), mask in zip(chunks, masks)])
    normalized = [normalize(part, mask) for part, mask in zip(logits, masks)]
    weights, full_weights = _tap_chunks(tap, "attn_weights", chunks, 0.0, normalized)
    from_logits = normalize is softmax and weights is normalized
    stats: dict[str, list[Array]] = {}
    for part, mask, weight in zip(logits, masks, weights):
        for name, value in metrics.attention_statistics(
                part, mask, weights=None if from_logits else weight).items():
            stats.setdefault(f"attn_{name}", []).append(value)
    probes = {name: jnp.concatenate(parts, axis=-1) for name, parts in stats.items()}
    probes.update(attn_logits=full_logits, attn_weights=full_weights)
    mixed = [mix_values(weight, v[:, start:end], precision)
             for (start, end), weight in zip(chunks, weights)]
    return jnp.concatenate(mixed, axis=1), probes


def _tap_chunks(tap: Tap, name: str, chunks: list[tuple[int, int]], fill: float,
                parts: list[Array]) -> tuple[list[Array], Array]:
    """The per-chunk (B, H, l, l) `parts` on the diagonal of a (B, H, L, L) matrix of `fill`,
    passed through `tap` → (the parts as tapped: `parts` itself if untouched, the matrix)."""
    batch, heads, seq_len = parts[0].shape[0], parts[0].shape[1], chunks[-1][1]
    full = jnp.full((batch, heads, seq_len, seq_len), fill, jnp.float32)
    for (start, end), part in zip(chunks, parts):
        full = full.at[:, :, start:end, start:end].set(part)
    tapped = full if tap is None else tap(name, full)
    if tapped is full:
        return parts, full
    return [tapped[:, :, start:end, start:end] for start, end in chunks], tapped


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
        q, k, v, logit_scale=block_logit_scale(cfg),
        causal=cfg.causal, precision=precision, interpret=jax.default_backend() != "gpu",
        reduction_statistics=reduction_statistics,
        **fused_attention.tiling(k.dtype, q.shape[1]), **slopes)
    return mixed, stats


def dot_product_core(q, k, v, cfg: BlockConfig, key_mask_BxL: Array | None,
                     logit_bias: Array | None = None) -> tuple[Array, Probes]:
    """`jax.nn.dot_product_attention` (attention_impl='dot_product'): cuDNN's fused attention on
    GPUs for bfloat16 inputs, XLA's elsewhere (float32 inputs at JAX's default precision, TF32 on
    NVIDIA GPUs); float32 softmax statistics. No probes: a training step needs none."""
    dtype, _ = matmul_settings(cfg)
    impl = "cudnn" if jax.default_backend() == "gpu" and dtype == jnp.bfloat16 else "xla"
    mask = None if key_mask_BxL is None else key_mask_BxL.astype(bool)[:, None, None, :]
    bias = None if logit_bias is None else jnp.asarray(logit_bias, q.dtype)
    mixed = jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask,
                                         scale=block_logit_scale(cfg), is_causal=cfg.causal,
                                         implementation=impl)
    return mixed.astype(jnp.float32), {}


def _unfused_core(q, k, v, cfg: BlockConfig, key_mask_BxL, logit_bias, tap: Tap = None,
                  initializing: bool = False) -> tuple[Array, Probes]:
    """The core when the forward-only kernel does not run: 'dot_product', 'flash', local, XLA's."""
    if cfg.attention_impl == "flash" and not initializing:  # init: the plain path, as 'pallas'
        return flash_attention.core(q, k, v, cfg, block_logit_scale(cfg), key_mask_BxL, logit_bias)
    if cfg.attention_impl == "dot_product":
        return dot_product_core(q, k, v, cfg, key_mask_BxL, logit_bias)
    if cfg.local_chunk:
        return local_core(q, k, v, cfg, key_mask_BxL, tap)
    return xla_core(q, k, v, cfg, key_mask_BxL, logit_bias, tap)


def _use_fused_kernel(cfg: BlockConfig, seq_len: int, key_mask_BxL, logit_bias,
                      initializing: bool) -> bool:
    """Whether the fused kernel computes the core (never in `init`: the core owns no params)."""
    if cfg.attention_impl != "pallas" or initializing:
        return False
    if (key_mask_BxL is not None or logit_bias is not None
            or not fused_attention.supported(seq_len, cfg.d_head)):
        raise ValueError(
            f"model.attention_impl: 'pallas' needs L and Dh powers of two >= 16, L <= "
            f"{fused_attention.MAX_SEQ_LEN}, no padding mask and no logit bias (L={seq_len}, Dh="
            f"{cfg.d_head}, mask={key_mask_BxL is not None}, logit bias={logit_bias is not None})")
    return True


def output_gate(cfg: BlockConfig, x_BxLxD: Array, mixed_BxLxHxDh: Array, probes: Probes) -> Array:
    """Head h's mixed output × σ(x·w_h + b_h) (Bondarenko et al.'s gated attention; a Dense D → H
    named `gate`, called inside `SelfAttention`); the gate (B, L, H) becomes the attn_gate probe."""
    gate_BxLxH = jax.nn.sigmoid(dense(cfg, cfg.num_heads, "gate", True)(x_BxLxD)
                                .astype(jnp.float32))
    probes["attn_gate"] = gate_BxLxH
    return mixed_BxLxHxDh * gate_BxLxH[..., None]


def project(cfg: BlockConfig, x_BxLxD: Array, precomputed_qkv: PrecomputedQKV | None
            ) -> tuple[Array, Array, Array]:
    """The input projection → q, k, v (B, L, H, Dh), as attention uses them (QK norm, rotary,
    key/value heads repeated). Called inside `SelfAttention` (its parameters)."""
    (batch, seq_len, d_model), dtype = x_BxLxD.shape, matmul_settings(cfg)[0]
    heads, kv_heads, d_head = cfg.num_heads, cfg.kv_heads, cfg.d_head
    width = (heads + 2 * kv_heads) * d_head
    # one (D, (H + 2·H_kv)·Dh) GEMM, faster than three narrow ones; three Dense-shaped params
    dense_qkv = [DenseParams(cfg, d_model, n * d_head, cfg.bias("qkv"), name=name)()
                 for name, n in zip(QKV_NAMES, (heads, kv_heads, kv_heads))]
    if precomputed_qkv is None:
        kernel_DxW, bias_W = concat_qkv(dense_qkv)
        qkv_BxLxW = jnp.dot(x_BxLxD.astype(dtype), kernel_DxW.astype(dtype),
                            precision=matmul_settings(cfg)[1])
        if bias_W is not None:
            qkv_BxLxW = qkv_BxLxW + bias_W.astype(dtype)[None, None, :]
    else:
        qkv_BxLxW = precomputed_qkv.assemble()
        if qkv_BxLxW.shape != (batch, seq_len, width):
            raise ValueError(f"precomputed_qkv: shape {qkv_BxLxW.shape} != "
                             f"{(batch, seq_len, width)}")
    q, k, v = split_heads(qkv_BxLxW.astype(dtype), heads, kv_heads)
    if cfg.attention == "qk_layernorm":
        q = norm(cfg, "query_norm", use_bias=False)(q)
        k = norm(cfg, "key_norm", use_bias=False)(k)
    if cfg.rotary_dims:
        positions_L = jnp.arange(seq_len)
        q = apply_rotary(q, positions_L, cfg.rotary_dims, cfg.rotary_base)
        k = apply_rotary(k, positions_L, cfg.rotary_dims, cfg.rotary_base)
    if kv_heads != heads:  # query head h reads key/value head h // (H / H_kv)
        k = jnp.repeat(k, heads // kv_heads, axis=2)
        v = jnp.repeat(v, heads // kv_heads, axis=2)
    return q, k, v


class SelfAttention(Tapped):
    """Multi-head self-attention; returns (output (B, L, D) float32, probes). Taps (`Tapped`)
    queries, keys, values, attn_logits, attn_weights (the XLA and local cores only) and head_out,
    each head's output (B, L, H, Dh), the input of the output projection."""

    config: BlockConfig

    @nn.compact
    def __call__(self, x_BxLxD: Array, key_mask_BxL: Array | None = None,
                 precomputed_qkv: PrecomputedQKV | None = None,
                 reduction_statistics: bool = False, logit_bias: Array | None = None
                 ) -> tuple[Array, Probes]:
        """`key_mask_BxL`: True where a key is visible. `precomputed_qkv`: the input projection
        (`PrecomputedQKV`). `reduction_statistics`: the fused kernel's on-chip statistics for the
        sweep's reduction (`fused_core`; ignored by the plain path). `logit_bias`: added to the
        scaled logits, broadcastable to (B, H, Lq, Lk)."""
        cfg = self.config
        batch, seq_len, d_model = x_BxLxD.shape
        if d_model != cfg.d_model:
            raise ValueError(f"input width {d_model} != model.d_model {cfg.d_model}")
        untapped = project(cfg, x_BxLxD, precomputed_qkv)
        probes: Probes = {name: self.tap(name, value)
                          for name, value in zip(("queries", "keys", "values"), untapped)}
        q, k, v = probes["queries"], probes["keys"], probes["values"]

        # logits → mask → normalise → mix
        if _use_fused_kernel(cfg, seq_len, key_mask_BxL, logit_bias, self.is_initializing()):
            affine = None if precomputed_qkv is None else precomputed_qkv.affine_form()
            if affine is not None and any(a is not b for a, b in zip((q, k, v), untapped)):
                raise ValueError("queries/keys/values: the fused kernel forms an affine "
                                 "projection's q, k, v on chip; they cannot be patched")
            mixed_BxLxHxDh, core_probes = fused_core(q, k, v, cfg, affine, reduction_statistics)
        else:
            mixed_BxLxHxDh, core_probes = _unfused_core(q, k, v, cfg, key_mask_BxL, logit_bias,
                                                        self.tap, self.is_initializing())
        probes.update(core_probes)

        if cfg.attention_output_gate:
            mixed_BxLxHxDh = output_gate(cfg, x_BxLxD, mixed_BxLxHxDh, probes)

        # output
        mixed_BxLxI = self.tap("head_out", mixed_BxLxHxDh).reshape(batch, seq_len, -1)
        out = dense(cfg, d_model, "out", cfg.bias("out"))(mixed_BxLxI)
        return out.astype(jnp.float32), probes
