"""One stack of independently initialised layers on x = z + s·u, under `lax.scan` over layers, with
the bias sweep's metrics (`studies.sweep.points.reduce_probes`) and the depth metrics after every
layer (docs/DEPTH.md).

  (a layer)         `models.block.Block` with residual_scale = α (and, attention-only,
                    skip_scale): grid.stack_layer builds it
  layer_keys        layer l of a seed is initialised from fold_in(params key, l)
  stack_metrics     one seed, C bias norms: scan over layers, metrics (num_layers, C, ...)
  depth_metrics     effective rank, rank-1 residual and RMS norm of a (B, L, D) residual stream

The scan body is traced once, so compilation does not grow with depth (tested for 2 and 48
layers). Nothing is differentiated, so nothing is rematerialised: a forward scan keeps only its
carry (the C × B × L × D residual streams) and the per-layer scalars.
"""
from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from anisotropy_jax import inputs, metrics
from anisotropy_jax.models.block import Block
from anisotropy_jax.studies.sweep.points import reduce_probes

Array = jax.Array
# Metrics of the residual stream computed by this study (after every layer, and of the input).
DEPTH_METRICS = ("effective_rank", "rank1_residual", "residual_rms")


def layer_keys(params_key: Array, num_layers: int) -> Array:
    """(num_layers,) keys: layer l = fold_in(params_key, l), whatever the depth."""
    return jax.vmap(lambda i: jax.random.fold_in(params_key, i))(jnp.arange(num_layers))


def init_layer(layer: Block, key: Array) -> Any:
    """Parameters of one layer (their shapes do not depend on B or L)."""
    return layer.init(key, jnp.zeros((1, 2, layer.config.d_model), jnp.float32))


def sequence_effective_rank(x_BxLxD: Array) -> Array:
    """Mean over sequences of the effective rank (Roy & Vetterli 2007) of each (L, D) token
    matrix; computed on its transpose, so the Gram matrix is L × L, not D × D."""
    return jnp.mean(jax.vmap(lambda x: metrics.effective_rank(x.T))(x_BxLxD))


def rank1_residual(x_BxLxD: Array) -> Array:
    """Mean over sequences of ‖X − 1·x̄ᵀ‖_F / ‖X‖_F, x̄ the sequence's mean token: the distance to
    the rank-1 matrices of identical tokens (Dong et al. 2021's res(X), Frobenius form; 0 when
    every token is equal, 0 for an all-zero X)."""
    centred = x_BxLxD - jnp.mean(x_BxLxD, axis=1, keepdims=True)
    num = metrics.vector_norms(centred.reshape(centred.shape[0], -1))
    den = metrics.vector_norms(x_BxLxD.reshape(x_BxLxD.shape[0], -1))
    return jnp.mean(num / jnp.where(den > 0, den, 1.0))


def depth_metrics(x_BxLxD: Array) -> dict[str, Array]:
    """The DEPTH_METRICS of one residual stream (float32)."""
    x_BxLxD = x_BxLxD.astype(jnp.float32)
    return {"effective_rank": sequence_effective_rank(x_BxLxD),
            "rank1_residual": rank1_residual(x_BxLxD),
            "residual_rms": _rms(metrics.vector_norms(x_BxLxD))}


def _rms(norms: Array) -> Array:
    """sqrt(mean(n²)), scaled by max n first so that squares of tiny norms cannot underflow."""
    top = jnp.max(norms)
    scaled = norms / jnp.where(top > 0, top, 1.0)
    return top * jnp.sqrt(jnp.mean(jnp.square(scaled)))


def stack_metrics(layer: Block, num_layers: int, weights: str, points_per_step: int,
                  params_key: Array, z_BxLxD: Array, u_D: Array, bias_norms_C: Array
                  ) -> tuple[dict[str, Array], dict[str, Array]]:
    """One seed's stack on x = z + s·u for C bias norms.

    Returns ({name: (C,)} of the input's DEPTH_METRICS, {name: (num_layers, C, ...)} after every
    layer: the bias sweep's metrics and the DEPTH_METRICS of the layer's output). The C residual
    streams go through each layer together (the layer's weights shared: one matmul batch, or
    `points_per_step` at a time); `weights` 'stacked' draws every layer first and scans over the
    stack, 'per_layer' draws each layer inside the scan: same numbers.
    """
    x0_CxBxLxD = jax.vmap(lambda s: inputs.biased_inputs(z_BxLxD, u_D, s))(bias_norms_C)
    keys = layer_keys(params_key, num_layers)
    xs = jax.vmap(functools.partial(init_layer, layer))(keys) if weights == "stacked" else keys

    def one_point(params, x_BxLxD):
        y_BxLxD, probes = layer.apply(params, x_BxLxD)
        return y_BxLxD, reduce_probes(probes, layer.config) | depth_metrics(y_BxLxD)

    def body(x_CxBxLxD, per_layer):
        params = init_layer(layer, per_layer) if weights == "per_layer" else per_layer
        at = functools.partial(one_point, params)
        if points_per_step == 0 or points_per_step >= x_CxBxLxD.shape[0]:
            return jax.vmap(at)(x_CxBxLxD)
        return jax.lax.map(at, x_CxBxLxD, batch_size=points_per_step)

    _, per_layer = jax.lax.scan(body, x0_CxBxLxD, xs)
    return jax.vmap(depth_metrics)(x0_CxBxLxD), per_layer
