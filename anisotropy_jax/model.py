"""Flax Linen Transformer blocks whose every interesting tensor is a named probe.

Every module returns `(output, probes)`: a plain dict of arrays under the canonical names below
(big_vision style; jit prunes the ones a caller does not use). No `sow`, no mutable collections, so
`init`/`apply` are pure and `jax.vmap(module.init)` gives parameters for many seeds at once.

Canonical probe names of a block (contract, README "Probes"):
  resid_pre     (B, L, D)      block input
  queries       (B, L, H, Dh)  after the query projection (and QK-LayerNorm, if any)
  keys          (B, L, H, Dh)  likewise
  values        (B, L, H, Dh)
  attn_logits   (B, H, Lq, Lk) q·k / (√Dh τ), float32, masked entries set to MASK_VALUE
  attn_weights  (B, H, Lq, Lk) softmax of the logits, float32
  attn_entropy  (B, H, Lq)     entropy of each query's attention (nats), float32
  attn_max      (B, H, Lq)     its largest probability
  attn_sink     (B, H, Lq)     its probability on the first key
                (with attention_impl='pallas' only these three statistics exist, not the
                 (B, H, L, L) logits and weights)
  attn_out      (B, L, D)      attention branch after the output projection, before the residual
  resid_mid     (B, L, D)      pre/none: resid_pre + attn_out;  post: LN(resid_pre + attn_out)
  mlp_out       (B, L, D)      MLP branch (absent when use_mlp=False)
  resid_post    (B, L, D)      pre/none: resid_mid + mlp_out;   post: LN(resid_mid + mlp_out);
                               = resid_mid when use_mlp=False
"""
from __future__ import annotations

import functools
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from anisotropy_jax import fused_attention
from anisotropy_jax.config import BlockConfig, TransformerConfig

Array = jax.Array
Probes = dict[str, Any]

# Masked logits get the most negative float32: exp underflows to exactly 0 after max-subtraction,
# and, unlike -inf, a row whose keys are all masked stays finite (uniform) instead of NaN.
MASK_VALUE = float(jnp.finfo(jnp.float32).min)


def kernel_init(config: BlockConfig) -> nn.initializers.Initializer:
    """The named initialiser of every linear kernel (never a silent framework default)."""
    if config.init == "bert":
        # Hugging Face BertPreTrainedModel._init_weights: normal_(0, initializer_range), untruncated.
        return nn.initializers.normal(stddev=config.init_std)
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


def matmul_settings(config: BlockConfig) -> tuple[Any, jax.lax.Precision]:
    """(compute dtype, lax precision) of the matmuls for `config.precision`."""
    if config.precision == "highest":
        return jnp.float32, jax.lax.Precision.HIGHEST
    if config.precision == "default":
        return jnp.float32, jax.lax.Precision.DEFAULT
    if config.precision == "bfloat16":
        return jnp.bfloat16, jax.lax.Precision.DEFAULT
    raise ValueError(f"model.precision: unknown precision {config.precision!r}")


def _dense(config: BlockConfig, features: int, name: str) -> nn.Dense:
    dtype, precision = matmul_settings(config)
    return nn.Dense(features, use_bias=config.use_bias, kernel_init=kernel_init(config),
                    bias_init=nn.initializers.zeros, dtype=dtype, param_dtype=jnp.float32,
                    precision=precision, name=name)


class DenseParams(nn.Module):
    """The parameters of an `nn.Dense` (same names, shapes and initialisation), returned as
    (kernel (in, out), bias (out,) or None) for the caller to apply (e.g. fused with others)."""

    config: BlockConfig
    in_features: int
    features: int

    @nn.compact
    def __call__(self) -> tuple[Array, Array | None]:
        kernel = self.param("kernel", kernel_init(self.config), (self.in_features, self.features),
                            jnp.float32)
        bias = (self.param("bias", nn.initializers.zeros, (self.features,), jnp.float32)
                if self.config.use_bias else None)
        return kernel, bias


def _layer_norm(config: BlockConfig, name: str, use_bias: bool = True) -> nn.LayerNorm:
    # LayerNorm always in float32, γ = 1, β = 0 at init.
    return nn.LayerNorm(epsilon=config.layer_norm_eps, use_bias=use_bias, dtype=jnp.float32,
                        param_dtype=jnp.float32, name=name)


def attention_mask(seq_len: int, causal: bool, key_mask_BxL: Array | None) -> Array | None:
    """Boolean (B|1, 1, Lq, Lk) mask of visible keys, or None when everything is visible."""
    mask = None
    if causal:
        mask = jnp.tril(jnp.ones((seq_len, seq_len), dtype=bool))[None, None]
    if key_mask_BxL is not None:
        key_mask = key_mask_BxL.astype(bool)[:, None, None, :]
        mask = key_mask if mask is None else jnp.logical_and(mask, key_mask)
    return mask


QKV_NAMES = ("query", "key", "value")


def _concat_qkv(dense_params) -> tuple[Array, Array | None]:
    kernel_Dx3D = jnp.concatenate([kernel for kernel, _ in dense_params], axis=1)
    biases = [bias for _, bias in dense_params]
    bias_3D = None if biases[0] is None else jnp.concatenate(biases)
    return kernel_Dx3D, bias_3D


def _stored_qkv(block_params: Any) -> tuple[Array, Array | None]:
    """(kernel (D, 3D), bias (3D,) or None) of the query/key/value projections of stored block
    parameters (the same concatenation `SelfAttention` applies to its own)."""
    attention = block_params["params"]["attention"]
    return _concat_qkv([(attention[n]["kernel"], attention[n].get("bias")) for n in QKV_NAMES])


def qkv_projection(config: BlockConfig, block_params: Any, x_NxD: Array) -> Array:
    """x·[W_q W_k W_v] (no bias) in float32 at the configured matmul precision, for inputs of
    any leading shape (..., D) → (..., 3D), from the parameters of a `TransformerBlock`.

    The block's first matmul is linear in its input when attention sees x itself (post-LN or no
    LN), so a caller evaluating many inputs x = z + s·u can project z and u once and pass
    `AffineQKV(qkv_projection(z) + qkv_bias, qkv_projection(u), s)` to the block
    (`attention_qkv`).
    """
    dtype, precision = matmul_settings(config)
    kernel_Dx3D, _ = _stored_qkv(block_params)
    return jnp.dot(x_NxD.astype(dtype), kernel_Dx3D.astype(dtype), precision=precision,
                   preferred_element_type=jnp.float32)


def qkv_bias(block_params: Any) -> Array | None:
    """The (3D,) bias [b_q b_k b_v] of the input projection, or None without linear biases."""
    return _stored_qkv(block_params)[1]


class AffineQKV(NamedTuple):
    """The attention input projection of x = z + s·u, unassembled: qkv = base + s·slope.

    `base_BxLx3D` = z·W + b and `slope_3D` = u·W (float32) are shared by every s of a seed; only
    the scalar s is per point. The XLA path assembles qkv (XLA fuses the update into its
    consumers); the fused kernel never writes it out (see `fused_attention.fused_attention`).
    """

    base_BxLx3D: Array
    slope_3D: Array
    bias_norm: Array

    def assemble(self) -> Array:
        return (self.base_BxLx3D
                + jnp.asarray(self.bias_norm, jnp.float32) * self.slope_3D[None, None, :])


class SelfAttention(nn.Module):
    """Multi-head self-attention written out with einsums; logits and softmax in float32."""

    config: BlockConfig

    @nn.compact
    def __call__(self, x_BxLxD: Array, key_mask_BxL: Array | None = None,
                 qkv: Array | AffineQKV | None = None) -> tuple[Array, Probes]:
        """Attention of x; `qkv`, when given, replaces the input projection x·[W_q W_k W_v] + b:
        a (B, L, 3D) array or an `AffineQKV` (the caller guarantees it equals the projection of x;
        see `qkv_projection`)."""
        cfg = self.config
        batch, seq_len, d_model = x_BxLxD.shape
        if d_model != cfg.d_model:
            raise ValueError(f"input width {d_model} != model.d_model {cfg.d_model}")
        heads, d_head = cfg.num_heads, cfg.d_head
        dtype, precision = matmul_settings(cfg)

        # One (D, 3D) matmul for query, key and value (a wider GEMM runs closer to the matmul
        # rate than three D×D ones); the parameters stay three Dense-shaped sets.
        dense_qkv = [DenseParams(cfg, d_model, d_model, name=n)() for n in QKV_NAMES]
        affine = qkv if isinstance(qkv, AffineQKV) else None
        qkv_BxLx3D = affine.assemble() if affine is not None else qkv
        if qkv_BxLx3D is None:
            kernel_Dx3D, bias_3D = _concat_qkv(dense_qkv)
            qkv_BxLx3D = jnp.dot(x_BxLxD.astype(dtype), kernel_Dx3D.astype(dtype),
                                 precision=precision)
            if bias_3D is not None:
                qkv_BxLx3D = qkv_BxLx3D + bias_3D.astype(dtype)[None, None, :]
        elif qkv_BxLx3D.shape != (batch, seq_len, 3 * d_model):
            raise ValueError(f"qkv: shape {qkv_BxLx3D.shape} != "
                             f"{(batch, seq_len, 3 * d_model)}")
        qkv_BxLx3D = qkv_BxLx3D.astype(dtype)
        q_BxLxHxDh, k_BxLxHxDh, v_BxLxHxDh = (
            part.reshape(batch, seq_len, heads, d_head)
            for part in jnp.split(qkv_BxLx3D, 3, axis=-1))
        if cfg.attention == "qk_layernorm":
            q_BxLxHxDh = _layer_norm(cfg, "query_norm", use_bias=False)(q_BxLxHxDh)
            k_BxLxHxDh = _layer_norm(cfg, "key_norm", use_bias=False)(k_BxLxHxDh)

        scale = fused_attention.logit_scale(d_head, cfg.logit_temperature)
        probes: Probes = {"queries": q_BxLxHxDh, "keys": k_BxLxHxDh, "values": v_BxLxHxDh}
        # The attention path owns no parameters: `init` (often on dummy shapes) takes the plain one.
        if cfg.attention_impl == "pallas" and not self.is_initializing():
            if key_mask_BxL is not None or not fused_attention.supported(seq_len, d_head):
                raise ValueError(
                    f"model.attention_impl: 'pallas' needs L and Dh powers of two >= 16, "
                    f"L <= {fused_attention.MAX_SEQ_LEN} and no padding mask (L={seq_len}, "
                    f"Dh={d_head}, mask={key_mask_BxL is not None})")
            kernel_inputs = (q_BxLxHxDh, k_BxLxHxDh, v_BxLxHxDh)
            slopes = {}
            if affine is not None:
                # q, k, v of x = z + s·u without writing them: the kernel reads the seed's shared
                # z-parts and adds s·(u·W) on chip (see fused_attention, "affine inputs").
                base = [part.reshape(batch, seq_len, heads, d_head)
                        for part in jnp.split(affine.base_BxLx3D, 3, axis=-1)]
                slope_q, _, slope_v = (part.reshape(heads, d_head)
                                       for part in jnp.split(affine.slope_3D, 3))
                kernel_inputs = (base[0], base[1].astype(dtype), base[2].astype(dtype))
                slopes = dict(query_slope_HxDh=slope_q, value_slope_HxDh=slope_v,
                              bias_norm=affine.bias_norm)
            mixed_BxLxHxDh, stats = fused_attention.fused_attention(
                *kernel_inputs, logit_scale=scale, causal=cfg.causal, precision=precision,
                interpret=jax.default_backend() != "gpu", **slopes)
            probes.update(stats)
        else:
            logits_BxHxLxL = jnp.einsum("bqhd,bkhd->bhqk", q_BxLxHxDh, k_BxLxHxDh,
                                        precision=precision, preferred_element_type=jnp.float32)
            logits_BxHxLxL = logits_BxHxLxL * scale
            mask = attention_mask(seq_len, cfg.causal, key_mask_BxL)
            if mask is not None:
                logits_BxHxLxL = jnp.where(mask, logits_BxHxLxL, MASK_VALUE)
            weights_BxHxLxL = jax.nn.softmax(logits_BxHxLxL, axis=-1)
            # Heads-major output, then one transpose: with "->bqhd" directly, XLA on the CPU
            # lowered this product 2-3× slower (39 vs 14 ms for B = 8, L = 128, 12 heads).
            mixed_BxHxLxDh = jnp.einsum("bhqk,bkhd->bhqd",
                                        weights_BxHxLxL.astype(v_BxLxHxDh.dtype), v_BxLxHxDh,
                                        precision=precision, preferred_element_type=jnp.float32)
            mixed_BxLxHxDh = mixed_BxHxLxDh.transpose(0, 2, 1, 3)
            probes.update(attn_logits=logits_BxHxLxL, attn_weights=weights_BxHxLxL)
            probes.update(fused_attention.reference_statistics(logits_BxHxLxL, weights_BxHxLxL,
                                                               mask))
        mixed_BxLxD = mixed_BxLxHxDh.reshape(batch, seq_len, d_model)
        out_BxLxD = _dense(cfg, d_model, "out")(mixed_BxLxD).astype(jnp.float32)
        return out_BxLxD, probes


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
    it into its neighbours; on an H200, XLA's own GPU erf made the GELU pass of a BERT-base MLP
    cost 1.36 ms per 131k tokens at TF32 against 0.84 ms for this (docs/PERFORMANCE.md)."""
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


class Mlp(nn.Module):
    """D → d_ff → exact-erf GELU → D."""

    config: BlockConfig

    @nn.compact
    def __call__(self, x_BxLxD: Array) -> Array:
        cfg = self.config
        h_BxLxF = _dense(cfg, cfg.d_ff, "fc_in")(x_BxLxD)
        h_BxLxF = gelu_exact(h_BxLxF)
        return _dense(cfg, cfg.d_model, "fc_out")(h_BxLxF).astype(jnp.float32)


class TransformerBlock(nn.Module):
    """One block with `norm_position` 'post' | 'pre' | 'none'; returns (resid_post, probes)."""

    config: BlockConfig

    @nn.compact
    def __call__(self, x_BxLxD: Array, key_mask_BxL: Array | None = None,
                 attention_qkv: Array | AffineQKV | None = None) -> tuple[Array, Probes]:
        """`attention_qkv`: the precomputed projection x·[W_q W_k W_v] + b, (B, L, 3D) or
        `AffineQKV` (see `qkv_projection`); only where attention sees x itself, not with pre-LN."""
        cfg = self.config
        x_BxLxD = x_BxLxD.astype(jnp.float32)
        pre, post = cfg.norm_position == "pre", cfg.norm_position == "post"
        if pre and attention_qkv is not None:
            raise ValueError("attention_qkv: pre-LN attention sees LN(x), not x; its "
                             "projection cannot be precomputed from x")
        probes: Probes = {"resid_pre": x_BxLxD}

        attn_in = _layer_norm(cfg, "attention_norm")(x_BxLxD) if pre else x_BxLxD
        attn_out, attn_probes = SelfAttention(cfg, name="attention")(attn_in, key_mask_BxL,
                                                                      attention_qkv)
        probes.update(attn_probes)
        probes["attn_out"] = attn_out
        resid_mid = x_BxLxD + attn_out
        if post:
            resid_mid = _layer_norm(cfg, "attention_norm")(resid_mid)
        probes["resid_mid"] = resid_mid

        resid_post = resid_mid
        if cfg.use_mlp:
            mlp_in = _layer_norm(cfg, "mlp_norm")(resid_mid) if pre else resid_mid
            mlp_out = Mlp(cfg, name="mlp")(mlp_in)
            probes["mlp_out"] = mlp_out
            resid_post = resid_mid + mlp_out
            if post:
                resid_post = _layer_norm(cfg, "mlp_norm")(resid_post)
        probes["resid_post"] = resid_post
        return resid_post, probes


class Transformer(nn.Module):
    """Embeddings → `num_layers` blocks → optional final LayerNorm → optional output logits.

    Probes: {"embeddings": (B, L, D) input of the first block, "blocks": [per-block probes],
    "final_hidden": (B, L, D) after the final LayerNorm if any}; with `final_norm`, also
    "final_norm_in", the last block's output before that LayerNorm.
    Returns logits (B, L, V) when `with_head` (tied or untied per the config), else final_hidden.
    """

    config: TransformerConfig
    with_head: bool = True

    @nn.compact
    def __call__(self, tokens_BxL: Array, *, token_types_BxL: Array | None = None,
                 key_mask_BxL: Array | None = None) -> tuple[Array, Probes]:
        cfg, block = self.config, self.config.block
        _, seq_len = tokens_BxL.shape
        if seq_len > cfg.max_len:
            raise ValueError(f"sequence length {seq_len} > model.max_len {cfg.max_len}")
        init = embedding_init(block)
        token_embedding = nn.Embed(cfg.vocab_size, block.d_model, embedding_init=init,
                                   name="token_embedding")
        position_embedding = nn.Embed(cfg.max_len, block.d_model, embedding_init=init,
                                      name="position_embedding")
        x_BxLxD = token_embedding(tokens_BxL) + position_embedding(jnp.arange(seq_len))[None]
        if cfg.type_vocab_size:
            types = jnp.zeros_like(tokens_BxL) if token_types_BxL is None else token_types_BxL
            x_BxLxD = x_BxLxD + nn.Embed(cfg.type_vocab_size, block.d_model, embedding_init=init,
                                         name="type_embedding")(types)
        if cfg.embedding_norm:
            x_BxLxD = _layer_norm(block, "embedding_norm")(x_BxLxD)

        probes: Probes = {"embeddings": x_BxLxD, "blocks": []}
        for layer in range(cfg.num_layers):
            x_BxLxD, block_probes = TransformerBlock(block, name=f"block_{layer}")(
                x_BxLxD, key_mask_BxL)
            probes["blocks"].append(block_probes)
        if cfg.final_norm:
            probes["final_norm_in"] = x_BxLxD
            x_BxLxD = _layer_norm(block, "final_norm")(x_BxLxD)
        probes["final_hidden"] = x_BxLxD
        if not self.with_head:
            return x_BxLxD, probes

        dtype, precision = matmul_settings(block)
        if cfg.tie_embeddings:
            logits_BxLxV = jnp.einsum("bld,vd->blv", x_BxLxD.astype(dtype),
                                      token_embedding.embedding.astype(dtype),
                                      precision=precision, preferred_element_type=jnp.float32)
            if cfg.output_bias:
                bias_V = self.param("output_bias", nn.initializers.zeros, (cfg.vocab_size,),
                                    jnp.float32)
                logits_BxLxV = logits_BxLxV + bias_V[None, None, :]
        else:
            logits_BxLxV = nn.Dense(cfg.vocab_size, use_bias=cfg.output_bias,
                                    kernel_init=kernel_init(block), dtype=dtype,
                                    param_dtype=jnp.float32, precision=precision,
                                    name="output")(x_BxLxD).astype(jnp.float32)
        return logits_BxLxV, probes


def init_block_params(config: BlockConfig, keys: Array, batch_size: int = 1,
                      seq_len: int = 2) -> Any:
    """Parameters of `TransformerBlock(config)` for a stack of PRNG keys, via `jax.vmap(init)`.

    Shapes of the parameters do not depend on batch or length; the dummy input only fixes them.
    Each leaf gets a leading axis of len(keys); entry i equals `init(keys[i], ...)` exactly.
    """
    module = TransformerBlock(config)
    dummy_BxLxD = jnp.zeros((batch_size, seq_len, config.d_model), jnp.float32)
    return jax.vmap(functools.partial(module.init), in_axes=(0, None))(keys, dummy_BxLxD)
