"""A stack of blocks with learned embeddings: the from-scratch LMs of the training study and the
forward of BERT-family checkpoints (models/bert.py maps Hugging Face weights onto it)."""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from anisotropy_jax.config import TransformerConfig
from anisotropy_jax.models.block import TransformerBlock
from anisotropy_jax.models.layers import embedding_init, kernel_init, layer_norm, matmul_settings

Array = jax.Array
Probes = dict[str, Any]


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
            x_BxLxD = layer_norm(block, "embedding_norm")(x_BxLxD)

        probes: Probes = {"embeddings": x_BxLxD, "blocks": []}
        for layer in range(cfg.num_layers):
            x_BxLxD, block_probes = TransformerBlock(block, name=f"block_{layer}")(
                x_BxLxD, key_mask_BxL)
            probes["blocks"].append(block_probes)
        if cfg.final_norm:
            probes["final_norm_in"] = x_BxLxD
            x_BxLxD = layer_norm(block, "final_norm")(x_BxLxD)
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
