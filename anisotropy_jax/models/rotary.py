"""Rotary position embeddings (RoPE) in the GPT-NeoX / Llama "rotate_half" convention.

For a head vector x of width Dh, the first `rotary_dims` (even) dimensions are split in two
halves x1 = x[:r/2], x2 = x[r/2:r] and rotated pairwise by the angle θ_i(p) = p · base^(-2i/r),
i = 0 … r/2 - 1:

    x1' = x1 cos θ - x2 sin θ,    x2' = x2 cos θ + x1 sin θ,

the remaining Dh - r dimensions pass through unchanged (GPT-NeoX's `rotary_pct` < 1). This is
Hugging Face's `apply_rotary_pos_emb` with `rotate_half` (modeling_llama.py, modeling_gpt_neox.py),
not the interleaved (x0, x1), (x2, x3) pairing of the original RoFormer / GPT-J. All arithmetic is
float32; the result is cast back to the input dtype. Parity with transformers: tests/test_families_causal.py.

`config_settings` is the one reading of a checkpoint's rotary settings (fraction rotated, base,
scaling) for every rotary family; GGUF metadata reaches it as the same config.json keys
(models/formats/gguf.py).
"""
from __future__ import annotations

from typing import Any

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


# The config.json keys `config_settings` reads (a family lists them among its handled keys).
CONFIG_KEYS = ("rope_parameters", "rope_scaling", "rope_theta", "rotary_emb_base", "rotary_pct",
               "partial_rotary_factor", "rope_local_base_freq")


def _first(*values: Any, default: float) -> float:
    return float(next((v for v in values if v is not None), default))


def config_settings(hf_config: dict[str, Any], layer_type: str | None = None,
                    default_fraction: float = 1.0, default_base: float = 10000.0
                    ) -> tuple[float, float]:
    """(fraction of each head rotated, base θ) of a checkpoint's config: transformers ≥ 5's
    `rope_parameters` (one dict, or one per layer type as Gemma-3's, chosen by `layer_type`,
    default 'full_attention'), else the older keys: rotary_pct / partial_rotary_factor, and
    rotary_emb_base / rope_theta (rope_local_base_freq for 'sliding_attention' layers).
    ValueError for a scaled rotary (rope_type linear, dynamic, yarn, llama3, ... in
    rope_parameters or rope_scaling): only the default rotary is implemented."""
    params = hf_config.get("rope_parameters") or {}
    per_type = {k: v for k, v in params.items() if isinstance(v, dict)}
    for rope in (hf_config.get("rope_scaling") or {}, params, *per_type.values()):
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind != "default":
            raise ValueError(f"unsupported settings: scaled rotary rope_type={kind!r} "
                             "(supported: 'default')")
    if per_type:
        params = per_type.get(layer_type or "full_attention") or {}
    fraction = _first(params.get("partial_rotary_factor"), hf_config.get("rotary_pct"),
                      hf_config.get("partial_rotary_factor"), default=default_fraction)
    old_bases = (("rope_local_base_freq",) if layer_type == "sliding_attention"
                 else ("rotary_emb_base", "rope_theta"))
    base = _first(params.get("rope_theta"), *(hf_config.get(k) for k in old_bases),
                  default=default_base)
    return fraction, base
