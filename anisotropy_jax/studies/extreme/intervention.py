"""Godey 3 inside trained networks: the residual stream's common component, intervened on at one
block's input at a time, and that block's attention measured (docs/EXTREME.md, "Godey 3 inside
trained networks"; the verdict: `studies.report.verdicts_intervention`).

For block ℓ the residual stream entering it (`resid_pre`) is replaced, for every token of the
batch, by one of the ARMS (μ the mean over the batch's real tokens, over positions ≥ 1 for
`without_first` or over every position for `with_first`; μ_b the same mean over sequence b):
  remove_mean  h − μ          own_mean  h − μ + μ_b       scale_S  h + (S − 1)μ
  random       h − ‖μ‖·u, u a random unit vector (the control; `num_directions` of them)
each `fixed_norm` (every token rescaled to its own original norm) or `raw`. Block ℓ's attention
is measured per sequence (`sequence_metrics`): H/ln n, the largest weight, and the row cosine
(the query agreement), over the real queries with ≥ 2 visible keys.

How it runs: one forward of the model records every block's inputs (`block_inputs`: the block's
config, parameters and call arguments); then per block one jitted call evaluates that block alone
on every intervention at once (vmapped: `block_metrics_fn`), so a 30-block model costs about two
forwards' worth of attention, not one forward per intervention. `common_component_patch` is a
`models.patching` patch, so the same intervention runs inside the whole model too:
`patching.run(family, cfg, params, x, patches={"blocks.3.resid_pre": patch})`.
"""
from __future__ import annotations

import functools
import time
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax.models import patching
from anisotropy_jax.models.attention import MASK_VALUE
from anisotropy_jax.models.block import Block
from anisotropy_jax.protocol import SILENT, Progress

CENTRES = ("without_first", "with_first")
NORMS = ("fixed_norm", "raw")
# op → (a, b): h + a·μ + b·μ_b (before the random part and the renormalisation)
OPS = {"remove_mean": (-1.0, 0.0), "own_mean": (-1.0, 1.0), "scale_0.5": (-0.5, 0.0),
       "scale_2": (1.0, 0.0)}
METRICS = ("entropy", "max_weight", "row_cosine")


def arms(num_directions: int) -> list[dict[str, Any]]:
    """Every intervention, the unmodified run first: {"name", "a", "b", "direction" (index or
    -1), "without_first", "fixed_norm"}."""
    out = [{"name": "baseline", "a": 0.0, "b": 0.0, "direction": -1, "without_first": True,
            "fixed_norm": False}]
    for centre in CENTRES:
        for norm in NORMS:
            common = {"without_first": centre == "without_first", "fixed_norm": norm == "fixed_norm"}
            for op, (a, b) in OPS.items():
                out.append({"name": f"{op}/{centre}/{norm}", "a": a, "b": b, "direction": -1,
                            **common})
            for k in range(num_directions):
                out.append({"name": f"random/{centre}/{norm}/{k}", "a": 0.0, "b": 0.0,
                            "direction": k, **common})
    return out


def operands(table: list[dict[str, Any]], directions_KxD: np.ndarray) -> dict[str, jax.Array]:
    """The arms as arrays, one row per arm (the vmapped operands of `common_component_patch`)."""
    zero = np.zeros(directions_KxD.shape[1], np.float32)
    return {"a": jnp.asarray([t["a"] for t in table], jnp.float32),
            "b": jnp.asarray([t["b"] for t in table], jnp.float32),
            "c": jnp.asarray([float(t["direction"] >= 0) for t in table], jnp.float32),
            "u": jnp.asarray(np.stack([directions_KxD[t["direction"]] if t["direction"] >= 0
                                       else zero for t in table]), jnp.float32),
            "without_first": jnp.asarray([t["without_first"] for t in table]),
            "fixed_norm": jnp.asarray([t["fixed_norm"] for t in table])}


def random_directions(seed: int, layer: int, num: int, width: int) -> np.ndarray:
    """(num, width) unit vectors, drawn per (seed, layer)."""
    g = np.random.default_rng([seed, layer, 3]).standard_normal((num, width))
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def batch_means(h_BxLxD: jax.Array, mask_BxL: jax.Array, without_first: Any
                ) -> tuple[jax.Array, jax.Array]:
    """(μ (D,), μ_b (B, 1, D)): the mean over the real tokens of the batch and of each sequence,
    at positions ≥ 1 where `without_first`."""
    w = jnp.asarray(mask_BxL, h_BxLxD.dtype)
    w = jnp.where(without_first, w.at[:, 0].set(0.0), w)
    mu = jnp.sum(h_BxLxD * w[..., None], (0, 1)) / jnp.maximum(jnp.sum(w), 1.0)
    mu_b = (jnp.sum(h_BxLxD * w[..., None], 1, keepdims=True)
            / jnp.maximum(jnp.sum(w, 1), 1.0)[:, None, None])
    return mu, mu_b


def common_component_patch(op: dict[str, Any], mask_BxL: jax.Array) -> patching.PatchFn:
    """The patch of one arm (`operands` row `op`) on a (B, L, D) residual stream: h + a·μ + b·μ_b
    − c·‖μ‖·u on the real tokens, each rescaled to its original norm where fixed_norm."""
    def patch(h: jax.Array, address: patching.Address) -> jax.Array:
        del address
        mu, mu_b = batch_means(h, mask_BxL, op["without_first"])
        shift = op["a"] * mu - op["c"] * jnp.linalg.norm(mu) * op["u"]
        new = h + shift[None, None, :] + op["b"] * mu_b
        old_norm = jnp.linalg.norm(h, axis=-1, keepdims=True)
        new_norm = jnp.linalg.norm(new, axis=-1, keepdims=True)
        rescaled = new * old_norm / jnp.where(new_norm > 0, new_norm, 1.0)
        new = jnp.where(op["fixed_norm"], rescaled, new)
        return jnp.where(jnp.asarray(mask_BxL, bool)[..., None], new, h)

    return patch


def sequence_metrics(logits_BxHxQxK: jax.Array, mask_BxL: jax.Array) -> dict[str, jax.Array]:
    """Per sequence (B,): H/ln n and the largest weight (mean over heads and the real queries
    with n ≥ 2 visible keys), and the row cosine (per head the mean cosine between the weight
    rows of distinct such queries, exact from their sum; then the mean over heads)."""
    visible = logits_BxHxQxK > MASK_VALUE / 2
    logp = jax.nn.log_softmax(jnp.where(visible, logits_BxHxQxK, MASK_VALUE), axis=-1)
    p = jnp.where(visible, jnp.exp(logp), 0.0)
    n = jnp.sum(visible, -1)
    query = jnp.asarray(mask_BxL, bool)[:, None, :] & (n >= 2)
    entropy = -jnp.sum(jnp.where(visible, p * logp, 0.0), -1) / jnp.log(jnp.maximum(n, 2))
    q = jnp.asarray(query, jnp.float32)
    per_query = jnp.sum(q, (1, 2))

    def query_mean(x):
        return jnp.sum(x * q, (1, 2)) / jnp.maximum(per_query, 1.0)

    unit = p / jnp.maximum(jnp.linalg.norm(p, axis=-1, keepdims=True), 1e-30) * q[..., None]
    total = jnp.sum(unit, 2)
    count = jnp.sum(q, 2)
    cos = (jnp.sum(total * total, -1) - count) / jnp.maximum(count * (count - 1), 1.0)
    return {"entropy": query_mean(entropy), "max_weight": query_mean(jnp.max(p, -1)),
            "row_cosine": jnp.mean(cos, 1)}


def block_inputs(family: Any, cfg: Any, params: Any, inputs: tuple[Any, ...]
                 ) -> list[dict[str, Any]]:
    """Every block of one unmodified forward, in the order it runs: {"config", "variables" (its
    parameters), "x" (its input), "args", "kwargs" (its other call arguments)}."""
    calls: list[dict[str, Any]] = []

    def record(next_fun, args, kwargs, context):
        if isinstance(context.module, Block) and context.method_name == "__call__":
            calls.append({"config": context.module.config, "path": tuple(context.module.path),
                          "x": args[0], "args": args[1:], "kwargs": kwargs})
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(record):
        family.apply(cfg, params, *inputs)
    for call in calls:
        tree = params["params"]
        for name in call.pop("path"):
            tree = tree[name]
        call["variables"] = {"params": tree}
    return calls


@functools.lru_cache(maxsize=8)
def block_metrics_fn(config: Any):
    """jit f(variables, x, args, kwargs, mask, ops) → {metric: (arms, B)}: one block, every arm
    of `ops` (vmapped; the unmodified input is shared, not recomputed per arm)."""
    @jax.jit
    def run(variables, x, args, kwargs, mask_BxL, ops):
        def one(op):
            patch = common_component_patch(op, mask_BxL)
            _, cache = patching.apply(Block(config).apply, variables, x, *args,
                                      patches={"blocks.0.resid_pre": patch},
                                      read=["blocks.0.attn_logits"], **kwargs)
            return sequence_metrics(cache["blocks.0.attn_logits"], mask_BxL)
        return jax.vmap(one)(ops)

    return run


def _host(x: Any) -> list[float]:
    return [float(v) for v in np.asarray(x, np.float64)]


def layer_result(layer: int, metrics: dict[str, np.ndarray], table: list[dict[str, Any]],
                 norms: dict[str, float]) -> dict[str, Any]:
    """results.json's entry of one block: the unmodified metrics per sequence, each arm's change
    per sequence, and the random arms as their mean over directions per sequence and their mean
    over sequences per direction."""
    index = {t["name"]: i for i, t in enumerate(table)}
    base = {m: metrics[m][0] for m in METRICS}
    delta = {m: metrics[m] - base[m][None] for m in METRICS}
    out = {"layer": layer, **norms, "baseline": {m: _host(base[m]) for m in METRICS},
           "arms": {}, "random": {}}
    for t in table[1:]:
        if t["direction"] < 0:
            out["arms"][t["name"]] = {m: _host(delta[m][index[t["name"]]]) for m in METRICS}
    for centre in CENTRES:
        for norm in NORMS:
            rows = [i for i, t in enumerate(table)
                    if t["name"].startswith(f"random/{centre}/{norm}/")]
            out["random"][f"{centre}/{norm}"] = {
                "per_sequence": {m: _host(delta[m][rows].mean(0)) for m in METRICS},
                "per_direction": {m: _host(delta[m][rows].mean(1)) for m in METRICS}}
    return out


def state_norms(x: jax.Array, mask_BxL: np.ndarray) -> dict[str, float]:
    """‖μ‖ for both centres, the mean token norm over positions ≥ 1, and position 0's."""
    x = np.asarray(x, np.float64)
    m = np.asarray(mask_BxL, bool)
    rest = m.copy()
    rest[:, 0] = False
    norms = np.linalg.norm(x, axis=-1)
    return {"mean_norm": {"without_first": float(np.linalg.norm(x[rest].mean(0))),
                          "with_first": float(np.linalg.norm(x[m].mean(0)))},
            "token_norm": float(norms[rest].mean()), "first_token_norm": float(norms[m[:, 0], 0]
                                                                                .mean())}


def measure(family: Any, cfg: Any, params: Any, inputs: tuple[Any, ...], mask_BxL: np.ndarray,
            num_directions: int, seed: int, progress: Progress = SILENT) -> dict[str, Any]:
    """Every block of one model (module docstring): {"num_sequences", "seq_len",
    "num_directions", "layers": [`layer_result`], "seconds"}."""
    start = time.perf_counter()
    table = arms(num_directions)
    mask = jnp.asarray(mask_BxL, bool)
    layers = []
    for layer, call in enumerate(block_inputs(family, cfg, params, inputs)):
        begun = time.perf_counter()
        width = call["x"].shape[-1]
        ops = operands(table, random_directions(seed, layer, num_directions, width))
        got = block_metrics_fn(call["config"])(call["variables"], call["x"], call["args"],
                                               call["kwargs"], mask, ops)
        metrics = {m: np.asarray(got[m], np.float64) for m in METRICS}
        layers.append(layer_result(layer, metrics, table, state_norms(call["x"], mask_BxL)))
        progress.say(f"block {layer}: {len(table)} arms in {time.perf_counter() - begun:.1f} s")
    return {"num_sequences": int(mask_BxL.shape[0]), "seq_len": int(mask_BxL.shape[1]),
            "num_tokens": int(np.sum(mask_BxL)), "num_directions": num_directions,
            "layers": layers, "seconds": time.perf_counter() - start}
