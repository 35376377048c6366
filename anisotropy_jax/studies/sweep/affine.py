"""The sweep's inputs and its shared attention input projection: x = z + s·u gives
x·W + b = (z·W + b) + s·(u·W); the norm-matched control x = z·c, c = √(1 + s²/d), gives c·(z·W) + b;
the fixed-norm control x = (z + s·u)/c gives (z·W + s·(u·W))/c + b; the per-sequence control
x_b = z_b + s·u_b gives z_b·W + s·(u_b·W) + b.

Where attention sees x itself (post-LN or no LN), its input projection is affine in the bias norm
s, so each seed's z·W and u·W are computed once per chunk and every point's projection is an
element-wise update instead of a (B·L, D) × (D, 3D) matmul (a quarter of a BERT-base block's
FLOPs). The block receives it through `models.attention.PrecomputedQKV`; `AffineProjection`
implements that protocol, and the fused kernel then forms q + s·(u·W_q) on chip
(`models.fused_attention`, "affine inputs"); `ScaledProjection` is the control's (assembled, then
used like a stored projection), and `MixedProjection` that of the other two controls. The model
never sees s as a bias norm: only a projection. All are tested equal to the literal block in
tests/test_sweep.py.

`u` is one seed's bias direction: (D,) for every kind but 'per_sequence', whose u is (B, D), one
direction per sequence (`grid.init_seeds` draws the shape the kind needs).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from anisotropy_jax import inputs
from anisotropy_jax.config import BlockConfig
from anisotropy_jax.models.attention import AffineQKV, stored_qkv
from anisotropy_jax.models.block import Block
from anisotropy_jax.models.layers import matmul_settings

Array = jax.Array


class AffineProjection(NamedTuple):
    """qkv = base + s·slope: base_BxLx3D = z·W + b and slope_3D = u·W (float32) are shared by
    every s of a seed; only the scalar s is per point (a `PrecomputedQKV`)."""

    base_BxLx3D: Array
    slope_3D: Array
    bias_norm: Array

    def assemble(self) -> Array:
        """(B, L, 3D): XLA fuses the update into its consumers."""
        return (self.base_BxLx3D
                + jnp.asarray(self.bias_norm, jnp.float32) * self.slope_3D[None, None, :])

    def affine_form(self) -> AffineQKV:
        return AffineQKV(self.base_BxLx3D, self.slope_3D, self.bias_norm)


class ScaledProjection(NamedTuple):
    """qkv = scale·(z·W) + b for the norm-matched control (a `PrecomputedQKV` with no affine
    form in the bias norm: the fused kernel receives q, k, v as computed here)."""

    qkv_z_BxLx3D: Array
    bias_3D: Array | None
    scale: Array

    def assemble(self) -> Array:
        qkv = jnp.asarray(self.scale, jnp.float32) * self.qkv_z_BxLx3D
        return qkv if self.bias_3D is None else qkv + self.bias_3D[None, None, :]

    def affine_form(self) -> None:
        return None


class MixedProjection(NamedTuple):
    """qkv = scale·(z·W + s·(u·W)) + b for the fixed-norm (scale 1/√(1 + s²/d)) and per-sequence
    (scale 1, u·W of shape (B, 3D)) controls; assembled, then used like a stored projection."""

    qkv_z_BxLx3D: Array
    qkv_u: Array  # (3D,) or (B, 3D)
    bias_3D: Array | None
    bias_norm: Array
    scale: Array

    def assemble(self) -> Array:
        s = jnp.asarray(self.bias_norm, jnp.float32)
        slope = self.qkv_u[None, None, :] if self.qkv_u.ndim == 1 else self.qkv_u[:, None, :]
        qkv = jnp.asarray(self.scale, jnp.float32) * (self.qkv_z_BxLx3D + s * slope)
        return qkv if self.bias_3D is None else qkv + self.bias_3D[None, None, :]

    def affine_form(self) -> None:
        return None


def norm_matched_scale(bias_norm: Array, d_model: int) -> Array:
    """c = √(1 + s²/d): z·c has the expected squared norm d + s² of z + s·u (float32; overflows
    to inf only where s² does)."""
    s = jnp.asarray(bias_norm, jnp.float32)
    return jnp.sqrt(1.0 + (s / d_model) * s)


def sweep_inputs(kind: str, z_BxLxD: Array, u: Array, bias_norm: Array) -> Array:
    """The block input of one grid point (`config.sweep.INPUTS`): 'biased' x = z + s·u,
    'norm_matched' x = z·√(1 + s²/d), 'fixed_norm' x = (z + s·u)/√(1 + s²/d), 'per_sequence'
    x_b = z_b + s·u_b (u of shape (B, D))."""
    if kind == "biased":
        return inputs.biased_inputs(z_BxLxD, u, bias_norm)
    if kind == "norm_matched":
        return z_BxLxD * norm_matched_scale(bias_norm, z_BxLxD.shape[-1]).astype(z_BxLxD.dtype)
    if kind == "fixed_norm":
        return inputs.fixed_norm_inputs(z_BxLxD, u, bias_norm)
    if kind == "per_sequence":
        return inputs.per_sequence_inputs(z_BxLxD, u, bias_norm)
    raise ValueError(f"inputs: unknown inputs {kind!r}")


class ProjectedSeed(NamedTuple):
    """One seed's attention input projection, split along x = z + s·u (float32, no bias)."""

    qkv_z_BxLx3D: Array  # z·[W_q W_k W_v]
    qkv_u_3D: Array      # u·[W_q W_k W_v]; (B, 3D) for per-sequence directions


def can_reuse_projections(block: BlockConfig) -> bool:
    """Whether attention sees x itself (post-LN or no LN), so its input projection is linear in s.
    With pre-LN it sees LN(z + s·u), which is not."""
    return block.norm_position != "pre"


def qkv_projection(config: BlockConfig, block_params: Any, x_NxD: Array) -> Array:
    """x·[W_q W_k W_v] (no bias) in float32 at the configured matmul precision, for inputs of any
    leading shape (..., D) → (..., 3D), from the parameters of a `Block`."""
    dtype, precision = matmul_settings(config)
    kernel_Dx3D, _ = stored_qkv(block_params["params"]["attention"])
    return jnp.dot(x_NxD.astype(dtype), kernel_Dx3D.astype(dtype), precision=precision,
                   preferred_element_type=jnp.float32)


def project_seed(block: BlockConfig, params: Any, z_BxLxD: Array, u_D: Array) -> ProjectedSeed:
    """z·W and u·W, computed once per seed and shared by all its bias norms."""
    return ProjectedSeed(qkv_projection(block, params, z_BxLxD),
                         qkv_projection(block, params, u_D))


def block_at(block: BlockConfig, params: Any, z_BxLxD: Array, u_D: Array, bias_norm: Array,
             projected: ProjectedSeed | None = None, kind: str = "biased",
             reduction_statistics: bool = False) -> tuple[Array, dict[str, Array]]:
    """(output, probes) of the block on the inputs of `kind` (`sweep_inputs`; u_D is (B, D) for
    'per_sequence'); with `projected`
    (see `project_seed`) the attention input projection is assembled from it instead of
    recomputed. `reduction_statistics`: the fused kernel's on-chip statistics for the metric
    reduction (`models.attention.SelfAttention`)."""
    x_BxLxD = sweep_inputs(kind, z_BxLxD, u_D, bias_norm)
    precomputed = None
    if projected is not None:
        base_BxLx3D = projected.qkv_z_BxLx3D  # shared by every s of the seed (unbatched)
        _, bias_3D = stored_qkv(params["params"]["attention"])
        if kind == "norm_matched":
            scale = norm_matched_scale(bias_norm, block.d_model)
            precomputed = ScaledProjection(base_BxLx3D, bias_3D, scale)
        elif kind in ("fixed_norm", "per_sequence"):
            scale = (inputs.fixed_norm_scale(bias_norm, block.d_model) if kind == "fixed_norm"
                     else jnp.float32(1.0))
            precomputed = MixedProjection(base_BxLx3D, projected.qkv_u_3D, bias_3D, bias_norm,
                                          scale)
        else:
            if bias_3D is not None:
                base_BxLx3D = base_BxLx3D + bias_3D[None, None, :]
            precomputed = AffineProjection(base_BxLx3D, projected.qkv_u_3D, bias_norm)
    return Block(block).apply(params, x_BxLxD, precomputed_qkv=precomputed,
                                         reduction_statistics=reduction_statistics)
