"""Helpers shared by the vision and speech families (models/vit.py, resnet.py, whisper.py,
wav2vec2.py): a reader of Hugging Face tensors by name with shape checks and one-line errors, the
prefix detector, a 1-D convolution in PyTorch layout (NCW input, OIW kernel), and PyTorch's
bicubic resampling of position tables as (out, in) matrices."""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.models.bert import PretrainedError

Array = jax.Array


class Weights:
    """Takes tensors by name as float32 with a shape check; records what was used and missing.
    Shared by the vision and speech family modules."""

    def __init__(self, tensors: dict[str, np.ndarray], prefix: str = ""):
        self.tensors, self.prefix = tensors, prefix
        self.used: set[str] = set()
        self.missing: list[str] = []
        self.wrong: list[str] = []

    def has(self, name: str) -> bool:
        return self.prefix + name in self.tensors

    def get(self, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
        key = self.prefix + name
        if key not in self.tensors:
            self.missing.append(key)
            return np.zeros(shape or (1,), np.float32)
        self.used.add(key)
        value = np.asarray(self.tensors[key], np.float32)
        if shape is not None and value.size == int(np.prod(shape)) and value.shape != shape:
            value = value.reshape(shape)  # e.g. (1, 1, D) tokens stored as (D,)
        if shape is not None and value.shape != shape:
            self.wrong.append(f"{key} has shape {value.shape}, expected {shape}")
        return value

    def linear(self, name: str, scale: np.ndarray | None = None, bias: bool = True) -> dict:
        """(out, in) weight → (in, out) kernel; an optional per-output scale folded in."""
        weight = self.get(name + ".weight")
        b = self.get(name + ".bias", (weight.shape[0],)) if bias or self.has(name + ".bias") \
            else np.zeros(weight.shape[0], np.float32)
        s = np.ones(weight.shape[0], np.float32) if scale is None else scale
        return {"kernel": np.ascontiguousarray(weight.T * s[None, :]), "bias": b * s}

    def norm(self, name: str, dim: int) -> dict:
        return {"scale": self.get(name + ".weight", (dim,)), "bias": self.get(name + ".bias", (dim,))}

    def check(self, source: str) -> list[str]:
        """Raises a one-line PretrainedError on missing or misshapen tensors; returns the unused."""
        if self.missing:
            shown = ", ".join(self.missing[:6])
            raise PretrainedError(f"{source}: missing tensors {shown}"
                                  + (f" ({len(self.missing)} in all)" if len(self.missing) > 6 else ""))
        if self.wrong:
            raise PretrainedError(f"{source}: {'; '.join(self.wrong[:3])}")
        return sorted(set(self.tensors) - self.used)


def detect_prefix(tensors: dict[str, Any], anchor: str, prefixes: tuple[str, ...]) -> str:
    """The prefix under which `anchor` is stored ('' if none matches)."""
    return next((p for p in prefixes if p + anchor in tensors), "")


def conv1d(x_BxCxT: Array, kernel_OxIxK: Array, bias_O: Array | None, stride: int = 1,
           padding: int = 0, groups: int = 1) -> Array:
    """torch.nn.functional.conv1d at HIGHEST precision: (B, C, T) → (B, O, T')."""
    y = jax.lax.conv_general_dilated(x_BxCxT, kernel_OxIxK, (stride,), ((padding, padding),),
                                     dimension_numbers=("NCH", "OIH", "NCH"),
                                     feature_group_count=groups,
                                     precision=jax.lax.Precision.HIGHEST)
    return y if bias_O is None else y + bias_O[None, :, None]


# --------------------------------------------------------------------------------------------
# Position interpolation (ViT family)

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
