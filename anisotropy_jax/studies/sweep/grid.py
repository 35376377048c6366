"""The untrained-block bias sweep over its (seed × s) grid (docs/SCIENCE.md, "The untrained-block
experiment"): `run(config) -> SweepResult`.

For every grid point (seed i, bias norm s_j) the block of seed i runs on x = z_i + s_j·u_i (or one
of the controls of `SweepConfig.inputs`, from the same z_i and u_i) and its probes are reduced
*on device* to the metrics of the results contract (`points.reduce_probes`);
only scalars (and per-head vectors) come back to the host. Weights, z and u (or the per-sequence
directions u_b) are drawn once per seed and shared by every s of that seed.

How it runs:
  * `chunk_computation` is one forward + metric reduction per point, over a block of seeds (one
    after another) and a block of bias norms (`jax.vmap`ped with the weights shared, so the
    matmuls see one big batch; on the CPU one point at a time, see `points_per_step`). Where
    attention sees x itself (post-LN, no LN) its input projection is linear in s: each seed's z·W
    and u·W are computed once per chunk and every point gets z·W + s·(u·W) + b
    (`reuse_projections`, on by default: a quarter of the block's FLOPs; `affine.py`).
  * `jit_chunk` compiles it once per static configuration: the bias norms are traced arguments,
    so new bias values (or a new grid length, thanks to fixed-size padded chunks) do not recompile.
  * `run` walks the (seed, s) grid chunk by chunk on the host, so at most `chunk_size`
    points are in flight (memory is bounded) and progress can be reported per chunk. The s axis
    of every chunk is sharded over all devices of `grid_mesh()` (NamedSharding, axis "grid"),
    padded to a multiple of the device count; padding is dropped on the way back.
  * A non-finite metric raises `FloatingPointError` naming the metric, s and seed (float32
    overflow at extreme bias norms), never a silent NaN.

The per-chunk function is public so that benchmarks can reuse it: `chunk_computation(block,
with_metrics=False)` is the bare forward (one scalar per point so that nothing is pruned),
`config.model.precision` selects 'highest' | 'default' | 'bfloat16' matmuls.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import time
from typing import Any, Callable, Mapping, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from anisotropy_jax import inputs
from anisotropy_jax.protocol import SILENT, Progress
from anisotropy_jax.config import BlockConfig, ConfigError
from anisotropy_jax.configs.sweep import SweepConfig
from anisotropy_jax.models import layers
from anisotropy_jax.models.block import init_block_params
from anisotropy_jax.studies.sweep.affine import can_reuse_projections, project_seed
from anisotropy_jax.studies.sweep.points import point_forward, point_metrics

Array = jax.Array
GRID_AXIS = "grid"


# --------------------------------------------------------------------------------------------
# Seeds: weights, tokens and bias direction

class SeedState(NamedTuple):
    """Per-seed draws, each with a leading axis of num_seeds."""

    params: Any  # block parameters
    z: Array     # (S, B, L, D) tokens
    u: Array     # (S, D) unit bias directions; (S, B, D) for per-sequence inputs


def _init_seeds(keys: Array, block: BlockConfig, batch_size: int, seq_len: int,
                kind: str = "biased") -> SeedState:
    """Every seed's draws; the inputs `kind` only decides the shape of u: one direction, or one
    per sequence ('per_sequence', from the same direction key). Weights and z do not depend on it,
    so the runs of one comparison share them."""
    split = jax.vmap(inputs.split_seed_key)(keys)
    params = init_block_params(block, split.params)
    z = jax.vmap(lambda k: inputs.gaussian_tokens(k, batch_size, seq_len, block.d_model))(
        split.tokens)
    if kind == "per_sequence":
        u = jax.vmap(lambda k: inputs.sequence_directions(k, batch_size, block.d_model))(
            split.direction)
    else:
        u = jax.vmap(lambda k: inputs.random_unit_vector(k, block.d_model))(split.direction)
    return SeedState(params, z, u)


@functools.lru_cache(maxsize=4)
def _init_seeds_jit(platform: str) -> Callable:
    """`_init_seeds` jitted with the chunks' compiler options: on GPUs, without Triton GEMM
    autotuning, it compiled in 3.2 s on an H100 with them on (docs/PERFORMANCE.md)."""
    return jax.jit(_init_seeds, static_argnames=("block", "batch_size", "seq_len", "kind"),
                   compiler_options=layers.compiler_options(platform))


def init_seeds(config: SweepConfig) -> SeedState:
    """Weights, z and u of every seed (a pure function of config.seed, the shapes and, for the
    shape of u, config.inputs)."""
    keys = inputs.seed_keys(config.seed, config.num_seeds)
    return _init_seeds_jit(jax.default_backend())(keys, config.model, config.batch_size,
                                                  config.seq_len, config.inputs)


def _compiled_while_initialising(config: SweepConfig, fn: Callable, layout: "ChunkLayout",
                                 mesh: Mesh) -> tuple[Any, Callable]:
    """(host copies of `init_seeds(config)`, the chunk function), the chunk function compiled in
    a second thread for the shapes of one chunk while the seeds are drawn (XLA compiles without
    the GIL, so the two compilations overlap). A chunk function that cannot be lowered ahead (not
    a `jax.jit` object) is returned as given and compiles at its first call."""
    if not hasattr(fn, "lower"):
        return fetch(init_seeds(config)), fn
    state_shapes = jax.eval_shape(functools.partial(  # not the jitted one: options are top-level
        _init_seeds, block=config.model, batch_size=config.batch_size, seq_len=config.seq_len,
        kind=config.inputs),
        inputs.seed_keys(config.seed, config.num_seeds))
    replicated, grid_sharding = NamedSharding(mesh, P()), NamedSharding(mesh, P(GRID_AXIS))
    args = jax.tree.map(lambda a: jax.ShapeDtypeStruct((layout.seeds_per_chunk,) + a.shape[1:],
                                                       a.dtype, sharding=replicated),
                        tuple(state_shapes))
    s = jax.ShapeDtypeStruct((layout.bias_per_chunk,), np.float32, sharding=grid_sharding)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        compiled = pool.submit(lambda: fn.lower(*args, s).compile())
        state = fetch(init_seeds(config))
        return state, compiled.result()


# --------------------------------------------------------------------------------------------
# A chunk of the grid: vmapped, jitted, sharded

def default_points_per_step(platform: str | None = None) -> int:
    """Points evaluated at once (vmapped) when `points_per_step` is 0 (auto): one on the CPU,
    where chunks of 4 vmapped BERT-base points (B = 8) ran 1.3–1.45× slower per point than single
    points on the 2-core CPU (a bigger batch overflows the caches); every point of the chunk
    (0 = unlimited) on accelerators, where the batch fills the chip."""
    platform = jax.default_backend() if platform is None else platform
    return 1 if platform == "cpu" else 0


def grid_computation(point: Callable, block: BlockConfig, reuse_projections: bool = True,
                     points_per_step: int = 0) -> Callable:
    """f(params[S], z[S], u[S], s[C]) → {name: (S, C, ...)} from a per-point function
    point(params, z, u, s, projected) → {name: array}. Not jitted: see `jit_chunk`.

    Seeds run one after another (`lax.map`: each seed's weights are plain matrices, not a batch
    of them); the bias norms of a seed are evaluated `points_per_step` at a time with the weights
    shared (vmap; 0 = all C at once, one big matmul batch). With `reuse_projections` (and a block
    where `can_reuse_projections`), each seed's z·W and u·W are computed once per chunk and
    passed as `projected`; otherwise `projected` is None.
    """
    if not (isinstance(points_per_step, int) and points_per_step >= 0):
        raise ConfigError(f"points_per_step: must be an integer >= 0, got {points_per_step!r}")
    reuse = reuse_projections and can_reuse_projections(block)

    def one_seed(params, z_BxLxD, u_D, bias_norms_C):
        projected = project_seed(block, params, z_BxLxD, u_D) if reuse else None

        def at(s):
            return point(params, z_BxLxD, u_D, s, projected)

        if points_per_step == 0 or points_per_step >= bias_norms_C.shape[0]:
            return jax.vmap(at)(bias_norms_C)
        return jax.lax.map(at, bias_norms_C, batch_size=points_per_step)

    def chunk(params, z_SxBxLxD, u_SxD, bias_norms_C):  # a plain function: wrappable by chex
        return jax.lax.map(lambda seed: one_seed(*seed, bias_norms_C),
                           (params, z_SxBxLxD, u_SxD))

    return chunk


def chunk_computation(block: BlockConfig, with_metrics: bool = True,
                      reuse_projections: bool = True, points_per_step: int = 0,
                      inputs: str = "biased", sink_metrics: bool = False) -> Callable:
    """The library's per-chunk function: `point_metrics` (or the bare `point_forward`) over a
    chunk of the grid (`grid_computation`), on the sweep inputs of kind `inputs`; with
    `sink_metrics`, `points.SINK_METRICS` too."""
    extra = {"sink_metrics": True} if with_metrics and sink_metrics else {}
    point = functools.partial(point_metrics if with_metrics else point_forward, block,
                              kind=inputs, **extra)
    return grid_computation(point, block, reuse_projections, points_per_step)


def grid_mesh(devices: Any = None) -> Mesh:
    """A 1-D mesh with axis "grid" over `devices` (default: every visible device, all hosts)."""
    devices = jax.devices() if devices is None else list(devices)
    return Mesh(np.asarray(devices), (GRID_AXIS,))


def jit_chunk(fn: Callable, mesh: Mesh) -> Callable:
    """jit with the bias-norm axis of the chunk sharded over the mesh, everything else replicated;
    outputs (S, C, ...) are sharded along C.

    The body runs under `shard_map`: each device evaluates the points of its own slice of s and
    nothing crosses devices. (Left to the automatic partitioner, a custom call such as the fused
    attention kernel, which has no sharding rule, was replicated with its inputs gathered: 1.30×
    on 2 and 1.68× on 4 H200s instead of ~2× and ~4×.)
    """
    replicated = NamedSharding(mesh, P())
    per_device = jax.shard_map(fn, mesh=mesh, in_specs=(P(), P(), P(), P(GRID_AXIS)),
                               out_specs=P(None, GRID_AXIS), check_vma=False)
    return jax.jit(per_device, in_shardings=(replicated, replicated, replicated,
                                             NamedSharding(mesh, P(GRID_AXIS))),
                   out_shardings=NamedSharding(mesh, P(None, GRID_AXIS)),
                   compiler_options=layers.compiler_options(mesh.devices.flat[0].platform))


@functools.lru_cache(maxsize=32)
def make_chunk_fn(block: BlockConfig, mesh: Mesh, with_metrics: bool = True,
                  reuse_projections: bool = True, points_per_step: int = 0,
                  inputs: str = "biased", sink_metrics: bool = False) -> Callable:
    """The jitted, sharded per-chunk computation (cached per static configuration);
    points_per_step 0 = auto for the mesh's platform (`default_points_per_step`)."""
    width = points_per_step or default_points_per_step(mesh.devices.flat[0].platform)
    return jit_chunk(chunk_computation(block, with_metrics, reuse_projections, width, inputs,
                                       sink_metrics), mesh)


@dataclasses.dataclass(frozen=True)
class ChunkLayout:
    """How the (seed × s) grid is cut: blocks of `seeds_per_chunk` seeds × `bias_per_chunk` s."""

    seeds_per_chunk: int
    bias_per_chunk: int
    num_seed_blocks: int
    num_bias_blocks: int

    @property
    def num_chunks(self) -> int:
        return self.num_seed_blocks * self.num_bias_blocks

    @property
    def points_per_chunk(self) -> int:
        return self.seeds_per_chunk * self.bias_per_chunk


def chunk_layout(num_seeds: int, num_bias: int, chunk_size: int, num_devices: int) -> ChunkLayout:
    """Cuts the grid into equal chunks of at most max(chunk_size, num_devices) points.

    The s axis is filled first (it is the sharded axis, and shared weights make one big matmul
    batch): bias_per_chunk = min(chunk_size, grid length), rounded to a multiple of the device
    count; the remaining room takes several seeds. chunk_size 0 = one chunk with the whole grid.
    The last chunk of each axis is padded (repeated values), and the padding is dropped.
    """
    def round_up(n, m):
        return -(-n // m) * m

    if chunk_size == 0:
        seeds, bias = num_seeds, round_up(num_bias, num_devices)
    else:
        bias = min(round_up(num_bias, num_devices),
                   max(num_devices, chunk_size // num_devices * num_devices))
        seeds = min(num_seeds, max(1, chunk_size // bias))
    return ChunkLayout(seeds, bias, -(-num_seeds // seeds), -(-num_bias // bias))


# --------------------------------------------------------------------------------------------
# The whole grid

@dataclasses.dataclass
class SweepResult:
    """Raw per-seed values: `per_seed[name]` is (num_seeds, num_bias), `per_head[name]` is
    (num_seeds, num_bias, H)."""

    config: SweepConfig
    bias_norms: np.ndarray
    per_seed: dict[str, np.ndarray]
    per_head: dict[str, np.ndarray]
    layout: ChunkLayout
    num_devices: int
    seconds: float
    first_chunk_seconds: float  # includes compilation


def place(tree: Any, sharding: NamedSharding) -> Any:
    """Host values → global arrays with `sharding` (works across hosts: every process passes the
    same values and each fills its own devices). Chunk functions are traced for inputs placed
    like this: call them with placed inputs (as `run` does) to reuse one trace."""
    def put(a):
        a = np.asarray(a)
        return jax.make_array_from_callback(a.shape, sharding, lambda index: a[index])
    return jax.tree.map(put, tree)


def fetch(tree: Any) -> Any:
    """Device arrays → numpy, gathering the shards of other hosts (processes) when there are
    several: the way back of `place` (the sweep's and the depth study's chunks)."""
    def get(a):
        if getattr(a, "is_fully_addressable", True):
            return np.asarray(a)
        from jax.experimental import multihost_utils
        return np.asarray(multihost_utils.process_allgather(a, tiled=True))
    return jax.tree.map(get, tree)


def overflow_cause(block: BlockConfig, bias_norm: float) -> str:
    """What made a point's activations leave float32's range, naming the config field: the bias
    norm where there is one; at s = 0 (no bias at all) the weights' scale (`model.init_std` for
    the inits that read it, else the init itself)."""
    if bias_norm > 0:
        return "float32 activations overflow for bias norms this large (bias_norms)"
    if block.init in ("bert", "t5"):
        scale = f"model.init_std={block.init_std:g}"
        if block.init == "bert" and block.residual_init_std is not None:
            scale += f" (model.residual_init_std={block.residual_init_std:g})"
        return (f"float32 activations overflow with no bias at all: the weights of "
                f"{scale} are too large")
    return (f"float32 activations overflow with no bias at all: the weights of "
            f"model.init={block.init} overflow them")


def _check_finite(chunk: Mapping[str, np.ndarray], seeds: np.ndarray, norms: np.ndarray,
                  block: BlockConfig) -> None:
    for name, values in chunk.items():
        bad = ~np.isfinite(values)
        if bad.any():
            idx = np.argwhere(bad)[0]
            raise FloatingPointError(
                f"bias sweep overflow: metric {name!r} is not finite ({values[tuple(idx)]}) at "
                f"s={norms[idx[1]]:g}, seed={seeds[idx[0]]} (norm_position="
                f"{block.norm_position}, init={block.init}, precision={block.precision}): "
                f"{overflow_cause(block, float(norms[idx[1]]))}")


def _store(out: Mapping[str, np.ndarray], seeds: np.ndarray, lo: int, shape: tuple[int, int],
           per_seed: dict[str, np.ndarray], per_head: dict[str, np.ndarray]) -> None:
    """Copies one chunk's (seeds, s) values into the whole-grid arrays."""
    for name, values in out.items():
        target = per_head if name.startswith("per_head/") else per_seed
        key = name.removeprefix("per_head/")
        if key not in target:
            target[key] = np.zeros(shape + values.shape[2:], values.dtype)
        target[key][seeds[0]: seeds[-1] + 1, lo: lo + values.shape[1]] = values


def run(config: SweepConfig, *, mesh: Mesh | None = None, chunk_fn: Callable | None = None,
        with_metrics: bool = True, progress: Progress = SILENT) -> SweepResult:
    """Runs the whole (seed × s) grid chunk by chunk; see the module docstring.

    Args:
      config: the sweep.
      mesh: devices to shard the s axis over (default `grid_mesh()`: all visible devices).
      chunk_fn: a prebuilt jitted chunk function (default `make_chunk_fn(config.model, mesh,
        with_metrics)`, cached, so repeated sweeps of the same shapes compile once).
      with_metrics: False runs the bare forward (benchmarks); per_seed then holds
        "output_checksum".
      progress: after every chunk, marks the phase "chunk I" and says "chunk I/N  seeds a-b
        s lo..hi  T s".
    Raises:
      FloatingPointError: a metric is not finite (names the metric, s and seed).
    """
    mesh = grid_mesh() if mesh is None else mesh
    fn = (make_chunk_fn(config.model, mesh, with_metrics, config.reuse_projections,
                        config.points_per_step, config.inputs, config.reports_sink_metrics)
          if chunk_fn is None else chunk_fn)
    norms = np.asarray(config.bias_norms, np.float32)
    num_bias, num_seeds = len(norms), config.num_seeds
    layout = chunk_layout(num_seeds, num_bias, config.chunk_size, mesh.size)
    replicated, grid_sharding = NamedSharding(mesh, P()), NamedSharding(mesh, P(GRID_AXIS))

    start = time.perf_counter()
    state, fn = _compiled_while_initialising(config, fn, layout, mesh)  # host copies of the draws
    per_seed: dict[str, np.ndarray] = {}
    per_head: dict[str, np.ndarray] = {}
    seconds = []
    for sb in range(layout.num_seed_blocks):
        seed_idx = np.arange(sb * layout.seeds_per_chunk, (sb + 1) * layout.seeds_per_chunk)
        real_seeds = seed_idx[seed_idx < num_seeds]
        padded_idx = np.minimum(seed_idx, num_seeds - 1)  # padding repeats the last seed
        params, z, u = place(jax.tree.map(lambda a: a[padded_idx], tuple(state)), replicated)
        for bb in range(layout.num_bias_blocks):
            t0 = time.perf_counter()
            lo = bb * layout.bias_per_chunk
            hi = min(lo + layout.bias_per_chunk, num_bias)
            s_chunk = np.full((layout.bias_per_chunk,), norms[hi - 1], np.float32)  # pad
            s_chunk[: hi - lo] = norms[lo:hi]
            out = fetch(fn(params, z, u, place(s_chunk, grid_sharding)))
            out = {k: v[: len(real_seeds), : hi - lo] for k, v in out.items()}
            _check_finite(out, real_seeds, norms[lo:hi], config.model)
            _store(out, real_seeds, lo, (num_seeds, num_bias), per_seed, per_head)
            seconds.append(time.perf_counter() - t0)
            progress.mark(f"chunk {len(seconds)}")
            progress.say(f"chunk {len(seconds)}/{layout.num_chunks}  seeds {int(real_seeds[0])}-"
                         f"{int(real_seeds[-1])}  s {float(norms[lo]):.3g}..{float(norms[hi - 1]):.3g}"
                         f"  {seconds[-1]:.1f} s")
    return SweepResult(config=config, bias_norms=np.asarray(config.bias_norms, np.float64),
                       per_seed=per_seed, per_head=per_head, layout=layout,
                       num_devices=mesh.size, seconds=time.perf_counter() - start,
                       first_chunk_seconds=seconds[0])
