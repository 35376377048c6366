"""wav2vec 2.0 and HuBERT: convolutional feature encoder, feature projection, positional
convolution and a post-LN or pre-LN ("stable layer norm") Transformer, as `transformers`
Wav2Vec2Model / HubertModel in inference mode (no masking, no dropout).

  waveform (B, T) → conv layers (kernel k_i, stride s_i, GELU; GroupNorm with one group per channel
  after the first conv when feat_extract_norm='group', LayerNorm over channels after every conv
  when 'layer') → (B, frames, C) → [LayerNorm] → Linear to D → + GELU(grouped weight-normed
  conv over time, 'same' padding, one output dropped for an even kernel) → post-LN: LayerNorm,
  then post-LN blocks | pre-LN: pre-LN blocks, then a final LayerNorm.

HuBERT differs only in `feat_proj_layer_norm` (the LayerNorm before the projection may be absent).
Weight norm w = g·v/‖v‖ (norm over the output and input channels, per kernel tap, dim=2) is
folded at load time. Every hidden state equals `transformers` within 1e-4 (random init, both LN
placements and both feature norms): tests/test_families_speech.py. Real wav2vec 2.0 / HuBERT
weights are not reachable offline here (docs/CROSS_MODAL.md). The untrained baseline draws every
kernel from N(0, init_std²), convolutions included (Hugging Face uses kaiming-normal convolutions
and a N(0, 2/(k·D)) weight-normed positional convolution; this baseline keeps one documented init).

Hidden states (`state_labels`): post-LN: the embeddings after the encoder LayerNorm, then every
layer (as Hugging Face); pre-LN: the embeddings x + pos, every layer's raw output, then the final
LayerNorm (Hugging Face's last entry).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.config import BlockConfig
from anisotropy_jax.models.block import stack_blocks
from anisotropy_jax.models.formats.checkpoint import (block_names, WEIGHTS_FILE, PretrainedError, TensorReader,
                                              config_errors, detect_prefix, require_keys)
from anisotropy_jax.models.family import Family
from anisotropy_jax.models.layers import conv1d, dense, gelu_exact, kernel_init, layer_norm

Array = jax.Array
MODEL_TYPES = ("wav2vec2", "hubert")


@dataclasses.dataclass(frozen=True)
class Wav2Vec2Config:
    block: BlockConfig
    num_layers: int
    conv_dim: tuple[int, ...]
    conv_kernel: tuple[int, ...]
    conv_stride: tuple[int, ...]
    conv_bias: bool = False
    feat_extract_norm: str = "group"
    feat_proj_layer_norm: bool = True
    pos_kernel: int = 128
    pos_groups: int = 16
    stable_layer_norm: bool = False
    model_type: str = "wav2vec2"


class FeatureEncoder(nn.Module):
    config: Wav2Vec2Config

    @nn.compact
    def __call__(self, wave_BxT: Array) -> Array:
        cfg = self.config
        x = wave_BxT.astype(jnp.float32)[:, None, :]
        eps_cfg = dataclasses.replace(cfg.block, layer_norm_eps=1e-5)
        for i, (c, k, s) in enumerate(zip(cfg.conv_dim, cfg.conv_kernel, cfg.conv_stride)):
            w = self.param(f"conv_{i}_kernel", kernel_init(cfg.block), (c, x.shape[1], k),
                           jnp.float32)
            b = (self.param(f"conv_{i}_bias", nn.initializers.zeros, (c,), jnp.float32)
                 if cfg.conv_bias else None)
            x = conv1d(x, w, b, stride=s)
            if cfg.feat_extract_norm == "layer":
                x = layer_norm(eps_cfg, f"conv_{i}_norm")(x.transpose(0, 2, 1)).transpose(0, 2, 1)
            elif i == 0:  # GroupNorm, one group per channel: normalise each channel over time
                mean = x.mean(axis=2, keepdims=True)
                var = ((x - mean) ** 2).mean(axis=2, keepdims=True)
                scale = self.param("conv_0_norm_scale", nn.initializers.ones, (c,), jnp.float32)
                bias = self.param("conv_0_norm_bias", nn.initializers.zeros, (c,), jnp.float32)
                x = (x - mean) * jax.lax.rsqrt(var + 1e-5) * scale[None, :, None] \
                    + bias[None, :, None]
            x = gelu_exact(x)
        return x.transpose(0, 2, 1)  # (B, frames, C)


class Wav2Vec2Encoder(nn.Module):
    """waveform (B, T) → (final_hidden (B, frames, D), probes {"features", "embeddings",
    "blocks", "final_norm_in" (pre-LN), "final_hidden"})."""

    config: Wav2Vec2Config

    @nn.compact
    def __call__(self, wave_BxT: Array) -> tuple[Array, dict[str, Any]]:
        cfg, blk = self.config, self.config.block
        features = FeatureEncoder(cfg, name="feature_encoder")(wave_BxT)
        x = layer_norm(blk, "projection_norm")(features) if cfg.feat_proj_layer_norm else features
        x = dense(blk, blk.d_model, "projection")(x).astype(jnp.float32)
        w = self.param("pos_conv_kernel", kernel_init(blk),
                       (blk.d_model, blk.d_model // cfg.pos_groups, cfg.pos_kernel), jnp.float32)
        b = self.param("pos_conv_bias", nn.initializers.zeros, (blk.d_model,), jnp.float32)
        pos = conv1d(x.transpose(0, 2, 1), w, b, padding=cfg.pos_kernel // 2,
                     groups=cfg.pos_groups)
        pos = gelu_exact(pos[:, :, :x.shape[1]]).transpose(0, 2, 1)  # even kernel: drop one
        x = x + pos
        if not cfg.stable_layer_norm:
            x = layer_norm(blk, "encoder_norm")(x)
        probes: dict[str, Any] = {"features": features, "embeddings": x}
        final_norm = layer_norm(blk, "encoder_norm") if cfg.stable_layer_norm else None
        return stack_blocks(x, blk, cfg.num_layers, probes, final_norm=final_norm), probes


def embedding_matrices(params: dict[str, Any], config: Wav2Vec2Config) -> dict[str, Any]:
    """No vocabulary: "input" is the feature projection's (C, D) kernel."""
    p = params["params"]
    final = p["encoder_norm"]["scale"] if config.stable_layer_norm else None
    return {"input": np.asarray(p["projection"]["kernel"]), "output": None,
            "final_norm_scale": None if final is None else np.asarray(final)}


def summary(config: Wav2Vec2Config) -> dict[str, Any]:
    blk = config.block
    return {"model_type": config.model_type, "modality": "audio",
            "num_layers": config.num_layers, "d_model": blk.d_model, "num_heads": blk.num_heads,
            "d_ff": blk.d_ff, "vocab_size": None, "max_len": None,
            "norm_position": blk.norm_position, "feat_extract_norm": config.feat_extract_norm,
            "untrained_init": "kernels N(0, init_std^2) (convs included), biases 0, norms 1/0"}


def config_from_hf(hf: dict[str, Any], precision: str = "highest", source: str = "config.json"
                   ) -> Wav2Vec2Config:
    model_type = hf.get("model_type")
    if model_type not in MODEL_TYPES:
        raise PretrainedError(f"{source}: model_type={model_type!r} is not one of {MODEL_TYPES}")
    acts = (hf.get("hidden_act", "gelu"), hf.get("feat_extract_activation", "gelu"))
    if acts != ("gelu", "gelu") or hf.get("feat_extract_norm", "group") not in ("group", "layer"):
        raise PretrainedError(f"{source}: unsupported hidden_act/feat_extract_activation {acts} "
                              f"or feat_extract_norm={hf.get('feat_extract_norm')!r}")
    for key in ("conv_pos_batch_norm", "add_adapter"):
        if hf.get(key):
            raise PretrainedError(f"{source}: unsupported settings: {key}=true")
    stable = bool(hf.get("do_stable_layer_norm", False))
    require_keys(hf, ("hidden_size", "num_attention_heads", "intermediate_size",
                      "num_hidden_layers", "conv_dim", "conv_kernel", "conv_stride"), source)
    with config_errors(source):
        block = BlockConfig(
            d_model=int(hf["hidden_size"]), num_heads=int(hf["num_attention_heads"]),
            d_ff=int(hf["intermediate_size"]), norm_position="pre" if stable else "post",
            init="bert", init_std=float(hf.get("initializer_range", 0.02)),
            layer_norm_eps=float(hf.get("layer_norm_eps", 1e-5)), precision=precision)
        return Wav2Vec2Config(
            block=block, num_layers=int(hf["num_hidden_layers"]),
            conv_dim=tuple(int(c) for c in hf["conv_dim"]),
            conv_kernel=tuple(int(c) for c in hf["conv_kernel"]),
            conv_stride=tuple(int(c) for c in hf["conv_stride"]),
            conv_bias=bool(hf.get("conv_bias", False)),
            feat_extract_norm=hf.get("feat_extract_norm", "group"),
            feat_proj_layer_norm=bool(hf.get("feat_proj_layer_norm", True)),
            pos_kernel=int(hf.get("num_conv_pos_embeddings", 128)),
            pos_groups=int(hf.get("num_conv_pos_embedding_groups", 16)),
            stable_layer_norm=stable, model_type=model_type)


# Block parameter → Hugging Face module of `encoder.layers.i.`.
LAYER_NAMES = block_names(
    qkv=("attention.q_proj", "attention.k_proj", "attention.v_proj"),
    out="attention.out_proj", attention_norm="layer_norm",
    fc_in="feed_forward.intermediate_dense", fc_out="feed_forward.output_dense",
    mlp_norm="final_layer_norm")


def _feature_params(read: TensorReader, config: Wav2Vec2Config) -> dict[str, Any]:
    out: dict[str, Any] = {}
    c_in = 1
    for i, (c, k) in enumerate(zip(config.conv_dim, config.conv_kernel)):
        base = f"feature_extractor.conv_layers.{i}."
        out[f"conv_{i}_kernel"] = read.get(base + "conv.weight", (c, c_in, k))
        if config.conv_bias:
            out[f"conv_{i}_bias"] = read.get(base + "conv.bias", (c,))
        if config.feat_extract_norm == "layer":
            out[f"conv_{i}_norm"] = read.norm(base + "layer_norm", c)
        elif i == 0:
            out["conv_0_norm_scale"] = read.get(base + "layer_norm.weight", (c,))
            out["conv_0_norm_bias"] = read.get(base + "layer_norm.bias", (c,))
        c_in = c
    return out


def _weight_normed(read: TensorReader, base: str, config: Wav2Vec2Config) -> np.ndarray | None:
    """g·v/‖v‖ with the norm over dims (0, 1) per tap (torch weight_norm, dim=2), from either
    PyTorch naming (parametrizations.weight.original0/1 or weight_g/weight_v)."""
    d, k = config.block.d_model, config.pos_kernel
    g = read.get(base + "parametrizations.weight.original0", (1, 1, k), aliases=(base + "weight_g",))
    v = read.get(base + "parametrizations.weight.original1", (d, d // config.pos_groups, k),
                 aliases=(base + "weight_v",))
    if g is None or v is None:
        return None
    return g * v / np.sqrt((v.astype(np.float64) ** 2).sum(axis=(0, 1), keepdims=True)).astype(
        np.float32)


def convert(tensors: dict[str, np.ndarray], config: Wav2Vec2Config,
            source: str = WEIGHTS_FILE) -> tuple[dict[str, Any], list[str]]:
    """Hugging Face wav2vec 2.0 / HuBERT tensors → ({"params": tree}, unused tensor names)."""
    read = TensorReader(tensors, detect_prefix(
        tensors, "feature_extractor.conv_layers.0.conv.weight", ("wav2vec2.", "hubert.")))
    d = config.block.d_model
    params: dict[str, Any] = {
        "feature_encoder": _feature_params(read, config),
        "projection": read.linear("feature_projection.projection", config.conv_dim[-1], d),
        "pos_conv_kernel": _weight_normed(read, "encoder.pos_conv_embed.conv.", config),
        "pos_conv_bias": read.get("encoder.pos_conv_embed.conv.bias", (d,)),
        "encoder_norm": read.norm("encoder.layer_norm", d)}
    if config.feat_proj_layer_norm:
        params["projection_norm"] = read.norm("feature_projection.layer_norm", config.conv_dim[-1])
    for i in range(config.num_layers):
        params[f"block_{i}"] = read.block(
            {path: f"encoder.layers.{i}.{name}" for path, name in LAYER_NAMES.items()},
            config.block)
    return read.finish(params, source, r"encoder\.layers\.(\d+)\.", config.num_layers)


# The encoder's keys (conv_pos_batch_norm and add_adapter refused when true); then those of
# pretraining (quantizer, contrastive loss, SpecAugment masks), CTC and the task heads, unused
# by the encoder; num_feat_extract_layers is len(conv_dim).
CONFIG_KEYS = frozenset({
    "hidden_size", "num_attention_heads", "intermediate_size", "num_hidden_layers", "conv_dim",
    "conv_kernel", "conv_stride", "conv_bias", "hidden_act", "feat_extract_activation",
    "feat_extract_norm", "feat_proj_layer_norm", "do_stable_layer_norm", "initializer_range",
    "layer_norm_eps", "num_conv_pos_embeddings", "num_conv_pos_embedding_groups",
    "conv_pos_batch_norm", "add_adapter", "num_feat_extract_layers",
    "feat_proj_dropout", "final_dropout", "layerdrop", "feat_quantizer_dropout",
    "apply_spec_augment", "mask_time_prob", "mask_time_length", "mask_time_min_masks",
    "mask_feature_prob", "mask_feature_length", "mask_feature_min_masks",
    "num_codevectors_per_group", "num_codevector_groups", "contrastive_logits_temperature",
    "num_negatives", "codevector_dim", "proj_codevector_dim", "diversity_loss_weight",
    "ctc_loss_reduction", "ctc_zero_infinity", "use_weighted_layer_sum", "classifier_proj_size",
    "adapter_kernel_size", "adapter_stride", "num_adapter_layers", "output_hidden_size",
    "adapter_attn_dim", "tdnn_dim", "tdnn_kernel", "tdnn_dilation", "xvector_output_dim",
    "vocab_size"})

FAMILY = Family(
    name="wav2vec2", model_types=MODEL_TYPES, module=Wav2Vec2Encoder,
    config_from_hf=config_from_hf, convert=convert, num_layers=lambda cfg: cfg.num_layers,
    summary=summary, embedding_matrices=embedding_matrices, modality="audio",
    final_norm=lambda cfg: cfg.stable_layer_norm, takes_mask=False,
    example_input=lambda cfg: jnp.zeros(
        (1, int(np.prod(cfg.conv_stride)) * 4 + sum(cfg.conv_kernel))),
    config_keys=CONFIG_KEYS)
