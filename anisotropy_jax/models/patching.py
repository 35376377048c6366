"""Read and patch any activation of the one `Block`, inside the one forward (docs/PATCHING.md).

Every block, its attention and its MLP pass each named activation through a hook point
(`layers.Tapped.tap`). Inside `apply`/`run`, Flax's `nn.intercept_methods` catches those calls:
a patch, a pure function `(activation, address) -> activation`, replaces the value where the
model computes it, and the cache keeps the value the model used. No second forward pass, no
mutable collection: `run` is a pure function of arrays, so it jits and vmaps, and with no patch a
tap adds no operation (the forward is the plain one, bit for bit).

Addresses, `Address(layer, name, head=None)`, written "blocks.{layer}.{name}[.{head}]":
  layer  index into probes["blocks"]: blocks in the order the forward runs them (CANINE: the
         initial block, the deep blocks, the final block); "*" (None) = every block
  name   one of ACTIVATIONS (the block's probe names, plus head_out, mlp_pre and mlp_post)
  head   a head's slice of an activation with a head axis (HEAD_AXES): the patch gets and
         returns that slice only, e.g. (B, L, Dh) of head_out
Patches at an activation run in this order: every-layer before one-layer, whole before heads.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from anisotropy_jax.config import ConfigError, require
from anisotropy_jax.models.block import Block

Array = jax.Array

# The block's activations in forward order: name → shape (B batch, L positions, D width, H heads,
# Dh head width, F MLP width; logits and weights are (B, H, Lq, Lk) float32).
ACTIVATIONS = {
    "resid_pre": "(B, L, D) block input",
    "queries": "(B, L, H, Dh) after the projection, QK norm and rotary",
    "keys": "(B, L, H, Dh) likewise, key/value heads repeated to the H query heads",
    "values": "(B, L, H, Dh) likewise",
    "attn_logits": "(B, H, Lq, Lk) scaled, biased, masked keys at MASK_VALUE",
    "attn_weights": "(B, H, Lq, Lk) the normalised logits",
    "head_out": "(B, L, H, Dh) each head's output, the output projection's input",
    "attn_out": "(B, L, D) the attention branch as added to the residual",
    "resid_mid": "(B, L, D) after the attention sublayer",
    "mlp_pre": "(B, L, F) the activation function's input (the gate's, when gated)",
    "mlp_post": "(B, L, F) the output projection's input",
    "mlp_out": "(B, L, D) the MLP branch as added to the residual",
    "resid_post": "(B, L, D) block output",
}
HEAD_AXES = {"queries": 2, "keys": 2, "values": 2, "attn_logits": 1, "attn_weights": 1,
             "head_out": 2}

PatchFn = Callable[[Array, "Address"], Array]


@dataclasses.dataclass(frozen=True)
class Address:
    """One activation: block `layer` (None: every block), `name`, optional `head`."""

    layer: int | None
    name: str
    head: int | None = None

    def __post_init__(self):
        require(self.name in ACTIVATIONS, "address", f"unknown activation {self.name!r}; "
                f"choose one of {', '.join(ACTIVATIONS)}")
        require(self.layer is None or (isinstance(self.layer, int) and self.layer >= 0),
                "address", f"layer must be an integer >= 0 or '*', got {self.layer!r}")
        require(self.head is None or self.name in HEAD_AXES, "address",
                f"{self.name} has no head axis (heads: {', '.join(HEAD_AXES)})")
        require(self.head is None or (isinstance(self.head, int) and self.head >= 0),
                "address", f"head must be an integer >= 0, got {self.head!r}")

    def __str__(self) -> str:
        layer = "*" if self.layer is None else self.layer
        return f"blocks.{layer}.{self.name}" + ("" if self.head is None else f".{self.head}")

    @classmethod
    def parse(cls, text: Address | str) -> Address:
        """"blocks.3.attn_weights", "blocks.*.resid_post", "blocks.0.head_out.2" → Address."""
        if isinstance(text, Address):
            return text
        parts = str(text).split(".")
        require(len(parts) in (3, 4) and parts[0] == "blocks", "address",
                f"{text!r} is not 'blocks.LAYER.NAME' or 'blocks.LAYER.NAME.HEAD'")
        require(parts[1] == "*" or parts[1].isdigit(), "address",
                f"{text!r}: layer must be an integer or '*'")
        require(len(parts) == 3 or parts[3].isdigit(), "address",
                f"{text!r}: head must be an integer")
        return cls(None if parts[1] == "*" else int(parts[1]), parts[2],
                   None if len(parts) == 3 else int(parts[3]))

    @property
    def position_axis(self) -> int:
        """The axis of positions (of queries, for logits and weights) in this activation."""
        axis = 2 if self.name in ("attn_logits", "attn_weights") else 1
        return axis - int(self.head is not None and HEAD_AXES[self.name] < axis)


def _patch_table(patches: Mapping[Address | str, PatchFn | Sequence[PatchFn]] | None
                 ) -> dict[Address, tuple[PatchFn, ...]]:
    table = {}
    for where, fns in (patches or {}).items():
        fns = tuple(fns) if isinstance(fns, (list, tuple)) else (fns,)
        require(all(callable(fn) for fn in fns), "patches",
                f"{where}: a patch is a function (activation, address) -> activation")
        table[Address.parse(where)] = fns
    return table


@dataclasses.dataclass
class _Interception:
    """The state of one intercepted forward (trace time only): the block being run, what was
    visited, and the cache."""

    patches: dict[Address, tuple[PatchFn, ...]]
    reads: frozenset[Address]
    cache: dict[str, Array] = dataclasses.field(default_factory=dict)
    visited: dict[tuple[int, str], int | None] = dataclasses.field(default_factory=dict)
    block_paths: list[tuple[str, ...]] = dataclasses.field(default_factory=list)
    current: list[int] = dataclasses.field(default_factory=list)

    def __call__(self, next_fun, args, kwargs, context):
        if isinstance(context.module, Block) and context.method_name == "__call__":
            self.current.append(len(self.block_paths))
            self.block_paths.append(tuple(context.module.path))
            try:
                return next_fun(*args, **kwargs)
            finally:
                self.current.pop()
        if context.method_name == "tap" and self.current:
            name, value = args
            return self.activation(self.current[-1], name, value)
        return next_fun(*args, **kwargs)

    def activation(self, layer: int, name: str, value: Array) -> Array:
        """The patched activation (whole, then heads), recorded where read."""
        axis = HEAD_AXES.get(name)
        self.visited[(layer, name)] = None if axis is None else value.shape[axis]
        here = [Address(None, name), Address(layer, name)]
        for where in here:
            for fn in self.patches.get(where, ()):
                value = _checked(fn(value, Address(layer, name)), value, Address(layer, name))
        heads = sorted({a.head for a in self.patches if a.head is not None and a.name == name
                        and a.layer in (None, layer)})
        for head in heads:
            at, index = Address(layer, name, head), _head_index(axis, head, value.shape)
            part = value[index]
            for where in (Address(None, name, head), at):
                for fn in self.patches.get(where, ()):
                    part = _checked(fn(part, at), part, at)
            value = value.at[index].set(part)
        for read in self.reads:
            if read.name == name and read.layer in (None, layer):
                at = Address(layer, name, read.head)
                self.cache[str(at)] = value if read.head is None else value[
                    _head_index(axis, read.head, value.shape)]
        return value

    def check(self) -> None:
        """ConfigError for a patched or read address that no block of this forward has."""
        for where in sorted(set(self.patches) | self.reads, key=str):
            layers = [layer for layer, name in self.visited if name == where.name
                      and where.layer in (None, layer)]
            require(bool(layers), str(where), _missing(where, len(self.block_paths)))
            heads = self.visited[(layers[0], where.name)]
            require(where.head is None or where.head < heads, str(where),
                    f"head {where.head} of {heads}")


def _missing(where: Address, num_blocks: int) -> str:
    why = {"attn_logits": "the 'pallas', 'dot_product' and 'flash' attention cores compute no "
                          "logits",
           "attn_weights": "the 'pallas', 'dot_product' and 'flash' attention cores compute no "
                           "weights"}
    mlp = "a block with use_mlp=False has no MLP"
    return (f"no such activation in this forward ({num_blocks} blocks ran, numbered from 0; "
            f"{why.get(where.name, mlp if where.name.startswith('mlp') else 'check the layer')})")


def _head_index(axis: int, head: int, shape: tuple[int, ...]) -> tuple[Any, ...]:
    if head >= shape[axis]:
        raise ConfigError(f"address: head {head} of {shape[axis]}")
    return (slice(None),) * axis + (head,)


def _checked(new: Array, old: Array, at: Address) -> Array:
    new = jnp.asarray(new)
    if new.shape != old.shape:
        raise ConfigError(f"{at}: a patch returned shape {new.shape}, the activation is "
                          f"{old.shape}")
    return new.astype(old.dtype)


def apply(fn: Callable[..., Any], *args: Any,
          patches: Mapping[Address | str, PatchFn | Sequence[PatchFn]] | None = None,
          read: Iterable[Address | str] = (), **kwargs: Any) -> tuple[Any, dict[str, Array]]:
    """fn(*args, **kwargs) with the blocks it runs patched and read: (its output, cache).
    `fn` is anything that runs Blocks (`Block(cfg).apply`, `Family.apply`, a study's forward);
    its blocks are numbered in the order it calls them. The cache maps each read address, one
    key per block for "*" ("blocks.1.resid_post"), to the value the model used, after patches."""
    state = _Interception(_patch_table(patches), frozenset(Address.parse(a) for a in read))
    with nn.intercept_methods(state):
        out = fn(*args, **kwargs)
    state.check()
    return out, state.cache


class Run(NamedTuple):
    """What `run` returns: the family's output, its probes and the cache of read addresses."""

    output: Array
    probes: dict[str, Any]
    cache: dict[str, Array]


def run(family: Any, cfg: Any, params: Any, x: Any, *, mask_BxL: Array | None = None,
        token_types_BxL: Array | None = None,
        patches: Mapping[Address | str, PatchFn | Sequence[PatchFn]] | None = None,
        read: Iterable[Address | str] = ()) -> Run:
    """A family's forward (`Family.apply`) with `patches` applied and `read` cached; pure, so it
    jits and vmaps. The probes (and `family.states(probes, cfg)`) are those of the patched run."""
    (output, probes), cache = apply(family.apply, cfg, params, x, token_types_BxL, mask_BxL,
                                    patches=patches, read=read)
    return Run(output, probes, cache)


def run_with_cache(family: Any, cfg: Any, params: Any, x: Any, addresses: Iterable[Address | str],
                   *, mask_BxL: Array | None = None, token_types_BxL: Array | None = None
                   ) -> tuple[Array, dict[str, Array]]:
    """(output, cache) of the family's forward, every address of `addresses` read in one jitted
    call (compiled once per family, config and set of addresses)."""
    names = tuple(sorted({str(Address.parse(a)) for a in addresses}))
    return _cached_reader(family, cfg, names)(params, x, mask_BxL, token_types_BxL)


@functools.lru_cache(maxsize=32)
def _cached_reader(family: Any, cfg: Any, names: tuple[str, ...]) -> Callable[..., Any]:
    @jax.jit
    def read(params, x, mask_BxL, token_types_BxL):
        output, _, cache = run(family, cfg, params, x, mask_BxL=mask_BxL,
                               token_types_BxL=token_types_BxL, read=names)
        return output, cache

    return read


def block_paths(family: Any, cfg: Any, params: Any, x: Any) -> tuple[tuple[str, ...], ...]:
    """Each block's module path, by layer: its parameters are params["params"][path…] (to edit
    weights instead of activations). Traced with `jax.eval_shape`: nothing is computed."""
    state = _Interception({}, frozenset())

    def forward(params, x):
        with nn.intercept_methods(state):
            return family.apply(cfg, params, x)

    jax.eval_shape(forward, params, x)
    return tuple(state.block_paths)


# --------------------------------------------------------------------------------------------
# Patches: each a pure function (activation, address) -> activation, jit- and vmap-safe. Give
# them a head address ("blocks.2.head_out.1") to act on that head's slice only.

def zero(activation: Array, address: Address) -> Array:
    """Zero ablation."""
    del address
    return jnp.zeros_like(activation)


def mean_ablation(axes: Sequence[int] = (0,), mask_BxL: Array | None = None) -> PatchFn:
    """Each value replaced by the activation's mean over `axes` (default the batch: the mean
    input at each position); with `mask_BxL`, over visible tokens only."""
    def patch(activation: Array, address: Address) -> Array:
        return jnp.broadcast_to(_mean(activation, address, axes, mask_BxL), activation.shape)

    return patch


def subtract_mean(axes: Sequence[int] | None = None, mask_BxL: Array | None = None) -> PatchFn:
    """The activation minus its mean over `axes` (default: batch and positions, i.e. over every
    token): removes the common component, e.g. of the residual stream."""
    def patch(activation: Array, address: Address) -> Array:
        over = (0, address.position_axis) if axes is None else axes
        return activation - _mean(activation, address, over, mask_BxL)

    return patch


def _mean(activation: Array, address: Address, axes: Sequence[int], mask_BxL: Array | None
          ) -> Array:
    axes = tuple(sorted({axis % activation.ndim for axis in axes}))
    if mask_BxL is None:
        return jnp.mean(activation, axis=axes, keepdims=True)
    shape = [1] * activation.ndim
    shape[0], shape[address.position_axis] = mask_BxL.shape
    weights = jnp.broadcast_to(jnp.asarray(mask_BxL, activation.dtype).reshape(shape),
                               activation.shape)
    return (jnp.sum(activation * weights, axis=axes, keepdims=True)
            / jnp.sum(weights, axis=axes, keepdims=True))


def resample_ablation(permutation_B: Array) -> PatchFn:
    """Resample ablation: input b gets input permutation_B[b]'s activation (e.g.
    `jax.random.permutation(key, B)`; a derangement so that none keeps its own)."""
    def patch(activation: Array, address: Address) -> Array:
        del address
        return activation[jnp.asarray(permutation_B)]

    return patch


def patch_from(cache: Mapping[str, Array]) -> PatchFn:
    """The value of another run at the same address (its cache, from `run` or `run_with_cache`,
    which must have read it): activation patching."""
    def patch(activation: Array, address: Address) -> Array:
        require(str(address) in cache, "patch_from", f"the cache has no {address}")
        return cache[str(address)]

    return patch


def add_direction(direction: Array, scale: Array | float = 1.0) -> PatchFn:
    """activation + scale·direction (`direction` aligned with the trailing axes, e.g. (D,) for the
    residual stream): steering."""
    def patch(activation: Array, address: Address) -> Array:
        del address
        d = jnp.asarray(direction, activation.dtype)
        return activation + scale * d.reshape((1,) * (activation.ndim - d.ndim) + d.shape)

    return patch


def drop_keys(keys: int | Sequence[int], renormalize: bool = False) -> PatchFn:
    """For attn_weights: no query attends to `keys` (e.g. [0], the first token's sink): their
    weights set to 0; with `renormalize`, each row's other weights rescaled to sum to one (a row
    left with no mass stays zero)."""
    def patch(weights: Array, address: Address) -> Array:
        require(address.name == "attn_weights", "drop_keys", f"acts on attn_weights, not {address}")
        weights = jnp.asarray(weights).at[..., jnp.asarray(keys)].set(0.0)
        if not renormalize:
            return weights
        mass = jnp.sum(weights, axis=-1, keepdims=True)
        return jnp.where(mass > 0, weights / jnp.where(mass > 0, mass, 1.0), weights)

    return patch


def at_positions(patch: PatchFn, positions: int | Sequence[int] | Array) -> PatchFn:
    """`patch` applied at `positions` only (of queries, for logits and weights); the other
    positions keep their values. at_positions(zero, 0): the first token's activation zeroed."""
    def patched(activation: Array, address: Address) -> Array:
        index = (slice(None),) * address.position_axis + (jnp.asarray(positions),)
        return jnp.asarray(activation).at[index].set(patch(activation, address)[index])

    return patched
