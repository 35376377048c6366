"""The optimisers of a training run (`OptimConfig.optimizer`), each after global-norm gradient
clipping (unless grad_clip = 0) and on the warmup + cosine schedule (`learning_rate_schedule`):

  adamw          AdamW; decoupled weight decay on tensors of ndim ≥ 2 (kernels, embeddings), not
                 on biases and norm gains.
  muon           Muon (Keller Jordan's reference: Nesterov momentum, orthogonalised by five
                 Newton–Schulz steps, scaled by sqrt(max(1, fan_out / fan_in))) on the kernels of
                 the blocks, at muon_learning_rate; AdamW, exactly as 'adamw', on the embeddings,
                 an untied output head, the gains and the biases.
  sgd            SGD with heavy-ball momentum (m ← μ·m + g, update −lr·m) and AdamW's decoupled
                 weight decay (−lr·wd·W on the same tensors).
  adamw_rotated  AdamW whose moments live in a fixed random orthogonal basis of each matrix W
                 (m × n): Adam on G' = Uᵀ G V, its update rotated back, Δ = U Δ' Vᵀ; U, V Haar
                 random, drawn once from rotation_seed and kept in the optimiser state. The
                 weight decay is applied in the original basis (rotation commutes with it).
                 Other tensors: plain AdamW.

A parameter of ndim > 2 (a multi-axis kernel such as Flax DenseGeneral's (D, H, Dh) query kernel)
is read as the matrix it is (`matrix_axes`): its leading input axes by its trailing output axes.
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from optax.contrib import MuonDimensionNumbers, scale_by_muon

from anisotropy_jax.config import OptimConfig

# Modules whose multi-axis kernel maps all axes but the last (heads × head width) to the last (an
# output projection, DenseGeneral (H, Dh, D)); any other kernel maps its first axis to the rest.
OUTPUT_PROJECTIONS = ("out", "fc_out", "output")
# The Newton–Schulz iteration of Muon (optax's default coefficients, the reference's quintic).
MUON_NS_STEPS = 5
_HIGHEST = jax.lax.Precision.HIGHEST


def main_learning_rate(optim: OptimConfig) -> float:
    """The peak learning rate the metrics log: sgd_learning_rate for 'sgd', learning_rate for
    the others (for 'muon' that of its AdamW part; its matrices follow the same schedule scaled
    to muon_learning_rate)."""
    return optim.sgd_learning_rate if optim.optimizer == "sgd" else optim.learning_rate


def learning_rate_schedule(optim: OptimConfig, steps: int, peak: float | None = None
                           ) -> optax.Schedule:
    """Linear warmup from peak / warmup_steps (at update 0) to the peak (at update warmup_steps),
    then cosine to peak · end_lr_ratio at `steps`; `peak` defaults to `main_learning_rate`. The
    warmup does not start at 0: an update with learning rate 0 changes nothing, and the step-1
    checkpoint would equal step 0's bit for bit (docs/TRAIN.md, "Learning-rate schedule")."""
    peak = main_learning_rate(optim) if peak is None else peak
    warmup = optim.warmup_steps
    return optax.warmup_cosine_decay_schedule(
        init_value=peak / warmup if warmup else peak, peak_value=peak, warmup_steps=warmup,
        decay_steps=max(steps, warmup + 1), end_value=peak * optim.end_lr_ratio)


def optimizer(optim: OptimConfig, steps: int) -> optax.GradientTransformation:
    """`optim.optimizer` (module docstring) after global-norm clipping (unless grad_clip = 0)."""
    schedule = learning_rate_schedule(optim, steps)
    decay_mask = lambda params: jax.tree.map(lambda p: p.ndim >= 2, params)  # noqa: E731
    if optim.optimizer == "adamw":
        tx = optax.adamw(schedule, b1=optim.b1, b2=optim.b2, eps=optim.eps,
                         weight_decay=optim.weight_decay, mask=decay_mask)
    elif optim.optimizer == "muon":
        tx = muon(optim, steps, optax.adamw(schedule, b1=optim.b1, b2=optim.b2, eps=optim.eps,
                                            weight_decay=optim.weight_decay, mask=decay_mask))
    elif optim.optimizer == "sgd":
        tx = optax.chain(optax.trace(decay=optim.momentum, nesterov=False),
                         optax.add_decayed_weights(optim.weight_decay, decay_mask),
                         optax.scale_by_learning_rate(schedule))
    else:
        tx = optax.chain(in_rotated_basis(optax.scale_by_adam(b1=optim.b1, b2=optim.b2,
                                                              eps=optim.eps),
                                          optim.rotation_seed),
                         optax.add_decayed_weights(optim.weight_decay, decay_mask),
                         optax.scale_by_learning_rate(schedule))
    if optim.grad_clip > 0:
        return optax.chain(optax.clip_by_global_norm(optim.grad_clip), tx)
    return tx


def _keys(path: tuple) -> tuple[str, ...]:
    return tuple(str(getattr(k, "key", getattr(k, "name", k))) for k in path)


def matrix_axes(path: tuple, leaf: Any) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(input axes, output axes) of the parameter at `path` read as a matrix; None when ndim < 2.
    2-D: (0,), (1,) (a kernel (fan-in, fan-out), an embedding (V, D)). More axes: the kernel of
    an output projection (OUTPUT_PROJECTIONS) maps all axes but the last to the last, any other
    its first axis to the rest. Inputs always lead, so the matrix is a plain reshape."""
    if leaf.ndim < 2:
        return None
    keys = _keys(path)
    if leaf.ndim > 2 and len(keys) >= 2 and keys[-2] in OUTPUT_PROJECTIONS:
        return tuple(range(leaf.ndim - 1)), (leaf.ndim - 1,)
    return (0,), tuple(range(1, leaf.ndim))


def matrix_shape(path: tuple, leaf: Any) -> tuple[int, int]:
    """(m, n) of the parameter at `path` as a matrix (`matrix_axes`)."""
    inputs, outputs = matrix_axes(path, leaf)
    return (math.prod(leaf.shape[a] for a in inputs), math.prod(leaf.shape[a] for a in outputs))


def is_hidden_matrix(path: tuple, leaf: Any) -> bool:
    """Whether Muon updates this parameter: a kernel (ndim ≥ 2) inside the blocks; not an
    embedding ("embedding") and not an untied output head (module "output")."""
    keys = _keys(path)
    return leaf.ndim >= 2 and keys[-1] == "kernel" and "output" not in keys


# --------------------------------------------------------------------------------------------
# Muon

def _muon_dimension_numbers(tree: Any) -> Any:
    """Each Muon parameter's (input, output) axes; the leaves masked off for AdamW are
    optax's MaskedNode (no leaves), kept as they are."""
    return jax.tree_util.tree_map_with_path(
        lambda path, x: MuonDimensionNumbers(*matrix_axes(path, x)), tree)


def _scale_by_width() -> optax.GradientTransformation:
    """Muon's shape factor sqrt(max(1, fan_out / fan_in)) on each orthogonalised update (the
    reference's max(1, rows / cols)^0.5 of a PyTorch (out, in) weight)."""

    def update(updates, state, params=None):
        del params

        def scale(path, u):
            fan_in, fan_out = matrix_shape(path, u)
            return u * math.sqrt(max(1.0, fan_out / fan_in))

        return jax.tree_util.tree_map_with_path(scale, updates), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def muon(optim: OptimConfig, steps: int, adamw: optax.GradientTransformation
         ) -> optax.GradientTransformation:
    """Muon on the blocks' kernels (`is_hidden_matrix`), `adamw` on every other parameter.
    optax.contrib.muon's own AdamW branch is Nesterov Adam without a weight-decay mask, so the
    two are composed here: optax's `scale_by_muon` (Nesterov momentum β = muon_momentum with
    optax's bias correction, 5 Newton–Schulz steps of the standard quintic on the
    Frobenius-normalised momentum), the width factor, weight decay lr·wd·W, the schedule of
    muon_learning_rate."""
    matrices = optax.chain(
        scale_by_muon(ns_steps=MUON_NS_STEPS, beta=optim.muon_momentum, nesterov=True,
                      weight_dimension_numbers=_muon_dimension_numbers),
        _scale_by_width(),
        optax.add_decayed_weights(optim.weight_decay),  # every Muon parameter has ndim ≥ 2
        optax.scale_by_learning_rate(learning_rate_schedule(optim, steps,
                                                            optim.muon_learning_rate)))
    labels = lambda params: jax.tree_util.tree_map_with_path(  # noqa: E731
        lambda path, x: "muon" if is_hidden_matrix(path, x) else "adamw", params)
    return optax.partition({"muon": matrices, "adamw": adamw}, labels)


# --------------------------------------------------------------------------------------------
# Adam in a fixed random orthogonal basis

class RotatedBasisState(NamedTuple):
    """bases: {"left": U (m, m), "right": V (n, n)} of each matrix parameter, in a nested dict
    along the parameter's path (matrices only); inner: the state of the wrapped transformation,
    whose moments are those of the rotated gradients."""

    bases: Any
    inner: optax.OptState


def random_bases(params: Any, seed: int) -> dict[str, Any]:
    """Haar-random orthogonal U (m × m) and V (n × n) of every matrix parameter (ndim ≥ 2, read
    as `matrix_shape`), the i-th matrix (in tree order) from fold_in(key(seed), i)."""
    bases: dict[str, Any] = {}
    matrices = [(path, leaf) for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]
                if leaf.ndim >= 2]
    for index, (path, leaf) in enumerate(matrices):
        m, n = matrix_shape(path, leaf)
        left, right = jax.random.split(jax.random.fold_in(jax.random.key(seed), index))
        node = bases
        for key in _keys(path):
            node = node.setdefault(key, {})
        node["left"] = jax.random.orthogonal(left, m, dtype=jnp.float32)
        node["right"] = jax.random.orthogonal(right, n, dtype=jnp.float32)
    return bases


def rotate(tree: Any, bases: dict[str, Any], into: bool) -> Any:
    """Each matrix leaf W of `tree` (as its (m, n) matrix) to Uᵀ W V (`into` the rotated basis)
    or back, U W Vᵀ; other leaves unchanged. float32 matmuls at HIGHEST precision."""

    def one(path, x):
        if x.ndim < 2:
            return x
        node = bases
        for key in _keys(path):
            node = node[key]
        u, v = node["left"], node["right"]
        w = x.reshape(matrix_shape(path, x))
        if into:
            w = jnp.matmul(jnp.matmul(u.T, w, precision=_HIGHEST), v, precision=_HIGHEST)
        else:
            w = jnp.matmul(jnp.matmul(u, w, precision=_HIGHEST), v.T, precision=_HIGHEST)
        return w.reshape(x.shape)

    return jax.tree_util.tree_map_with_path(one, tree)


def in_rotated_basis(inner: optax.GradientTransformation, seed: int
                     ) -> optax.GradientTransformation:
    """`inner` applied to the gradients in a fixed random orthogonal basis of each matrix
    (`random_bases`, `rotate`): G' = Uᵀ G V, (Δ', state) = inner(G'), Δ = U Δ' Vᵀ."""

    def init(params):
        return RotatedBasisState(random_bases(params, seed), inner.init(params))

    def update(updates, state, params=None):
        rotated = rotate(updates, state.bases, into=True)
        params_rotated = None if params is None else rotate(params, state.bases, into=True)
        out, inner_state = inner.update(rotated, state.inner, params_rotated)
        return rotate(out, state.bases, into=False), RotatedBasisState(state.bases, inner_state)

    return optax.GradientTransformation(init, update)
