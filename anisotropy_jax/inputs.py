"""Key-driven synthetic inputs of the untrained-block experiment (docs/SCIENCE.md, "Protocol").

x = z + s·u with z ~ N(0, I) of shape (B, L, D) and u a uniformly random unit vector of R^D.
Per seed, one key is split into (parameters, tokens, direction), so the block weights, z and u of a
seed are shared by every bias norm s of that seed: a curve shows the effect of s, not of reseeding.
The controls of docs/SWEEP.md ("The controls") reuse z and u: `fixed_norm_inputs` rescales
z + s·u to the expected norm of z, and `per_sequence_inputs` gives each sequence b its own
direction u_b (`sequence_directions`, drawn from a key folded out of the direction key, so the
draws of z and u, and every earlier result, are unchanged).
Everything here is a pure function of its keys (jit/vmap-safe).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array


class SeedKeys(NamedTuple):
    """The three independent keys of one seed."""

    params: Array
    tokens: Array
    direction: Array


def seed_keys(seed: int, num_seeds: int) -> Array:
    """(num_seeds,) keys: entry i = fold_in(key(seed), i). Adding seeds never changes earlier ones."""
    base = jax.random.key(seed)
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(num_seeds))


def split_seed_key(key: Array) -> SeedKeys:
    """One seed's key → independent keys for the block parameters, the tokens z and the bias u."""
    params, tokens, direction = jax.random.split(key, 3)
    return SeedKeys(params, tokens, direction)


def gaussian_tokens(key: Array, batch_size: int, seq_len: int, d_model: int,
                    dtype=jnp.float32) -> Array:
    """z ~ N(0, I): (B, L, D) i.i.d. standard normal tokens (‖z_i‖² ≈ D)."""
    return jax.random.normal(key, (batch_size, seq_len, d_model), dtype)


def random_unit_vector(key: Array, d_model: int, dtype=jnp.float32) -> Array:
    """u uniform on the unit sphere of R^D (a normalised standard normal vector), shape (D,)."""
    g_D = jax.random.normal(key, (d_model,), dtype)
    return g_D / jnp.linalg.norm(g_D)


def biased_inputs(z_BxLxD: Array, u_D: Array, bias_norm: Array | float) -> Array:
    """x = z + s·u: every token of every sequence gets the same bias vector of norm s."""
    return z_BxLxD + jnp.asarray(bias_norm, z_BxLxD.dtype) * u_D[None, None, :]


def sequence_directions(direction_key: Array, batch_size: int, d_model: int,
                        dtype=jnp.float32) -> Array:
    """(B, D): one direction u_b per sequence, independent and uniform on the unit sphere.

    Drawn from fold_in(direction_key, 1), so they are independent of u = random_unit_vector(
    direction_key) and leave that draw untouched."""
    g_BxD = jax.random.normal(jax.random.fold_in(direction_key, 1), (batch_size, d_model), dtype)
    return g_BxD / jnp.linalg.norm(g_BxD, axis=-1, keepdims=True)


def fixed_norm_scale(bias_norm: Array | float, d_model: int, dtype=jnp.float32) -> Array:
    """1/√(1 + s²/d): E‖z + s·u‖² = d + s², so the scaled inputs keep E‖x‖² = d at every s.
    Written as 1/√(1 + (s/d)·s) so that s² does not overflow before s does."""
    s = jnp.asarray(bias_norm, dtype)
    return jax.lax.rsqrt(1.0 + (s / d_model) * s)


def fixed_norm_inputs(z_BxLxD: Array, u_D: Array, bias_norm: Array | float) -> Array:
    """x = (z + s·u)/√(1 + s²/d): the shared direction of `biased_inputs` without its growth in
    norm (the expected squared norm stays d, that of the unbiased tokens)."""
    scale = fixed_norm_scale(bias_norm, z_BxLxD.shape[-1], z_BxLxD.dtype)
    return biased_inputs(z_BxLxD, u_D, bias_norm) * scale


def per_sequence_inputs(z_BxLxD: Array, u_BxD: Array, bias_norm: Array | float) -> Array:
    """x_b = z_b + s·u_b: every token of sequence b gets the bias of direction u_b (B, D), shared
    within the sequence only (independent directions across sequences)."""
    return z_BxLxD + jnp.asarray(bias_norm, z_BxLxD.dtype) * u_BxD[:, None, :]
