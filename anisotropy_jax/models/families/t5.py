"""The T5 encoder family (T5, T5 v1.1, ByT5 — T5 on UTF-8 bytes — and any T5EncoderModel /
T5ForConditionalGeneration checkpoint; the decoder is not used): config translation, name table
and the encoder stack over `Block`.

Architecture (transformers' T5Stack as an encoder): token embedding (no scaling, no absolute
positions) → pre-RMSNorm blocks without biases → final RMSNorm. The logits are q·k with no 1/√Dh
scaling, plus a learned bidirectional relative-position bias (one scalar per head and bucket)
that lives in layer 0 and is shared by every layer: the stack computes it and passes it to every
block as its logit bias. Heads have width d_kv, which may differ from d_model / num_heads. The MLP
follows `feed_forward_proj`: 'relu' (original T5), 'gated-gelu' (v1.1, ByT5: tanh GELU, gated),
and likewise 'gelu', 'silu', 'gated-relu', 'gated-silu'.

Hidden states are those of `output_hidden_states` plus the last layer's output before the final
RMSNorm (`Family.final_norm`). Every hidden state and attention probability equals
`transformers.T5EncoderModel` in float32 within 1e-4 (tests/test_families_encoders.py). The
untrained baseline is T5PreTrainedModel._init_weights with factor f = initializer_factor
(`BlockConfig.init` 't5'; embedding N(0, f²), bias table N(0, f²/d_model)).

  encoder.embed_tokens (or shared)                                token_embedding
  encoder.block.0.layer.0.SelfAttention.relative_attention_bias   relative_attention_bias (N, H)
  encoder.block.i. …                                              layer_i (`LAYER_NAMES`)
  encoder.final_layer_norm                                        final_norm
"""
from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.config import BlockConfig, require
from anisotropy_jax.models import relative_position
from anisotropy_jax.models.block import stack_blocks
from anisotropy_jax.models.formats.checkpoint import (block_names, CONFIG_FILE, WEIGHTS_FILE, PretrainedError,
                                              TensorReader, config_errors, require_keys)
from anisotropy_jax.models.family import Family, TextEncoder, block_summary
from anisotropy_jax.models.layers import RmsNorm

BYTE_OFFSET, BYT5_EOS = 3, 1  # ByT5Tokenizer: ids 0-2 are special, eos = 1
# The feed_forward_proj activations (optionally "gated-"), as transformers' T5 names them.
FEED_FORWARD_ACTIVATIONS = ("gelu", "gelu_new", "relu", "silu")

# Block parameter → Hugging Face module of `encoder.block.i.` (layer.0: attention sublayer,
# layer.1: feed-forward sublayer); gated MLPs: wi_0 is activated (fc_gate), wi_1 is not.
LAYER_NAMES = block_names(
    qkv=("layer.0.SelfAttention.q", "layer.0.SelfAttention.k", "layer.0.SelfAttention.v"),
    out="layer.0.SelfAttention.o", attention_norm="layer.0.layer_norm",
    fc_in="layer.1.DenseReluDense.wi", fc_out="layer.1.DenseReluDense.wo",
    mlp_norm="layer.1.layer_norm")
GATED_LAYER_NAMES = {**LAYER_NAMES, ("mlp", "fc_gate"): "layer.1.DenseReluDense.wi_0",
                     ("mlp", "fc_in"): "layer.1.DenseReluDense.wi_1"}


@dataclasses.dataclass(frozen=True)
class T5Config:
    """The encoder: its blocks, the vocabulary, the relative-position buckets and `max_len`
    (config.json n_positions: no position table, a length cap for the study)."""

    block: BlockConfig
    num_layers: int
    vocab_size: int
    relative_buckets: int = 32
    max_distance: int = 128
    max_len: int = 512

    def __post_init__(self):
        for name in ("num_layers", "vocab_size", "relative_buckets", "max_distance", "max_len"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 1, name,
                    f"must be a positive integer, got {value!r}")
        require(self.relative_buckets >= 4, "relative_attention_num_buckets",
                f"must be >= 4, got {self.relative_buckets}")


def feed_forward(proj: str, source: str) -> tuple[str, bool]:
    """Hugging Face `feed_forward_proj` → (activation, gated), as T5Config.__post_init__."""
    parts = str(proj).split("-")
    gated = len(parts) == 2 and parts[0] == "gated"
    if len(parts) > 2 or (len(parts) == 2 and not gated):
        raise PretrainedError(f"{source}: invalid feed_forward_proj={proj!r}")
    activation = "gelu_new" if proj == "gated-gelu" else parts[-1]
    if activation not in FEED_FORWARD_ACTIVATIONS:
        raise PretrainedError(f"{source}: unsupported feed_forward_proj={proj!r} (activation "
                              f"{activation!r}; supported: {FEED_FORWARD_ACTIVATIONS}, "
                              "optionally gated-)")
    return activation, gated


def config_from_hf(hf_config: dict[str, Any], precision: str = "highest",
                   source: str = CONFIG_FILE) -> T5Config:
    """A Hugging Face T5 config.json → T5Config (PretrainedError naming what is wrong); defaults
    of absent keys are transformers.T5Config's."""
    if hf_config.get("is_decoder", False):
        raise PretrainedError(f"{source}: unsupported settings: is_decoder=true (the T5 "
                              "family loads encoders)")
    require_keys(hf_config, ("vocab_size",), source)
    get = lambda key, default: int(hf_config.get(key, default))  # noqa: E731
    activation, gated = feed_forward(hf_config.get("feed_forward_proj", "relu"), source)
    with config_errors(source):
        block = BlockConfig(
            d_model=get("d_model", 512), num_heads=get("num_heads", 8), head_dim=get("d_kv", 64),
            d_ff=get("d_ff", 2048), norm_position="pre", norm="rms",
            layer_norm_eps=float(hf_config.get("layer_norm_epsilon", 1e-6)), use_bias=False,
            activation=activation, gated_mlp=gated, logit_scale=1.0, init="t5",
            init_std=float(hf_config.get("initializer_factor", 1.0)), precision=precision)
        return T5Config(block=block, num_layers=get("num_layers", 6),
                        vocab_size=int(hf_config["vocab_size"]),
                        relative_buckets=get("relative_attention_num_buckets", 32),
                        max_distance=get("relative_attention_max_distance", 128),
                        max_len=get("n_positions", 512))


def encode_bytes(text: str) -> list[int]:
    """ByT5Tokenizer without padding or truncation: UTF-8 bytes + 3 (ids 0, 1, 2 are pad, eos,
    unk), then eos = 1. ByT5 checkpoints ship no tokenizer.json."""
    return [b + BYTE_OFFSET for b in text.encode("utf-8")] + [BYT5_EOS]


def text_encoder(hf_config: dict[str, Any]) -> TextEncoder | None:
    """ByT5 (config.json "tokenizer_class": "ByT5Tokenizer", as the google/byt5-* checkpoints
    have): `encode_bytes`, the trailing EOS special. Other T5 checkpoints: None (their
    tokenizer.json)."""
    if hf_config.get("tokenizer_class") != "ByT5Tokenizer":
        return None
    return TextEncoder("ByT5Tokenizer (UTF-8 bytes + 3, then EOS)", encode_bytes,
                       num_leading=0, num_trailing=1)


class T5Encoder(nn.Module):
    """tokens (B, L) → (last hidden state after the final RMSNorm, {"embeddings", "blocks",
    "position_bias" (1, H, L, L), "final_norm_in", "final_hidden"})."""

    config: T5Config

    @nn.compact
    def __call__(self, tokens_BxL: jax.Array, key_mask_BxL: jax.Array | None = None):
        cfg, block = self.config, self.config.block
        factor = block.init_std  # T5's initializer_factor
        x = nn.Embed(cfg.vocab_size, block.d_model, embedding_init=nn.initializers.normal(factor),
                     name="token_embedding")(tokens_BxL).astype(jnp.float32)
        table = self.param("relative_attention_bias",
                           nn.initializers.normal(factor * block.d_model ** -0.5),
                           (cfg.relative_buckets, block.num_heads), jnp.float32)
        bias = relative_position.encoder_bias(table, tokens_BxL.shape[1],
                                              num_buckets=cfg.relative_buckets,
                                              max_distance=cfg.max_distance)
        probes: dict[str, Any] = {"embeddings": x, "position_bias": bias}
        x = stack_blocks(x, block, cfg.num_layers, probes, key_mask_BxL,
                         RmsNorm(block.layer_norm_eps, name="final_norm"), "layer_{}",
                         logit_bias=bias)
        return x, probes


def convert(tensors: dict[str, np.ndarray], config: T5Config, source: str = WEIGHTS_FILE
            ) -> tuple[dict[str, Any], list[str]]:
    """Hugging Face T5 tensors → ({"params": tree} for T5Encoder, unused tensor names; the
    decoder and LM head of full T5 checkpoints are among the unused)."""
    read = TensorReader(tensors)
    block = config.block
    params: dict[str, Any] = {
        "token_embedding": {"embedding": read.get("encoder.embed_tokens.weight",
                                                  (config.vocab_size, block.d_model),
                                                  aliases=("shared.weight",))},
        "relative_attention_bias": read.get(
            "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
            (config.relative_buckets, block.num_heads)),
        "final_norm": read.norm("encoder.final_layer_norm", block.d_model, bias=False),
    }
    if read.has("shared.weight"):  # the tied copy of the embedding
        read.used.add("shared.weight")
    names = GATED_LAYER_NAMES if block.gated_mlp else LAYER_NAMES
    for i in range(config.num_layers):
        params[f"layer_{i}"] = read.block(
            {path: f"encoder.block.{i}.{name}" for path, name in names.items()}, block)
    return read.finish(params, source, r"encoder\.block\.(\d+)\.", config.num_layers)


def embedding_matrices(params: dict[str, Any], config: T5Config) -> dict[str, np.ndarray | None]:
    """The token embedding and the final RMSNorm's gain; the encoder has no output embedding
    (a full T5 checkpoint's LM head belongs to the decoder, which is not loaded)."""
    del config
    tree = params["params"]
    return {"input": np.asarray(tree["token_embedding"]["embedding"]), "output": None,
            "final_norm_scale": np.asarray(tree["final_norm"]["scale"])}


def summary(config: T5Config) -> dict[str, Any]:
    block = config.block
    return block_summary(
        block, config.num_layers, config.vocab_size, config.max_len,
        f"T5 init with initializer_factor {block.init_std}: embedding N(0, f^2), kernels "
        "N(0, f^2/fan_in) (W_q: f^2/(d_model d_kv)), bias table N(0, f^2/d_model), RMSNorm 1",
        d_kv=block.d_head, feed_forward=("gated-" if block.gated_mlp else "") + block.activation,
        relative_attention_num_buckets=config.relative_buckets,
        relative_attention_max_distance=config.max_distance)


# The encoder's keys; then the decoder's and its LM head's, and dense_act_fn / is_gated_act (transformers derives
# them from feed_forward_proj), unused by the encoder.
CONFIG_KEYS = frozenset({
    "is_decoder", "vocab_size", "d_model", "num_heads", "d_kv", "d_ff", "feed_forward_proj",
    "layer_norm_epsilon", "initializer_factor", "num_layers", "relative_attention_num_buckets",
    "relative_attention_max_distance", "n_positions", "tokenizer_class",
    "num_decoder_layers", "is_encoder_decoder", "tie_word_embeddings", "dense_act_fn",
    "is_gated_act", "output_past", "scale_decoder_outputs"})

FAMILY = Family(
    name="t5", model_types=("t5",), module=T5Encoder, config_from_hf=config_from_hf,
    convert=convert, num_layers=lambda cfg: cfg.num_layers, summary=summary,
    embedding_matrices=embedding_matrices, final_norm=True, text_encoder=text_encoder,
    config_keys=CONFIG_KEYS)
