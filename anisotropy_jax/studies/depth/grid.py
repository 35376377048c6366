"""The depth sweep over architectures × widths × (seed × s) chunks: `run(config) -> DepthResult`.

For every (architecture, width) one chunk function is compiled (`make_chunk_fn`); the (seed × s)
grid is cut as the bias sweep cuts it (`studies.sweep.grid.chunk_layout`: s axis first, rounded
to the device count) and the s axis of every chunk is sharded over all devices of all processes
(`shard_map`: each device runs its own bias norms through the whole stack; nothing crosses
devices). Weights, z and u of a seed are drawn on the device from its key (`inputs.seed_keys`,
the bias sweep's seeds), so only keys and bias norms travel.

Resumable: a `store` (report.ChunkStore) is asked for every chunk first; a chunk it holds is
loaded, not computed, and every computed chunk is handed to it at once (it writes atomically).
With several processes (jax.distributed) every process computes every chunk together; process 0
decides which chunks are done (its answer is broadcast) and only its result is complete.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import os
import time
import warnings
from typing import Any, Callable, Mapping

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from anisotropy_jax import inputs
from anisotropy_jax.config import BlockConfig
from anisotropy_jax.configs.depth import DepthConfig
from anisotropy_jax.configs.depth import STACKED_WEIGHTS_BYTES
from anisotropy_jax.models import layers
from anisotropy_jax.models.block import Block
from anisotropy_jax.protocol import SILENT, Progress
from anisotropy_jax.studies.depth.stack import stack_metrics
from anisotropy_jax.studies.sweep.grid import (ChunkLayout, chunk_layout, default_points_per_step,
                                               fetch, grid_mesh, overflow_cause, place)

GRID_AXIS = "grid"
# A stream this small is float32 noise (denormals below 1.2e-38): reported, never averaged in.
UNDERFLOW_RMS = 1e-30
HANG_ENV = "ANISOTROPY_JAX_TEST_DEPTH_HANG_AFTER_CHUNKS"  # tests: park after computing N chunks


def stack_layer(config: DepthConfig, architecture: str, width: int) -> Block:
    """One layer of the (architecture, width) stack: the block with its branches scaled by α
    and, attention-only, its skip path by `attention_only_skip`."""
    skip = config.attention_only_skip if architecture == "attention_only" else 1.0
    return Block(config.block_for(architecture, width).replace(residual_scale=config.alpha,
                                                               skip_scale=skip))


def weights_mode(config: DepthConfig, architecture: str, width: int) -> str:
    """config.weights, with 'auto' resolved: 'stacked' when every layer's float32 parameters
    ((4 + 2·ff_ratio)·D² per layer, 4·D² attention-only) fit STACKED_WEIGHTS_BYTES."""
    if config.weights != "auto":
        return config.weights
    per_layer = (4 + (0 if architecture == "attention_only" else 2 * config.ff_ratio)) * width ** 2
    fits = 4 * per_layer * config.num_layers <= STACKED_WEIGHTS_BYTES
    return "stacked" if fits else "per_layer"


def chunk_computation(config: DepthConfig, architecture: str, width: int,
                      points_per_step: int) -> Callable:
    """f(key_data (S, 2) uint32, s (C,)) → {name: (S, C, ...)}: "input/<m>" (S, C) for the input,
    every other name (S, C, num_layers, ...) after every layer. Seeds run one after another."""
    layer = stack_layer(config, architecture, width)
    b, seq = config.batch_size, config.seq_len

    def one_seed(key_data, bias_norms_C):
        split = inputs.split_seed_key(jax.random.wrap_key_data(key_data))
        z_BxLxD = inputs.gaussian_tokens(split.tokens, b, seq, width)
        u_D = inputs.random_unit_vector(split.direction, width)
        first, per_layer = stack_metrics(layer, config.num_layers,
                                         weights_mode(config, architecture, width),
                                         points_per_step, split.params, z_BxLxD, u_D,
                                         bias_norms_C)
        out = {f"input/{k}": v for k, v in first.items()}
        return out | {k: jax.numpy.moveaxis(v, 0, 1) for k, v in per_layer.items()}

    def chunk(key_data_Sx2, bias_norms_C):
        return jax.lax.map(lambda k: one_seed(k, bias_norms_C), key_data_Sx2)

    return chunk


@functools.lru_cache(maxsize=32)
def make_chunk_fn(config: DepthConfig, architecture: str, width: int, mesh: Mesh) -> Callable:
    """The jitted chunk function with the s axis sharded over `mesh` (cached)."""
    pps = config.points_per_step or default_points_per_step(mesh.devices.flat[0].platform)
    fn = chunk_computation(config, architecture, width, pps)
    per_device = jax.shard_map(fn, mesh=mesh, in_specs=(P(), P(GRID_AXIS)),
                               out_specs=P(None, GRID_AXIS), check_vma=False)
    return jax.jit(per_device, in_shardings=(NamedSharding(mesh, P()),
                                             NamedSharding(mesh, P(GRID_AXIS))),
                   out_shardings=NamedSharding(mesh, P(None, GRID_AXIS)),
                   compiler_options=layers.compiler_options(mesh.devices.flat[0].platform))


@dataclasses.dataclass
class StackResult:
    """One (architecture, width): `inputs[m]` (seeds, s); `per_layer[m]` (seeds, s, layers);
    `per_head[m]` (seeds, s, layers, heads)."""

    architecture: str
    width: int
    inputs: dict[str, np.ndarray]
    per_layer: dict[str, np.ndarray]
    per_head: dict[str, np.ndarray]


@dataclasses.dataclass
class DepthResult:
    config: DepthConfig
    stacks: dict[str, StackResult]  # by stack_name(architecture, width)
    layout: ChunkLayout
    num_devices: int
    num_processes: int
    chunks_computed: int
    chunks_loaded: int
    seconds: float
    complete: bool  # False on processes other than 0 when chunks were loaded from the store


def stack_name(architecture: str, width: int) -> str:
    return f"{architecture}_d{width}"


def chunk_name(architecture: str, width: int, seeds: tuple[int, int],
               bias: tuple[int, int]) -> str:
    """A chunk's file stem: stack, seed range and bias-index range (inclusive)."""
    return (f"{stack_name(architecture, width)}/seeds{seeds[0]:04d}-{seeds[1]:04d}"
            f"_bias{bias[0]:04d}-{bias[1]:04d}")


def _first_out_of_range_layer(chunk: Mapping[str, np.ndarray]) -> np.ndarray:
    """(S, C): 1 + the first layer where a metric is not finite or the residual stream's RMS
    token norm is below UNDERFLOW_RMS, 0 where every layer is in float32's range."""
    per_layer = [v for k, v in chunk.items() if not k.startswith("input/")]
    bad_SxCxN = np.zeros(per_layer[0].shape[:3], bool)
    for v in per_layer:
        bad_SxCxN |= ~np.isfinite(v).reshape(v.shape[:3] + (-1,)).all(axis=-1)
    if "residual_rms" in chunk:
        bad_SxCxN |= chunk["residual_rms"] < UNDERFLOW_RMS
    return np.where(bad_SxCxN.any(axis=2), bad_SxCxN.argmax(axis=2) + 1, 0).astype(np.int32)


def _mask_out_of_range(chunk: dict[str, np.ndarray], name: str, seeds, norms,
                       block: BlockConfig = BlockConfig()) -> dict[str, np.ndarray]:
    """Stacks whose residual stream leaves float32's range (e.g. attention-only stacks, whose norm
    grows or shrinks geometrically with depth) keep their layers up to that point: every metric
    from the first such layer on becomes NaN, "input/range_exceeded_layer" (S, C) records the
    layer (0 = never) and a warning names the first point. A non-finite input, or a metric that
    is not finite after the first block (the bias alone overflows it: what stops the bias sweep),
    raises FloatingPointError."""
    for metric, values in chunk.items():
        if metric.startswith("input/") and not np.isfinite(values).all():
            idx = np.argwhere(~np.isfinite(values))[0]
            raise FloatingPointError(
                f"depth sweep: input metric {metric!r} is not finite in stack "
                f"{name.split('/')[0]}, s={norms[idx[1]]:g}, seed={seeds[idx[0]]}")
    for metric, values in chunk.items():  # the first block overflows: as the bias sweep, stop
        if metric.startswith("input/"):
            continue
        bad_SxC = ~np.isfinite(values[:, :, :1].reshape(values.shape[:2] + (-1,))).all(axis=-1)
        if bad_SxC.any():
            idx = np.argwhere(bad_SxC)[0]
            raise FloatingPointError(
                f"depth sweep overflow: metric {metric!r} is not finite after the first block of "
                f"stack {name.split('/')[0]} at s={norms[idx[1]]:g}, seed={seeds[idx[0]]}: "
                f"{overflow_cause(block, float(norms[idx[1]]))}")
    first_SxC = _first_out_of_range_layer(chunk)
    if first_SxC.any():
        i, j = np.argwhere(first_SxC)[0]
        warnings.warn(f"depth sweep: stack {name.split('/')[0]} leaves float32's range at layer "
                      f"{first_SxC[i, j]} (s={norms[j]:g}, seed={seeds[i]}; "
                      f"{int((first_SxC > 0).sum())} point(s) of this chunk): its metrics from "
                      f"there on are NaN", RuntimeWarning, stacklevel=2)
        for metric, values in chunk.items():
            if metric.startswith("input/"):
                continue
            layer_N = np.arange(1, values.shape[2] + 1)
            cut_SxCxN = (first_SxC[:, :, None] > 0) & (layer_N >= first_SxC[:, :, None])
            cut = cut_SxCxN.reshape(cut_SxCxN.shape + (1,) * (values.ndim - 3))
            chunk[metric] = np.where(cut, np.nan, values).astype(values.dtype)
    chunk["input/range_exceeded_layer"] = first_SxC
    return chunk


@dataclasses.dataclass(frozen=True)
class ChunkPlan:
    architecture: str
    width: int
    seeds: np.ndarray  # real seed indices of the chunk
    padded_seeds: np.ndarray  # seeds_per_chunk indices (the last seed repeated)
    lo: int  # bias-index range [lo, hi)
    hi: int

    @property
    def name(self) -> str:
        return chunk_name(self.architecture, self.width, (int(self.seeds[0]), int(self.seeds[-1])),
                          (self.lo, self.hi - 1))


def plan_chunks(config: DepthConfig, layout: ChunkLayout) -> list[ChunkPlan]:
    """Every chunk of every (architecture, width), in the order they run."""
    plan, num_seeds, num_bias = [], config.num_seeds, len(config.bias_norms)
    for arch in config.architectures:
        for width in config.widths:
            for sb in range(layout.num_seed_blocks):
                idx = np.arange(sb * layout.seeds_per_chunk, (sb + 1) * layout.seeds_per_chunk)
                for bb in range(layout.num_bias_blocks):
                    lo = bb * layout.bias_per_chunk
                    plan.append(ChunkPlan(arch, width, idx[idx < num_seeds],
                                          np.minimum(idx, num_seeds - 1), lo,
                                          min(lo + layout.bias_per_chunk, num_bias)))
    return plan


def _done_flags(plan: list[ChunkPlan], store: Any) -> np.ndarray:
    """Which chunks the store holds, as process 0 sees it (broadcast to every process)."""
    flags = np.array([store is not None and jax.process_index() == 0 and store.has(c.name)
                      for c in plan], np.int32)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        flags = np.asarray(multihost_utils.broadcast_one_to_all(flags))
    return flags.astype(bool)


def precompile(config: DepthConfig, pending: list[ChunkPlan], mesh: Mesh, layout: ChunkLayout,
               key_data: np.ndarray) -> dict[str, Callable]:
    """The chunk function of every stack with pending chunks, compiled ahead in parallel threads
    (XLA compiles without the GIL): a grid of several stacks pays about one compilation instead of
    one per stack. Keyed by `stack_name`."""
    keys = jax.ShapeDtypeStruct((layout.seeds_per_chunk,) + key_data.shape[1:], key_data.dtype,
                                sharding=NamedSharding(mesh, P()))
    s = jax.ShapeDtypeStruct((layout.bias_per_chunk,), np.float32,
                             sharding=NamedSharding(mesh, P(GRID_AXIS)))
    stacks = sorted({(c.architecture, c.width) for c in pending})

    def compile_one(stack):
        return make_chunk_fn(config, *stack, mesh).lower(keys, s).compile()

    workers = max(1, min(len(stacks), (os.cpu_count() or 2) // 2))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return {stack_name(*stack): fn for stack, fn in zip(stacks, pool.map(compile_one, stacks))}


def _compute(fn: Callable, c: ChunkPlan, mesh: Mesh, key_data: np.ndarray,
             norms: np.ndarray, bias_per_chunk: int, block: BlockConfig
             ) -> dict[str, np.ndarray]:
    s_chunk = np.full((bias_per_chunk,), norms[c.hi - 1], np.float32)  # padding repeats the last
    s_chunk[: c.hi - c.lo] = norms[c.lo:c.hi]
    out = fetch(fn(place(key_data[c.padded_seeds], NamedSharding(mesh, P())),
                    place(s_chunk, NamedSharding(mesh, P(GRID_AXIS)))))
    out = {k: v[: len(c.seeds), : c.hi - c.lo] for k, v in out.items()}
    return _mask_out_of_range(out, c.name, c.seeds, norms[c.lo:c.hi], block)


def _put(stacks: dict[str, StackResult], config: DepthConfig, c: ChunkPlan,
         arrays: Mapping[str, np.ndarray]) -> None:
    """Copies one chunk's values into its stack's whole-grid arrays."""
    name = stack_name(c.architecture, c.width)
    stack = stacks.setdefault(name, StackResult(c.architecture, c.width, {}, {}, {}))
    shape = (config.num_seeds, len(config.bias_norms))
    for key, values in arrays.items():
        if key.startswith("input/"):
            target, key = stack.inputs, key.removeprefix("input/")
        elif key.startswith("per_head/"):
            target, key = stack.per_head, key.removeprefix("per_head/")
        else:
            target = stack.per_layer
        if key not in target:
            fill = np.nan if np.issubdtype(values.dtype, np.floating) else 0
            target[key] = np.full(shape + values.shape[2:], fill, values.dtype)
        target[key][c.seeds[0]: c.seeds[-1] + 1, c.lo:c.hi] = values


def _hang_if_asked(computed: int) -> None:
    if computed == int(os.environ.get(HANG_ENV, "-1")):
        print(f"{HANG_ENV}: hanging after {computed} computed chunks", flush=True)
        while True:
            time.sleep(1.0)


def run(config: DepthConfig, *, mesh: Mesh | None = None, store: Any = None,
        progress: Progress = SILENT) -> DepthResult:
    """Runs every (architecture, width) chunk by chunk; see the module docstring.

    Args:
      config: the sweep.
      mesh: devices to shard the s axis over (default: all devices of all processes).
      store: holds finished chunks (`has(name)`, `load(name)`, `save(name, arrays)`), or None.
      progress: says "chunk I/N  NAME  T s" (or "loaded") after every chunk.
    Raises:
      FloatingPointError: an input metric is not finite (names the metric, stack, s and seed);
        layers past float32's range are NaN, with a warning (`_mask_out_of_range`).
    """
    start = time.perf_counter()
    mesh = grid_mesh() if mesh is None else mesh
    norms = np.asarray(config.bias_norms, np.float32)
    layout = chunk_layout(config.num_seeds, len(norms), config.chunk_size, mesh.size)
    key_data = np.asarray(jax.random.key_data(inputs.seed_keys(config.seed, config.num_seeds)))
    plan = plan_chunks(config, layout)
    done = _done_flags(plan, store)
    writer = jax.process_index() == 0
    compiled = precompile(config, [c for c, d in zip(plan, done) if not d], mesh, layout,
                          key_data)
    stacks: dict[str, StackResult] = {}
    computed = 0
    for index, (c, is_done) in enumerate(zip(plan, done), start=1):
        t0 = time.perf_counter()
        if is_done:
            arrays = store.load(c.name) if writer else None
        else:
            fn = compiled[stack_name(c.architecture, c.width)]
            arrays = _compute(fn, c, mesh, key_data, norms, layout.bias_per_chunk, config.model)
            computed += 1
            if store is not None and writer:
                store.save(c.name, arrays)
        if arrays is not None:
            _put(stacks, config, c, arrays)
        how = "loaded" if is_done else f"{time.perf_counter() - t0:.1f} s"
        progress.say(f"chunk {index}/{len(plan)}  {c.name}  {how}")
        if not is_done:
            _hang_if_asked(computed)
    return DepthResult(config, stacks, layout, mesh.size, jax.process_count(), computed,
                       int(done.sum()), time.perf_counter() - start,
                       complete=writer or not done.any())
