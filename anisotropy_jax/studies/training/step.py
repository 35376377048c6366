"""The pieces of one training step: model state, loss, optimiser, the jitted update, and the
data-parallel layout they run in.

Optimiser (`optimizers.py`): AdamW by default (weight decay on kernels and embeddings, ndim ≥ 2),
or Muon, momentum SGD or AdamW in a rotated basis (`optim.optimizer`); linear warmup then cosine
decay, global-norm gradient clipping. The batch axis is sharded over every visible device
(`jax.sharding.NamedSharding` on a one-axis mesh "data"); parameters and optimiser state are
replicated.
"""
from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from anisotropy_jax.config import TrainConfig, require, resolve_attention_impl
from anisotropy_jax.models.transformer import Transformer
from anisotropy_jax.studies.training.optimizers import optimizer


def weighted_cross_entropy(logits_BxLxV: jax.Array, targets_BxL: jax.Array,
                           weights_BxL: jax.Array) -> jax.Array:
    """Σ w·CE / max(Σ w, 1), in float32 (nats per predicted byte)."""
    ce_BxL = optax.softmax_cross_entropy_with_integer_labels(
        logits_BxLxV.astype(jnp.float32), targets_BxL)
    return jnp.sum(ce_BxL * weights_BxL) / jnp.maximum(jnp.sum(weights_BxL), 1.0)


def init_state(model: nn.Module, tx: optax.GradientTransformation, seed: int,
               seq_len: int) -> dict[str, Any]:
    """{"step": 0, "params": the model's variables, "opt_state"} — the tree every checkpoint
    holds."""
    variables = model.init(jax.random.key(seed), jnp.zeros((1, seq_len), jnp.int32))
    return {"step": jnp.zeros((), jnp.int32), "params": variables,
            "opt_state": tx.init(variables)}


def all_finite(tree) -> jax.Array:
    """Whether every element of every leaf is finite, as one scalar reduction: Σ 0·x over all
    elements is 0 when every x is finite and NaN as soon as one is ±inf or NaN (0·inf = NaN).
    Unlike Σ x² it cannot overflow for finite x, so no finite tree is reported non-finite."""
    return jnp.isfinite(sum(jnp.sum(x * 0.0) for x in jax.tree.leaves(tree)))


def train_step(state, batch, *, model: nn.Module, tx: optax.GradientTransformation,
               schedule: optax.Schedule):
    """One optimiser update; metrics: loss, learning rate (`schedule`'s), gradient norm (before
    clipping), whether the new parameters are all finite."""

    def loss_fn(variables):
        logits, _ = model.apply(variables, batch["inputs"])
        return weighted_cross_entropy(logits, batch["targets"], batch["weights"])

    loss, grads = jax.value_and_grad(loss_fn)(state["params"])
    updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
    params = optax.apply_updates(state["params"], updates)
    metrics = {"loss": loss, "learning_rate": schedule(state["step"]),
               "grad_norm": optax.tree.norm(grads), "params_finite": all_finite(params)}
    return {"step": state["step"] + 1, "params": params, "opt_state": opt_state}, metrics


def eval_loss(variables, batch, *, model: nn.Module):
    """The weighted cross-entropy of `batch` (no update)."""
    logits, _ = model.apply(variables, batch["inputs"])
    return weighted_cross_entropy(logits, batch["targets"], batch["weights"])


def data_mesh() -> Mesh:
    """All visible devices on one axis, "data"."""
    return Mesh(np.array(jax.devices()), ("data",))


def check_devices(config: TrainConfig, num_devices: int | None = None) -> None:
    """The global batch must split evenly over the devices (checked before any compilation)."""
    n = jax.device_count() if num_devices is None else num_devices
    require(config.data.batch_size % n == 0, "data.batch_size",
            f"{config.data.batch_size} does not split over the {n} devices; use a multiple of {n}")
    require(config.eval_batch_size % n == 0, "eval_batch_size",
            f"{config.eval_batch_size} does not split over the {n} devices; use a multiple of {n}")


def abstract_state(config: TrainConfig) -> tuple[Any, nn.Module, optax.GradientTransformation]:
    """(abstract train state with replicated shardings, the model the training step runs,
    optimiser). The model's attention core is `config.model.attention_impl` resolved for this
    backend (`config.resolve_attention_impl`; the parameters are the same for every core: the
    analysis rebuilds the model with the 'xla' core, `TrainConfig.transformer_config()`)."""
    attention_impl = resolve_attention_impl(config.model, jax.default_backend())
    model = Transformer(config.transformer_config(attention_impl))
    tx = optimizer(config.optim, config.steps)
    shapes = jax.eval_shape(functools.partial(init_state, model, tx, config.seed,
                                              config.data.seq_len))
    replicated = NamedSharding(data_mesh(), P())
    abstract = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=replicated),
                            shapes)
    return abstract, model, tx
