"""The CNN baseline: ResNet as `transformers.ResNetModel` (stem conv 7×7/2 + BatchNorm + ReLU +
max-pool 3×3/2, then stages of basic or bottleneck residual layers), in Flax, inference mode
(BatchNorm with its running statistics). No attention: it is measured alike by taking every
spatial position of a stage's feature map as a token (`as_tokens`: (B, C, H, W) → (B, H·W, C)),
and the pooled features (global average of the last stage, Hugging Face's `pooler_output`).

Layout NCHW with PyTorch OIHW kernels, so Hugging Face tensors load without transposition.
Stage outputs equal `ResNetModel(..., output_hidden_states=True).hidden_states` (entry 0 the stem,
entry i stage i) within 1e-4: tests/test_families_vision.py.

Name mapping (Hugging Face → Flax; a "resnet." prefix is accepted), each a conv + BatchNorm with
the names of CONV_NORM_NAMES (the BatchNorm's running statistics are parameters "mean", "var"):
  embedder.embedder                       stem
  encoder.stages.s.layers.l.layer.k       stage_s_l.conv_k
  encoder.stages.s.layers.l.shortcut      stage_s_l.shortcut (where width or stride changes)
"""
from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.models.formats.checkpoint import (WEIGHTS_FILE, PretrainedError, TensorReader,
                                              config_errors, detect_prefix)
from anisotropy_jax.models.family import Family

Array = jax.Array
HIGHEST = jax.lax.Precision.HIGHEST
# ResNet-50 as a config.json (the untrained CNN baseline of the cross-modal comparison).
RESNET50 = {"model_type": "resnet", "embedding_size": 64, "hidden_sizes": [256, 512, 1024, 2048],
            "depths": [3, 4, 6, 3], "layer_type": "bottleneck"}
# ConvNorm parameter → Hugging Face name under a ResNetConvLayer (BatchNorm: running statistics).
CONV_NORM_NAMES = {"kernel": "convolution.weight", "scale": "normalization.weight",
                   "bias": "normalization.bias", "mean": "normalization.running_mean",
                   "var": "normalization.running_var"}


@dataclasses.dataclass(frozen=True)
class ResNetConfig:
    embedding_size: int
    hidden_sizes: tuple[int, ...]
    depths: tuple[int, ...]
    layer_type: str = "bottleneck"
    downsample_in_first_stage: bool = False
    downsample_in_bottleneck: bool = False
    num_channels: int = 3
    image_size: int = 224
    batch_norm_eps: float = 1e-5
    model_type: str = "resnet"


class ConvNorm(nn.Module):
    """Conv (no bias, padding k//2) → BatchNorm (running statistics) → optional ReLU."""

    features: int
    kernel: int
    stride: int = 1
    relu: bool = True
    eps: float = 1e-5

    @nn.compact
    def __call__(self, x_BxCxHxW: Array) -> Array:
        c = x_BxCxHxW.shape[1]
        init = nn.initializers.variance_scaling(2.0, "fan_out", "normal", in_axis=1, out_axis=0)
        w = self.param("kernel", init, (self.features, c, self.kernel, self.kernel), jnp.float32)
        pad = self.kernel // 2
        y = jax.lax.conv_general_dilated(x_BxCxHxW, w, (self.stride, self.stride),
                                         ((pad, pad), (pad, pad)),
                                         dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                         precision=HIGHEST)
        ones, zeros = nn.initializers.ones, nn.initializers.zeros
        scale, bias = (self.param(n, i, (self.features,), jnp.float32)
                       for n, i in (("scale", ones), ("bias", zeros)))
        mean, var = (self.param(n, i, (self.features,), jnp.float32)
                     for n, i in (("mean", zeros), ("var", ones)))
        inv = scale * jax.lax.rsqrt(var + self.eps)
        y = (y - mean[None, :, None, None]) * inv[None, :, None, None] + bias[None, :, None, None]
        return jax.nn.relu(y) if self.relu else y


class ResidualLayer(nn.Module):
    """A basic (3×3, 3×3) or bottleneck (1×1, 3×3, 1×1; width out/4) layer with a projection
    shortcut when the width or the stride changes; ReLU after the sum."""

    config: ResNetConfig
    features: int
    stride: int

    @nn.compact
    def __call__(self, x: Array) -> Array:
        cfg, eps = self.config, self.config.batch_norm_eps
        residual = x
        if x.shape[1] != self.features or self.stride != 1:
            residual = ConvNorm(self.features, 1, self.stride, relu=False, eps=eps,
                                name="shortcut")(x)
        if cfg.layer_type == "basic":
            specs = [(self.features, 3, self.stride, True), (self.features, 3, 1, False)]
        else:
            mid, first = self.features // 4, cfg.downsample_in_bottleneck
            specs = [(mid, 1, self.stride if first else 1, True),
                     (mid, 3, 1 if first else self.stride, True), (self.features, 1, 1, False)]
        for k, (features, kernel, stride, relu) in enumerate(specs):
            x = ConvNorm(features, kernel, stride, relu, eps, name=f"conv_{k}")(x)
        return jax.nn.relu(x + residual)


class ResNet(nn.Module):
    """pixels (B, C, H, W) → (pooled (B, C_last), probes {"embeddings": stem output,
    "stages": [stage outputs (B, C, H, W)], "pooled"})."""

    config: ResNetConfig

    @nn.compact
    def __call__(self, pixels_BxCxHxW: Array) -> tuple[Array, dict[str, Any]]:
        cfg = self.config
        x = ConvNorm(cfg.embedding_size, 7, 2, eps=cfg.batch_norm_eps,
                     name="stem")(pixels_BxCxHxW.astype(jnp.float32))
        x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 3, 3), (1, 1, 2, 2),
                                  ((0, 0), (0, 0), (1, 1), (1, 1)))
        probes: dict[str, Any] = {"embeddings": x, "stages": []}
        for s, (features, depth) in enumerate(zip(cfg.hidden_sizes, cfg.depths)):
            stride = 2 if s > 0 or cfg.downsample_in_first_stage else 1
            for layer in range(depth):
                x = ResidualLayer(cfg, features, stride if layer == 0 else 1,
                                  name=f"stage_{s}_{layer}")(x)
            probes["stages"].append(x)
        probes["pooled"] = x.mean(axis=(2, 3))
        return probes["pooled"], probes


def as_tokens(features_BxCxHxW: Array) -> Array:
    """A feature map as tokens: every spatial position a C-vector, (B, H·W, C) row by row."""
    b, c, h, w = features_BxCxHxW.shape
    return jnp.asarray(features_BxCxHxW).reshape(b, c, h * w).transpose(0, 2, 1)


def hidden_states(probes: dict[str, Any], config: ResNetConfig) -> tuple[Array, ...]:
    """Stages differ in width and size, so the states are a TUPLE (one entry per
    `state_labels`) of token arrays (B, T_s, C_s), spatial positions as tokens (`as_tokens`),
    and last the pooled features (B, 1, C): one token per image."""
    del config
    maps = [probes["embeddings"]] + probes["stages"]
    return tuple(as_tokens(m) for m in maps) + (probes["pooled"][:, None, :],)


def state_labels(config: ResNetConfig) -> tuple[str, ...]:
    return ("embeddings",) + tuple(f"stage_{i + 1}" for i in range(len(config.depths))) + (
        "pooled",)


def embedding_matrices(params: dict[str, Any], config: ResNetConfig) -> dict[str, Any]:
    """No vocabulary: "input" is the stem kernel as (C·7·7, C_stem) rows; no output embedding."""
    del config
    kernel = np.asarray(params["params"]["stem"]["kernel"])
    return {"input": kernel.reshape(kernel.shape[0], -1).T, "output": None,
            "final_norm_scale": None}


def summary(config: ResNetConfig) -> dict[str, Any]:
    return {"model_type": "resnet", "modality": "image", "num_layers": len(config.depths),
            "d_model": config.hidden_sizes[-1], "num_heads": 0, "d_ff": 0, "vocab_size": None,
            "max_len": None, "depths": list(config.depths), "hidden_sizes": list(config.hidden_sizes),
            "layer_type": config.layer_type,
            "untrained_init": "convs kaiming-normal (fan_out, relu); BatchNorm 1/0, running "
                              "mean 0, variance 1"}


def config_from_hf(hf: dict[str, Any], precision: str = "highest", source: str = "config.json"
                   ) -> ResNetConfig:
    """Hugging Face ResNet config.json → ResNetConfig (PretrainedError if unsupported).
    `precision` is accepted for the registry interface; convolutions run at HIGHEST."""
    del precision
    if hf.get("model_type") != "resnet":
        raise PretrainedError(f"{source}: model_type={hf.get('model_type')!r} is not 'resnet'")
    if hf.get("hidden_act", "relu") != "relu" or hf.get("layer_type", "bottleneck") not in (
            "basic", "bottleneck"):
        raise PretrainedError(f"{source}: unsupported hidden_act={hf.get('hidden_act')!r} or "
                              f"layer_type={hf.get('layer_type')!r} (supported: relu; basic, "
                              "bottleneck)")
    with config_errors(source):
        return ResNetConfig(
            embedding_size=int(hf.get("embedding_size", 64)),
            hidden_sizes=tuple(int(h) for h in hf.get("hidden_sizes", (256, 512, 1024, 2048))),
            depths=tuple(int(d) for d in hf.get("depths", (3, 4, 6, 3))),
            layer_type=hf.get("layer_type", "bottleneck"),
            downsample_in_first_stage=bool(hf.get("downsample_in_first_stage", False)),
            downsample_in_bottleneck=bool(hf.get("downsample_in_bottleneck", False)),
            num_channels=int(hf.get("num_channels", 3)))


def _example_pixels(config: ResNetConfig) -> Array:
    return jnp.zeros((1, config.num_channels, 32, 32))


def convert(tensors: dict[str, np.ndarray], config: ResNetConfig,
            source: str = WEIGHTS_FILE) -> tuple[dict[str, Any], list[str]]:
    """Hugging Face ResNet tensors → ({"params": tree} of ResNet, unused names). The tree and
    every tensor's shape are those of the architecture of config.json (a fresh init's)."""
    read = TensorReader(tensors, detect_prefix(tensors, "embedder.embedder.convolution.weight",
                                               ("resnet.",)))
    expected = jax.eval_shape(ResNet(config).init, jax.random.key(0),
                              _example_pixels(config))["params"]
    params: dict[str, Any] = {"stem": _conv_norm(read, "embedder.embedder", expected["stem"])}
    for s, depth in enumerate(config.depths):
        for layer in range(depth):
            node, hf = f"stage_{s}_{layer}", f"encoder.stages.{s}.layers.{layer}."
            params[node] = {name: _conv_norm(read, hf + name.replace("conv_", "layer."), shapes)
                            for name, shapes in expected[node].items()}  # conv_k, shortcut
    return read.finish(params, source, r"encoder\.stages\.(\d+)\.", len(config.depths))


def _conv_norm(read: TensorReader, name: str, shapes: dict[str, Any]) -> dict[str, Any]:
    return {key: read.get(f"{name}.{hf}", shapes[key].shape) for key, hf in CONV_NORM_NAMES.items()}


# out_features, out_indices and stage_names choose a backbone's outputs, not the hidden states.
CONFIG_KEYS = frozenset({
    "hidden_act", "layer_type", "embedding_size", "hidden_sizes", "depths",
    "downsample_in_first_stage", "downsample_in_bottleneck", "num_channels", "out_features",
    "out_indices", "stage_names"})

FAMILY = Family(
    name="resnet", model_types=("resnet",), module=ResNet, config_from_hf=config_from_hf,
    convert=convert, num_layers=lambda cfg: len(cfg.depths), summary=summary,
    embedding_matrices=embedding_matrices, modality="image", takes_mask=False,
    example_input=_example_pixels, hidden_states=hidden_states, state_labels=state_labels,
    config_keys=CONFIG_KEYS)
