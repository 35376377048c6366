"""Rotary position embeddings (RoPE) in the GPT-NeoX / Llama "rotate_half" convention.

For a head vector x of width Dh, the first `rotary_dims` (even) dimensions are split in two
halves x1 = x[:r/2], x2 = x[r/2:r] and rotated pairwise by the angle θ_i(p) = p · base^(-2i/r),
i = 0 … r/2 - 1:

    x1' = x1 cos θ - x2 sin θ,    x2' = x2 cos θ + x1 sin θ,

the remaining Dh - r dimensions pass through unchanged (GPT-NeoX's `rotary_pct` < 1). This is
Hugging Face's `apply_rotary_pos_emb` with `rotate_half` (modeling_llama.py, modeling_gpt_neox.py),
not the interleaved (x0, x1), (x2, x3) pairing of the original RoFormer / GPT-J. All arithmetic is
float32; the result is cast back to the input dtype. Parity with transformers: tests/test_families_causal.py.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def inverse_frequencies(rotary_dims: int, base: float) -> Array:
    """base^(-2i/r) for i = 0 … r/2 - 1, (r/2,) float32 (Hugging Face's default `inv_freq`)."""
    if rotary_dims <= 0 or rotary_dims % 2:
        raise ValueError(f"rotary_dims must be a positive even number, got {rotary_dims}")
    exponents = jnp.arange(0, rotary_dims, 2, dtype=jnp.float32) / rotary_dims
    return 1.0 / (jnp.float32(base) ** exponents)


def rotary_angles(positions_L: Array, rotary_dims: int, base: float) -> tuple[Array, Array]:
    """(cos, sin) of the angles, each (L, r) float32 with the r/2 frequencies repeated twice
    ([θ_0 … θ_{r/2-1}, θ_0 … θ_{r/2-1}]), as Hugging Face's rotary embedding returns them."""
    freqs_LxR2 = (jnp.asarray(positions_L, jnp.float32)[:, None]
                  * inverse_frequencies(rotary_dims, base)[None, :])
    angles_LxR = jnp.concatenate([freqs_LxR2, freqs_LxR2], axis=-1)
    return jnp.cos(angles_LxR), jnp.sin(angles_LxR)


def rotate_half(x: Array) -> Array:
    """[x1, x2] → [-x2, x1] over the last axis."""
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([-x2, x1], axis=-1)


def apply_rotary(x_BxLxHxDh: Array, positions_L: Array, rotary_dims: int,
                 base: float = 10000.0) -> Array:
    """Rotates the first `rotary_dims` dims of every head of (B, L, H, Dh) queries or keys by
    their positions (L,); the rest pass through. Same shape and dtype as the input."""
    head_dim = x_BxLxHxDh.shape[-1]
    if rotary_dims > head_dim:
        raise ValueError(f"rotary_dims {rotary_dims} > head width {head_dim}")
    if positions_L.shape != (x_BxLxHxDh.shape[1],):
        raise ValueError(f"positions shape {positions_L.shape} != (L,) = "
                         f"({x_BxLxHxDh.shape[1]},)")
    cos_LxR, sin_LxR = rotary_angles(positions_L, rotary_dims, base)
    cos, sin = cos_LxR[None, :, None, :], sin_LxR[None, :, None, :]  # broadcast over B and H
    x32 = x_BxLxHxDh.astype(jnp.float32)
    rot, rest = x32[..., :rotary_dims], x32[..., rotary_dims:]
    rotated = rot * cos + rotate_half(rot) * sin
    return jnp.concatenate([rotated, rest], axis=-1).astype(x_BxLxHxDh.dtype)


def rotary_dims_for(head_dim: int, fraction: float) -> int:
    """GPT-NeoX's rotary width int(head_dim · rotary_pct) (Hugging Face's rounding)."""
    return int(head_dim * fraction)
