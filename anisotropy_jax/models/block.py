"""The one Transformer block of the package: every family, the bias sweep, the depth study's
stacks and the training LMs run this `Block`, switched by its `BlockConfig` (norm kind and
position, parallel residual, gated MLP and activation, rotary dims, grouped key/value heads, head
width, a logit bias, local chunks, residual scales, the attention normalisation).

Every module returns `(output, probes)`: a plain dict of arrays under the canonical names below
(big_vision style; jit prunes the ones a caller does not use). No `sow`, no mutable collections, so
`init`/`apply` are pure and `jax.vmap(module.init)` gives parameters for many seeds at once.

Canonical probe names of a block (contract, README "Probes"):
  resid_pre     (B, L, D)      block input
  queries       (B, L, H, Dh)  after the query projection (QK norm and rotary, if any)
  keys          (B, L, H, Dh)  likewise; with grouped key/value heads repeated to the H query
  values        (B, L, H, Dh)  heads, as attention uses them
  attn_logits   (B, H, Lq, Lk) q·k / (√Dh τ) (+ logit bias), float32, masked entries MASK_VALUE
  attn_weights  (B, H, Lq, Lk) the normalised logits (softmax), float32
  attn_entropy  (B, H, Lq)     entropy of each query's attention (nats), float32
  attn_max      (B, H, Lq)     its largest probability
  attn_sink     (B, H, Lq)     its probability on the first key
                (with attention_impl='pallas' only these three statistics exist, not the
                 (B, H, L, L) logits and weights)
  attn_out      (B, L, D)      attention branch after the output projection, before the residual
  resid_mid     (B, L, D)      pre/none: s·resid_pre + α·attn_out;  post: LN(resid_pre + α·attn_out)
  mlp_out       (B, L, D)      MLP branch (absent when use_mlp=False)
  resid_post    (B, L, D)      pre/none: resid_mid + α·mlp_out;   post: LN(resid_mid + α·mlp_out);
                               = resid_mid when use_mlp=False
(α = residual_scale, s = skip_scale; both 1 in every pretrained family.) Each of these but the
per-query attention statistics, plus head_out (B, L, H, Dh: each head's output, the output
projection's input) and mlp_pre / mlp_post (B, L, F: the MLP activation's input and output
projection's input), passes through a hook point (`layers.Tapped.tap`), where `models.patching`
reads or replaces it (docs/PATCHING.md); without a patch the forward is unchanged, bit for bit. With parallel_residual
the MLP reads norm(resid_pre), not norm(resid_mid), and resid_post = resid_mid + mlp_out. With
sandwich_norms (Gemma-2/3) attn_out and mlp_out are the branches after their own output norms
(`post_attention_norm`, `post_mlp_norm`), as they are added.
"""
from __future__ import annotations

import functools
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from anisotropy_jax.config import BlockConfig
from anisotropy_jax.models.attention import SelfAttention
from anisotropy_jax.models.layers import Mlp, Tapped, norm

Array = jax.Array
Probes = dict[str, Any]


class Block(Tapped):
    """One block (module docstring); returns (resid_post, probes). Taps (`Tapped`) resid_pre,
    attn_out, resid_mid, mlp_out and resid_post where it records them (its attention and MLP tap
    the others): `models.patching` reads or replaces any of them."""

    config: BlockConfig

    @nn.compact
    def __call__(self, x_BxLxD: Array, key_mask_BxL: Array | None = None, **attention_inputs: Any
                 ) -> tuple[Array, Probes]:
        """`key_mask_BxL`: True where a key is visible. `attention_inputs` go to `SelfAttention`
        (its docstring): `precomputed_qkv` (only where attention sees x itself, not with pre-LN),
        `reduction_statistics`, and `logit_bias` (T5's and MPNet's relative positions: one table
        for all layers, so the stack computes it)."""
        cfg = self.config
        x_BxLxD = x_BxLxD.astype(jnp.float32)
        pre, post = cfg.norm_position == "pre", cfg.norm_position == "post"
        if pre and attention_inputs.get("precomputed_qkv") is not None:
            raise ValueError("precomputed_qkv: pre-LN attention sees LN(x), not x; its "
                             "projection cannot be precomputed from x")
        x_BxLxD = self.tap("resid_pre", x_BxLxD)
        probes: Probes = {"resid_pre": x_BxLxD}

        attn_in = norm(cfg, "attention_norm")(x_BxLxD) if pre else x_BxLxD
        attn_out, attn_probes = SelfAttention(cfg, name="attention")(attn_in, key_mask_BxL,
                                                                     **attention_inputs)
        probes.update(attn_probes)
        if cfg.sandwich_norms:
            attn_out = norm(cfg, "post_attention_norm")(attn_out)
        probes["attn_out"] = attn_out = self.tap("attn_out", attn_out)
        resid_mid = residual_sum(x_BxLxD, cfg.skip_scale, attn_out, cfg.residual_scale)
        if post:
            resid_mid = norm(cfg, "attention_norm")(resid_mid)
        probes["resid_mid"] = resid_mid = self.tap("resid_mid", resid_mid)

        resid_post = resid_mid
        if cfg.use_mlp:
            mlp_source = x_BxLxD if cfg.parallel_residual else resid_mid
            mlp_in = norm(cfg, "mlp_norm")(mlp_source) if pre else mlp_source
            mlp_out = Mlp(cfg, name="mlp")(mlp_in)
            if cfg.sandwich_norms:
                mlp_out = norm(cfg, "post_mlp_norm")(mlp_out)
            probes["mlp_out"] = mlp_out = self.tap("mlp_out", mlp_out)
            resid_post = residual_sum(resid_mid, 1.0, mlp_out, cfg.residual_scale)
            if post:
                resid_post = norm(cfg, "mlp_norm")(resid_post)
        probes["resid_post"] = resid_post = self.tap("resid_post", resid_post)
        return resid_post, probes


def residual_sum(x: Array, skip: float, branch: Array, alpha: float) -> Array:
    """skip·x + α·branch, without multiplications by 1 (so that the plain block is exactly
    x + branch, bit for bit)."""
    x = x if skip == 1.0 else skip * x
    return x + (branch if alpha == 1.0 else alpha * branch)


def init_block_params(config: BlockConfig, keys: Array, batch_size: int = 1,
                      seq_len: int = 2) -> Any:
    """Parameters of `Block(config)` for a stack of PRNG keys, via `jax.vmap(init)`.

    Shapes of the parameters do not depend on batch or length; the dummy input only fixes them.
    Each leaf gets a leading axis of len(keys); entry i equals `init(keys[i], ...)` exactly.
    """
    module = Block(config)
    dummy_BxLxD = jnp.zeros((batch_size, seq_len, config.d_model), jnp.float32)
    return jax.vmap(functools.partial(module.init), in_axes=(0, None))(keys, dummy_BxLxD)


def stack_blocks(x_BxLxD: Array, config: BlockConfig | Sequence[BlockConfig], num_layers: int,
                 probes: Probes, key_mask_BxL: Array | None = None,
                 final_norm: nn.Module | None = None, name: str = "block_{}",
                 **attention_inputs: Any) -> Array:
    """`num_layers` Blocks named name.format(i), one after the other: the stack of every family.
    `config`: one BlockConfig for all, or one per layer (Gemma-3's local and global layers).
    Called inside a parent module's compact method (the blocks become its submodules). Appends
    each block's probes to probes["blocks"] (created if absent); with a `final_norm` module,
    records its input as probes["final_norm_in"] and applies it. Sets probes["final_hidden"] and
    returns it."""
    blocks = probes.setdefault("blocks", [])
    configs = (config,) * num_layers if isinstance(config, BlockConfig) else tuple(config)
    if len(configs) != num_layers:
        raise ValueError(f"{len(configs)} block configs for {num_layers} layers")
    for layer in range(num_layers):
        x_BxLxD, block_probes = Block(configs[layer], name=name.format(layer))(
            x_BxLxD, key_mask_BxL, **attention_inputs)
        blocks.append(block_probes)
    if final_norm is not None:
        probes["final_norm_in"] = x_BxLxD
        x_BxLxD = final_norm(x_BxLxD)
    probes["final_hidden"] = x_BxLxD
    return x_BxLxD
