"""One Transformer block (post-LN, pre-LN or no LN) whose every interesting tensor is a named probe.

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
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from anisotropy_jax.config import BlockConfig
from anisotropy_jax.models.attention import PrecomputedQKV, SelfAttention
from anisotropy_jax.models.layers import Mlp, layer_norm

Array = jax.Array
Probes = dict[str, Any]


class TransformerBlock(nn.Module):
    """One block with `norm_position` 'post' | 'pre' | 'none'; returns (resid_post, probes)."""

    config: BlockConfig

    @nn.compact
    def __call__(self, x_BxLxD: Array, key_mask_BxL: Array | None = None,
                 precomputed_qkv: PrecomputedQKV | None = None,
                 reduction_statistics: bool = False) -> tuple[Array, Probes]:
        """`precomputed_qkv`: attention's input projection x·[W_q W_k W_v] + b, supplied by the
        caller (`attention.PrecomputedQKV`); only where attention sees x itself, not with pre-LN.
        `reduction_statistics`: see `SelfAttention`."""
        cfg = self.config
        x_BxLxD = x_BxLxD.astype(jnp.float32)
        pre, post = cfg.norm_position == "pre", cfg.norm_position == "post"
        if pre and precomputed_qkv is not None:
            raise ValueError("precomputed_qkv: pre-LN attention sees LN(x), not x; its "
                             "projection cannot be precomputed from x")
        probes: Probes = {"resid_pre": x_BxLxD}

        attn_in = layer_norm(cfg, "attention_norm")(x_BxLxD) if pre else x_BxLxD
        attn_out, attn_probes = SelfAttention(cfg, name="attention")(
            attn_in, key_mask_BxL, precomputed_qkv, reduction_statistics)
        probes.update(attn_probes)
        probes["attn_out"] = attn_out
        resid_mid = x_BxLxD + attn_out
        if post:
            resid_mid = layer_norm(cfg, "attention_norm")(resid_mid)
        probes["resid_mid"] = resid_mid

        resid_post = resid_mid
        if cfg.use_mlp:
            mlp_in = layer_norm(cfg, "mlp_norm")(resid_mid) if pre else resid_mid
            mlp_out = Mlp(cfg, name="mlp")(mlp_in)
            probes["mlp_out"] = mlp_out
            resid_post = resid_mid + mlp_out
            if post:
                resid_post = layer_norm(cfg, "mlp_norm")(resid_post)
        probes["resid_post"] = resid_post
        return resid_post, probes


def init_block_params(config: BlockConfig, keys: Array, batch_size: int = 1,
                      seq_len: int = 2) -> Any:
    """Parameters of `TransformerBlock(config)` for a stack of PRNG keys, via `jax.vmap(init)`.

    Shapes of the parameters do not depend on batch or length; the dummy input only fixes them.
    Each leaf gets a leading axis of len(keys); entry i equals `init(keys[i], ...)` exactly.
    """
    module = TransformerBlock(config)
    dummy_BxLxD = jnp.zeros((batch_size, seq_len, config.d_model), jnp.float32)
    return jax.vmap(functools.partial(module.init), in_axes=(0, None))(keys, dummy_BxLxD)
