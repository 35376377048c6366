"""Weights through a GGUF quantisation type and back (quantise, then dequantise with the `gguf`
package's own dequantiser, as the GGUF reader does): the quantisation control of docs/EXTREME.md.

  round_trip(rows, kind)   an (N, n) float array as GGUF type `kind` would store and read it
  round_trip_params(params, kind)   every 2-D kernel and embedding table of a parameter tree

Q8_0, Q5_0, Q4_1 and Q4_0 are quantised by `gguf.quants.quantize`. These are the offline
GGUFs' types (docs/PRETRAINED.md): SmolLM2-135M is Q4_1 with a Q8_0 embedding, Gemma-3-270M
Q4_K_M, Qwen2.5-Coder-0.5B Q4_K_M that is mostly Q5_0 (its 896 columns are no multiple of 256).
The `gguf` package has no Q4_K quantiser (its Q4_K is dequantise-only), so `q4_k_blocks` writes
Q4_K's 144-byte blocks itself: per 256 values, 8 sub-blocks of 32 with a 6-bit scale and a 6-bit
min each, under two float16 super-scales (llama.cpp's block_q4_K layout). Each sub-block's scale
and min are its plain min-max range (min ≤ 0 ≤ max), without llama.cpp's iterative search
(make_qkx2_quants), so its error can exceed llama.cpp's Q4_K (not compared: no llama.cpp here;
on Gaussian rows it is Q4_1's, tests/test_quantise.py). The blocks are read back by gguf's Q4_K
dequantiser, so the layout is gguf's. Q4_K_M's mix (some tensors at Q6_K) is not reproduced:
every quantised tensor is Q4_K.
"""
from __future__ import annotations

from typing import Any

import jax
import numpy as np

KINDS = ("Q8_0", "Q5_0", "Q4_1", "Q4_0", "Q4_K")
BLOCK = {"Q8_0": 32, "Q5_0": 32, "Q4_1": 32, "Q4_0": 32, "Q4_K": 256}  # values per block along a row


def _f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16)


def q4_k_blocks(rows: np.ndarray) -> np.ndarray:
    """(N, 256·k) float32 → (N, 144·k) uint8: Q4_K blocks (module docstring)."""
    n = rows.shape[0]
    x = np.asarray(rows, np.float32).reshape(-1, 8, 32)
    low, high = np.minimum(x.min(-1), 0.0), np.maximum(x.max(-1), 0.0)
    scale, mins = (high - low) / 15.0, -low  # per sub-block: x ≈ scale·q − mins, q in 0..15
    d, dmin = _f16(scale.max(-1) / 63.0), _f16(mins.max(-1) / 63.0)
    d32, dmin32 = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d32 > 0, np.clip(np.rint(scale / d32), 0, 63), 0).astype(np.uint8)
        m = np.where(dmin32 > 0, np.clip(np.rint(mins / dmin32), 0, 63), 0).astype(np.uint8)
        step, offset = (d32 * sc)[..., None], (dmin32 * m)[..., None]
        q = np.where(step > 0, np.clip(np.rint((x + offset) / step), 0, 15), 0).astype(np.uint8)
    scales = np.empty((x.shape[0], 12), np.uint8)
    scales[:, 0:4] = (sc[:, :4] & 0x3F) | ((sc[:, 4:] >> 4) << 6)
    scales[:, 4:8] = (m[:, :4] & 0x3F) | ((m[:, 4:] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:] & 0x0F) | ((m[:, 4:] & 0x0F) << 4)
    pairs = q.reshape(-1, 4, 2, 32)  # sub-blocks 2j (low nibble) and 2j + 1 (high nibble)
    qs = (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(-1, 128)
    blocks = np.concatenate([d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2),
                             scales, qs], axis=1)
    return blocks.reshape(n, -1)


def round_trip(rows: np.ndarray, kind: str) -> np.ndarray:
    """`rows` (N, n), n a multiple of BLOCK[kind], quantised to GGUF type `kind` and read back
    (float32, the same shape)."""
    from gguf import quants
    from gguf.constants import GGMLQuantizationType

    qtype = GGMLQuantizationType[kind]
    rows = np.ascontiguousarray(rows, np.float32)
    if rows.shape[-1] % BLOCK[kind]:
        raise ValueError(f"{kind}: a row of {rows.shape[-1]} values is not whole blocks of "
                         f"{BLOCK[kind]}")
    data = q4_k_blocks(rows) if kind == "Q4_K" else quants.quantize(rows, qtype)
    return quants.dequantize(data, qtype).reshape(rows.shape)


def round_trip_params(params: Any, kind: str) -> tuple[Any, dict[str, float]]:
    """Every 2-D `kernel` (blocks along its input axis, a GGUF weight's rows) and `embedding`
    (blocks along the model axis) of `params` through `kind`, where that axis is whole blocks;
    every other leaf (biases, norms, other tables) as it is. Also the parameter counts
    quantised and kept, and the quantised weights' relative RMS error ‖ŵ − w‖ / ‖w‖."""
    counts, squares = {"quantised": 0, "kept": 0}, [0.0, 0.0]

    def leaf(path, value):
        name = getattr(path[-1], "key", None)
        a = np.asarray(value)
        axis = {"kernel": 0, "embedding": 1}.get(name)
        if a.ndim != 2 or axis is None or a.shape[axis] % BLOCK[kind]:
            counts["kept"] += a.size
            return value
        counts["quantised"] += a.size
        rows = a.T if axis == 0 else a
        out = round_trip(rows, kind)
        squares[0] += float(np.sum((out - rows).astype(np.float64) ** 2))
        squares[1] += float(np.sum(rows.astype(np.float64) ** 2))
        return (out.T if axis == 0 else out).astype(a.dtype)

    tree = jax.tree_util.tree_map_with_path(leaf, params)
    rel_rmse = (squares[0] / squares[1]) ** 0.5 if squares[1] else 0.0
    return tree, {**counts, "rel_rmse": rel_rmse}
