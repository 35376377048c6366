"""The one stack of blocks with token embeddings: the from-scratch LMs of the training study and
the BERT, GPT-2, GPT-NeoX, Llama, Qwen2 and Gemma-3 families (each maps its checkpoint's names
onto this module's parameters). The training clm *is* a GPT-2 decoder: a run exports by renaming.

  embeddings   token embedding (× embedding_scale) (+ learned positions) (+ token types)
               (→ embedding norm)
  blocks       `num_layers` × models/block.Block (one BlockConfig, or one per layer)
  final norm   optional, of the blocks' norm kind
  head         optional: logits against the token embedding (tied) or the `output` Dense
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.config import TransformerConfig
from anisotropy_jax.models.block import stack_blocks
from anisotropy_jax.models.formats.checkpoint import int_or
from anisotropy_jax.models.family import Family, block_summary
from anisotropy_jax.models.layers import embedding_init, kernel_init, matmul_settings, norm

Array = jax.Array
Probes = dict[str, Any]


class Transformer(nn.Module):
    """Embeddings → `num_layers` blocks → optional final norm → optional output logits.

    Probes: {"embeddings": (B, L, D) input of the first block, "blocks": [per-block probes],
    "final_hidden": (B, L, D) after the final norm if any}; with `final_norm`, also
    "final_norm_in", the last block's output before that norm.
    Returns logits (B, L, V) when `with_head` (tied or untied per the config), else final_hidden.
    """

    config: TransformerConfig
    with_head: bool = True

    @nn.compact
    def __call__(self, tokens_BxL: Array, key_mask_BxL: Array | None = None, *,
                 token_types_BxL: Array | None = None) -> tuple[Array, Probes]:
        cfg, block = self.config, self.config.block
        _, seq_len = tokens_BxL.shape
        if seq_len > cfg.max_len:
            raise ValueError(f"sequence length {seq_len} > model.max_len {cfg.max_len}")
        init = embedding_init(block)
        token_embedding = nn.Embed(cfg.vocab_size, block.d_model, embedding_init=init,
                                   name="token_embedding")
        x_BxLxD = token_embedding(tokens_BxL)
        if cfg.embedding_scale != 1.0:  # Gemma: √D, a float32 factor as Hugging Face's
            x_BxLxD = x_BxLxD * jnp.float32(cfg.embedding_scale)
        if cfg.learned_positions:
            x_BxLxD = x_BxLxD + nn.Embed(cfg.max_len, block.d_model, embedding_init=init,
                                         name="position_embedding")(jnp.arange(seq_len))[None]
        if cfg.type_vocab_size:
            types = jnp.zeros_like(tokens_BxL) if token_types_BxL is None else token_types_BxL
            x_BxLxD = x_BxLxD + nn.Embed(cfg.type_vocab_size, block.d_model, embedding_init=init,
                                         name="type_embedding")(types)
        x_BxLxD = x_BxLxD.astype(jnp.float32)
        if cfg.embedding_norm:
            x_BxLxD = norm(block, "embedding_norm")(x_BxLxD)

        probes: Probes = {"embeddings": x_BxLxD}
        x_BxLxD = stack_blocks(x_BxLxD, cfg.blocks, cfg.num_layers, probes, key_mask_BxL,
                               norm(block, "final_norm") if cfg.final_norm else None)

        dtype, precision = matmul_settings(block)
        untied = not cfg.tie_embeddings and (self.with_head or cfg.output_embedding)
        output = (nn.Dense(cfg.vocab_size, use_bias=cfg.output_bias, kernel_init=kernel_init(block),
                           dtype=dtype, param_dtype=jnp.float32, precision=precision,
                           name="output") if untied else None)
        if not self.with_head:
            if output is not None and self.is_initializing():
                output(x_BxLxD[:, :1])  # the stored head's parameters exist; the forward skips it
            return x_BxLxD, probes
        if cfg.tie_embeddings:
            logits_BxLxV = jnp.einsum("bld,vd->blv", x_BxLxD.astype(dtype),
                                      token_embedding.embedding.astype(dtype),
                                      precision=precision, preferred_element_type=jnp.float32)
            if cfg.output_bias:
                bias_V = self.param("output_bias", nn.initializers.zeros, (cfg.vocab_size,),
                                    jnp.float32)
                logits_BxLxV = logits_BxLxV + bias_V[None, None, :]
        else:
            logits_BxLxV = output(x_BxLxD).astype(jnp.float32)
        return logits_BxLxV, probes


# --------------------------------------------------------------------------------------------
# What the causal-LM families (gpt2, gpt_neox, llama, qwen2) share as `Family` fields

def embedding_matrices(params: Any, cfg: TransformerConfig) -> dict[str, Any]:
    """The token embedding, the output embedding (the token embedding when tied; the `output`
    Dense kernel transposed when the checkpoint has an untied LM head; else None) and the final
    norm's gain as a (D,) vector (a single gain repeated; None without a gain)."""
    tree = params["params"]
    token = np.asarray(tree["token_embedding"]["embedding"])
    output = token if cfg.tie_embeddings else (
        np.asarray(tree["output"]["kernel"]).T if "output" in tree else None)
    final = tree.get("final_norm", {}).get("scale")
    if final is not None:
        final = np.broadcast_to(np.asarray(final), (token.shape[1],)).copy()
    return {"input": token, "output": output, "final_norm_scale": final}


def rotary_decoder_config(block: Any, hf_config: dict[str, Any]) -> TransformerConfig:
    """The stack of a rotary pre-norm decoder checkpoint (GPT-NeoX, Llama, Qwen2): no learned
    positions, a final norm, no output bias; tied or untied embeddings as config.json says, the
    untied LM head kept for a *ForCausalLM checkpoint."""
    tie = bool(hf_config.get("tie_word_embeddings", False))
    return TransformerConfig(
        block=block, num_layers=int(hf_config["num_hidden_layers"]),
        vocab_size=int(hf_config["vocab_size"]),
        max_len=int(hf_config.get("max_position_embeddings", 2048)), learned_positions=False,
        embedding_norm=False, final_norm=True, tie_embeddings=tie, output_bias=False,
        output_embedding=not tie and any("CausalLM" in a
                                         for a in hf_config.get("architectures") or []))


def untied_head(read: Any, cfg: TransformerConfig, name: str) -> dict[str, Any]:
    """The `output` parameters of a checkpoint's untied LM head `name` ((V, D), stored outside
    the base model's prefix), read through a `checkpoint.TensorReader`; {} when the config keeps
    none."""
    if not cfg.output_embedding or cfg.tie_embeddings:
        return {}
    head = read.get(name, (cfg.vocab_size, cfg.block.d_model), prefixed=False)
    return {"output": {"kernel": None if head is None else np.ascontiguousarray(head.T)}}


def summary(cfg: TransformerConfig) -> dict[str, Any]:
    block = cfg.block
    residual_std = block.init_std if block.residual_init_std is None else block.residual_init_std
    return block_summary(
        block, cfg.num_layers, cfg.vocab_size, cfg.max_len,
        f"normal(0, {block.init_std}^2) kernels and embeddings (output projections normal(0, "
        f"{residual_std:.4g}^2)), zero biases, norm gains 1",
        num_kv_heads=block.kv_heads, head_dim=block.d_head, norm=block.norm,
        rotary_dims=block.rotary_dims, parallel_residual=block.parallel_residual,
        tie_embeddings=cfg.tie_embeddings)


# The config.json keys `rotary_decoder_config` reads.
DECODER_KEYS = frozenset({"num_hidden_layers", "vocab_size", "max_position_embeddings",
                          "tie_word_embeddings"})


def causal_lm_family(name: str, model_types: tuple[str, ...], config_from_hf, convert,
                     summary=summary, **fields: Any) -> Family:
    """The `Family` of a pre-norm causal LM checkpoint format: only its config translation and
    name table (and, for Gemma-3, its summary), config keys and native formats (`fields`)
    differ."""
    return Family(name=name, model_types=model_types,
                  module=lambda cfg: Transformer(cfg, with_head=False),
                  config_from_hf=config_from_hf, convert=convert,
                  num_layers=lambda cfg: cfg.num_layers, summary=summary,
                  embedding_matrices=embedding_matrices, causal=True, final_norm=True,
                  pad_token_id=lambda hf: int_or(hf, ("pad_token_id", "eos_token_id"), 0),
                  **fields)
