"""Key-driven synthetic inputs of the untrained-block experiment (docs/SCIENCE.md, "Protocol").

x = z + s·u with z ~ N(0, I) of shape (B, L, D) and u a uniformly random unit vector of R^D.
Per seed, one key is split into (parameters, tokens, direction), so the block weights, z and u of a
seed are shared by every bias norm s of that seed: a curve shows the effect of s, not of reseeding.
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
