"""The T5 encoder family (T5, T5 v1.1, ByT5 — T5 on UTF-8 bytes — and any T5EncoderModel /
T5ForConditionalGeneration checkpoint; the decoder is not used): Hugging Face config mapping,
weight conversion and forward (no torch).

Architecture (transformers' T5Stack as an encoder): token embedding (no scaling, no absolute
positions) → pre-RMSNorm layers h = x + Attn(RMS(x)), y = h + MLP(RMS(h)) → final RMSNorm. RMSNorm
is T5LayerNorm (x / sqrt(mean x² + eps) · γ; no mean, no bias); no linear layer has a bias. The
logits are q·k with no 1/√Dh scaling, plus a learned bidirectional relative-position bias (one
scalar per head and bucket) that lives in layer 0 and is shared by every layer. Heads have width
d_kv, which may differ from d_model / num_heads. The MLP follows `feed_forward_proj`: 'relu'
(original T5: relu(x W_i) W_o), 'gated-gelu' (v1.1, ByT5: (gelu_tanh(x W_i0) ⊙ x W_i1) W_o), and
likewise 'gelu', 'silu', 'gated-relu', 'gated-silu'.

Hidden states are those of `output_hidden_states`: the embedding output, the output of layers
1 … n−1, and the last layer's output after the final RMSNorm (the probes keep it before the norm
as "final_norm_in"). Every hidden state and attention probability equals
`transformers.T5EncoderModel` in float32 within 1e-4 (tests/test_families_encoders.py).

Name mapping (encoder.block.i.layer.0 = attention sublayer, .layer.1 = feed-forward sublayer):
  encoder.embed_tokens (or shared)                     token_embedding
  encoder.block.0.layer.0.SelfAttention.relative_attention_bias   relative_attention_bias (N, H)
  ...layer.0.SelfAttention.{q,k,v,o}                   layer_i.attention.{query,key,value,out}
  ...layer.0.layer_norm / layer.1.layer_norm           layer_i.attention_norm / mlp_norm
  ...layer.1.DenseReluDense.{wi,wo} | {wi_0,wi_1,wo}   layer_i.mlp.{fc_in,fc_out} |
                                                       {fc_gate (activated), fc_in, fc_out}
  encoder.final_layer_norm                             final_norm
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.config import require
from anisotropy_jax.models import registry, relative_position
from anisotropy_jax.models.bert import CONFIG_FILE, WEIGHTS_FILE, PretrainedError
from anisotropy_jax.models.encoder_layer import (ACTIVATIONS, EncoderLayer, EncoderLayerConfig,
                                                 RMSNorm, TensorReader, layer_params)

MODEL_TYPES = ("t5",)
CAUSAL = False
BYTE_OFFSET, BYT5_EOS = 3, 1  # ByT5Tokenizer: ids 0-2 are special, eos = 1


@dataclasses.dataclass(frozen=True)
class T5Config:
    layer: EncoderLayerConfig
    num_layers: int
    vocab_size: int
    relative_buckets: int = 32
    max_distance: int = 128
    pad_token_id: int = 0
    max_len: int = 512  # config.json n_positions: no position table, a length cap for the study

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
    if activation not in ACTIVATIONS:
        raise PretrainedError(f"{source}: unsupported feed_forward_proj={proj!r} (activation "
                              f"{activation!r}; supported: {ACTIVATIONS}, optionally gated-)")
    return activation, gated


def config_from_hf(hf_config: dict[str, Any], precision: str = "highest",
                   source: str = CONFIG_FILE) -> T5Config:
    """A Hugging Face T5 config.json → T5Config (PretrainedError naming what is wrong)."""
    if hf_config.get("model_type") not in MODEL_TYPES:
        raise PretrainedError(f"{source}: model_type={hf_config.get('model_type')!r} is not "
                              f"one of {MODEL_TYPES}")
    if hf_config.get("is_decoder", False):
        raise PretrainedError(f"{source}: unsupported settings: is_decoder=true (the T5 "
                              "family loads encoders)")
    defaults = {"d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_heads": 8}
    if "vocab_size" not in hf_config:
        raise PretrainedError(f"{source}: missing required keys ['vocab_size']")
    get = {k: int(hf_config.get(k, v)) for k, v in defaults.items()}
    activation, gated = feed_forward(hf_config.get("feed_forward_proj", "relu"), source)
    try:
        layer = EncoderLayerConfig(
            d_model=get["d_model"], num_heads=get["num_heads"], d_head=get["d_kv"],
            d_ff=get["d_ff"], norm="pre_rms_norm",
            norm_eps=float(hf_config.get("layer_norm_epsilon", 1e-6)), use_bias=False,
            activation=activation, gated=gated, logit_scale=1.0, init="t5",
            init_std=float(hf_config.get("initializer_factor", 1.0)), precision=precision)
        return T5Config(layer=layer, num_layers=get["num_layers"],
                        vocab_size=int(hf_config["vocab_size"]),
                        relative_buckets=int(hf_config.get("relative_attention_num_buckets", 32)),
                        max_distance=int(hf_config.get("relative_attention_max_distance", 128)),
                        pad_token_id=int(hf_config.get("pad_token_id", 0) or 0),
                        max_len=int(hf_config.get("n_positions", 512)))
    except ValueError as e:  # ConfigError is a ValueError
        raise PretrainedError(f"{source}: {e}") from None


def encode_bytes(text: str) -> list[int]:
    """ByT5Tokenizer without padding or truncation: UTF-8 bytes + 3 (ids 0, 1, 2 are pad, eos,
    unk), then eos = 1. ByT5 checkpoints ship no tokenizer.json."""
    return [b + BYTE_OFFSET for b in text.encode("utf-8")] + [BYT5_EOS]


def text_encoder(hf_config: dict[str, Any]) -> registry.TextEncoder | None:
    """ByT5 (config.json "tokenizer_class": "ByT5Tokenizer", as the google/byt5-* checkpoints
    have): `encode_bytes`, the trailing EOS special. Other T5 checkpoints: None (their
    tokenizer.json)."""
    if hf_config.get("tokenizer_class") != "ByT5Tokenizer":
        return None
    return registry.TextEncoder("ByT5Tokenizer (UTF-8 bytes + 3, then EOS)", encode_bytes,
                                num_leading=0, num_trailing=1)


class T5Encoder(nn.Module):
    """tokens (B, L) → (last hidden state after the final RMSNorm, {"embeddings", "blocks",
    "position_bias" (1, H, L, L), "final_norm_in", "final_hidden"})."""

    config: T5Config

    @nn.compact
    def __call__(self, tokens_BxL: jax.Array, key_mask_BxL: jax.Array | None = None):
        cfg, lc = self.config, self.config.layer
        factor = lc.init_std  # T5's initializer_factor
        x = nn.Embed(cfg.vocab_size, lc.d_model, embedding_init=nn.initializers.normal(factor),
                     name="token_embedding")(tokens_BxL).astype(jnp.float32)
        table = self.param("relative_attention_bias",
                           nn.initializers.normal(factor * lc.d_model ** -0.5),
                           (cfg.relative_buckets, lc.num_heads), jnp.float32)
        seq_len = tokens_BxL.shape[1]
        buckets = relative_position.bucket_table(seq_len, seq_len, bidirectional=True,
                                                 num_buckets=cfg.relative_buckets,
                                                 max_distance=cfg.max_distance)
        bias = relative_position.position_bias(table, buckets)
        probes: dict[str, Any] = {"embeddings": x, "blocks": [], "position_bias": bias}
        for i in range(cfg.num_layers):
            x, block = EncoderLayer(lc, name=f"layer_{i}")(x, key_mask_BxL, bias)
            probes["blocks"].append(block)
        probes["final_norm_in"] = x
        x = RMSNorm(lc.norm_eps, name="final_norm")(x)
        probes["final_hidden"] = x
        return x, probes


# --------------------------------------------------------------------------------------------
# Weights

def _layer_names(i: int, gated: bool) -> dict[str, str]:
    attn, ff = f"encoder.block.{i}.layer.0.", f"encoder.block.{i}.layer.1."
    names = {"query": attn + "SelfAttention.q", "key": attn + "SelfAttention.k",
             "value": attn + "SelfAttention.v", "out": attn + "SelfAttention.o",
             "attention_norm": attn + "layer_norm", "mlp_norm": ff + "layer_norm",
             "fc_out": ff + "DenseReluDense.wo"}
    if gated:
        names.update(fc_gate=ff + "DenseReluDense.wi_0", fc_in=ff + "DenseReluDense.wi_1")
    else:
        names["fc_in"] = ff + "DenseReluDense.wi"
    return names


def convert(tensors: dict[str, np.ndarray], config: T5Config,
                       source: str = WEIGHTS_FILE) -> tuple[dict[str, Any], list[str]]:
    """Hugging Face T5 tensors → ({"params": tree} for T5Encoder, unused tensor names; the
    decoder and LM head of full T5 checkpoints are among the unused)."""
    read = TensorReader(tensors)
    lc = config.layer
    embedding_name = ("encoder.embed_tokens.weight" if "encoder.embed_tokens.weight" in tensors
                      else "shared.weight")
    params: dict[str, Any] = {
        "token_embedding": {"embedding": read.get(embedding_name,
                                                  (config.vocab_size, lc.d_model))},
        "relative_attention_bias": read.get(
            "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
            (config.relative_buckets, lc.num_heads)),
        "final_norm": read.norm("encoder.final_layer_norm", lc.d_model, bias=False),
    }
    if "shared.weight" in tensors:  # the tied copy of the embedding
        read.used.add("shared.weight")
    for i in range(config.num_layers):
        params[f"layer_{i}"] = layer_params(read, _layer_names(i, lc.gated), lc)
    unused = read.finish(source, r"^encoder\.block\.(\d+)\.", config.num_layers)
    return {"params": jax.tree.map(jnp.asarray, params)}, unused


@functools.lru_cache(maxsize=8)
def hidden_states_fn(config: T5Config) -> Callable[..., jax.Array]:
    """jit(params, tokens (B, L), token types (ignored), mask (B, L)) → (num_layers + 2, B, L, D):
    the embedding output, every layer's output and the final RMSNorm's output (`state_labels`;
    transformers' output_hidden_states is this without the last layer's raw output). Padded
    keys are masked."""
    module = T5Encoder(config)

    @jax.jit
    def forward(params, tokens_BxL, types_BxL, mask_BxL):
        del types_BxL
        _, probes = module.apply(params, tokens_BxL, mask_BxL)
        states = [probes["embeddings"]] + [b["resid_post"] for b in probes["blocks"]]
        return jnp.stack(states + [probes["final_hidden"]])

    return forward


def init_params(config: T5Config, key: jax.Array) -> dict[str, Any]:
    """The architecture at Hugging Face initialisation (T5PreTrainedModel._init_weights with
    factor f = initializer_factor): embedding N(0, f²); W_q N(0, f²/(d_model·d_kv)); W_k, W_v,
    W_i N(0, f²/d_model); W_o N(0, f²/(H·d_kv)); feed-forward W_o N(0, f²/d_ff); the bias table
    N(0, f²/d_model); RMSNorm γ = 1."""
    return _init_fn(config)(key, jnp.zeros((1, 2), jnp.int32))


@functools.lru_cache(maxsize=8)
def _init_fn(config: T5Config) -> Callable[..., Any]:
    return jax.jit(T5Encoder(config).init)


# --------------------------------------------------------------------------------------------
# The rest of the family interface (models/registry.py)

def state_labels(config: T5Config) -> tuple[str, ...]:
    return (("embeddings",) + tuple(f"layer_{i + 1}" for i in range(config.num_layers))
            + ("final_norm",))


@functools.lru_cache(maxsize=8)
def apply_fn(config: T5Config) -> Callable[..., Any]:
    module = T5Encoder(config)
    return jax.jit(lambda params, tokens, mask=None: module.apply(params, tokens, mask))


def embedding_matrices(params: dict[str, Any], config: T5Config) -> dict[str, np.ndarray | None]:
    """The token embedding and the final RMSNorm's gain; the encoder has no output embedding
    (a full T5 checkpoint's LM head belongs to the decoder, which is not loaded)."""
    del config
    tree = params["params"]
    return {"input": np.asarray(tree["token_embedding"]["embedding"]), "output": None,
            "final_norm_scale": np.asarray(tree["final_norm"]["scale"])}


def summary(config: T5Config) -> dict[str, Any]:
    lc = config.layer
    return {"num_layers": config.num_layers, "d_model": lc.d_model, "num_heads": lc.num_heads,
            "d_kv": lc.d_head, "d_ff": lc.d_ff, "vocab_size": config.vocab_size,
            "max_len": config.max_len, "feed_forward": ("gated-" if lc.gated else "") + lc.activation,
            "relative_attention_num_buckets": config.relative_buckets,
            "relative_attention_max_distance": config.max_distance,
            "untrained_init": f"T5 init with initializer_factor {lc.init_std}: embedding "
                              "N(0, f^2), kernels N(0, f^2/fan_in) (W_q: f^2/(d_model d_kv)), "
                              "bias table N(0, f^2/d_model), RMSNorm 1"}


def pad_token_id(hf_config: dict[str, Any]) -> int:
    """config.json's pad_token_id (T5 and ByT5: 0); padding is masked anyway."""
    pad = hf_config.get("pad_token_id")
    return pad if isinstance(pad, int) and not isinstance(pad, bool) else 0
