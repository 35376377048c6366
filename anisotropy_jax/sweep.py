"""The untrained-block bias sweep (layer 5; SCIENCE.md "The untrained-block experiment").

For every grid point (seed i, bias norm s_j) the block of seed i runs on x = z_i + s_j·u_i and its
probes are reduced *on device* to the metrics of the results contract (DESIGN.md); only scalars
(and per-head vectors) come back to the host. Weights, z and u are drawn once per seed and shared
by every s of that seed.

How it runs:
  * `chunk_computation` is one forward + metric reduction per point, over a block of seeds (one
    after another) and a block of bias norms (`jax.vmap`ped with the weights shared, so the
    matmuls see one big batch; on the CPU one point at a time, see `points_per_step`). Where
    attention sees x itself (post-LN, no LN) its input projection is linear in s: each seed's z·W
    and u·W are computed once per chunk and every point gets z·W + s·(u·W) + b
    (`reuse_projections`, on by default: a quarter of the block's FLOPs).
  * `jit_chunk` compiles it once per static configuration: the bias norms are traced arguments,
    so new bias values (or a new grid length, thanks to fixed-size padded chunks) do not recompile.
  * `run_sweep` walks the (seed, s) grid chunk by chunk on the host, so at most `chunk_size`
    points are in flight (memory is bounded) and progress can be reported per chunk. The s axis
    of every chunk is sharded over all devices of `grid_mesh()` (NamedSharding, axis "grid"),
    padded to a multiple of the device count; padding is dropped on the way back.
  * A non-finite metric raises `FloatingPointError` naming the metric, s and seed (float32
    overflow at extreme bias norms), never a silent NaN.

The per-chunk function is public so that benchmarks can reuse it: `chunk_computation(block,
with_metrics=False)` is the bare forward (one scalar per point so that nothing is pruned),
`config.block.precision` selects 'highest' | 'default' | 'bfloat16' matmuls.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Any, Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from anisotropy_jax import inputs, metrics, model
from anisotropy_jax.config import BlockConfig, ConfigError, block_config_from_mapping

Array = jax.Array
GRID_AXIS = "grid"

# s = 0 plus 2^-2 … 2^12 in half-octave steps (29 values): from "no bias" through s² ≈ d (s ≈ 28 for
# BERT-base, where F1 crosses 1/2) to far beyond 1,024.
DEFAULT_BIAS_NORMS: tuple[float, ...] = (0.0,) + tuple(2.0 ** (k / 2) for k in range(-4, 25))

# Scalars per grid point (the results contract of DESIGN.md, plus a few more).
SCALAR_METRICS = (
    "input_cosine", "input_norm", "input_drift_norm",
    "attention_output_cosine", "attention_output_cross_sequence_cosine", "attention_output_norm",
    "output_cosine", "output_cross_sequence_cosine", "output_within_sequence_cosine",
    "output_norm", "output_isoscore", "output_drift_norm", "output_relative_drift",
    "attention_entropy", "attention_entropy_normalized", "attention_max", "attention_sink_mass",
    "query_norm", "key_norm", "mean_query_norm", "mean_key_norm", "mean_query_key_cosine",
    "mean_query_key_abs_cosine", "mean_query_key_dot",
)
# Metrics that need two sequences (B ≥ 2); absent from the results when batch_size = 1.
CROSS_SEQUENCE_METRICS = ("attention_output_cross_sequence_cosine", "output_cross_sequence_cosine")
# Per-head vectors (H,) per grid point, kept for the npz file.
PER_HEAD_METRICS = ("attention_entropy_normalized", "attention_max", "query_norm", "key_norm",
                    "mean_query_norm", "mean_key_norm", "mean_query_key_cosine",
                    "mean_query_key_dot")


# --------------------------------------------------------------------------------------------
# Configuration

@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """A bias sweep: the block, the inputs, the grid and how it is chunked.

    Attributes:
      block: the block (its `precision` is the sweep's matmul precision).
      batch_size: B sequences per grid point.
      seq_len: L tokens per sequence (≥ 2: attention needs a choice).
      bias_norms: the swept s values (finite, ≥ 0), in the order reported.
      num_seeds: independent draws of (weights, z, u); every s of a seed shares them.
      seed: base PRNG seed; seed i uses fold_in(key(seed), i).
      chunk_size: grid points (seed × s) in flight at once over all devices; 0 = the whole grid.
        The s-block of a chunk is rounded up to a multiple of the device count.
      reuse_projections: compute each seed's attention input projection z·W, u·W once per chunk
        and assemble z·W + s·(u·W) + b per point (same function, a quarter fewer FLOPs for
        BERT-base; post-LN and no-LN blocks only, ignored for pre-LN). False runs the block
        literally on x = z + s·u. Both agree within float32 rounding (tests/test_sweep.py).
      points_per_step: bias norms of a seed evaluated at once (vmapped) inside a chunk, the rest
        in a loop on the device; 0 = auto (`default_points_per_step`: 1 on the CPU, the whole
        chunk on GPUs). Same values either way; only speed and memory change.
    """

    block: BlockConfig = BlockConfig()
    batch_size: int = 16
    seq_len: int = 128
    bias_norms: tuple[float, ...] = DEFAULT_BIAS_NORMS
    num_seeds: int = 3
    seed: int = 0
    chunk_size: int = 8
    reuse_projections: bool = True
    points_per_step: int = 0

    def __post_init__(self):
        def positive_int(name, value, minimum):
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= minimum):
                raise ConfigError(f"{name}: must be an integer >= {minimum}, got {value!r}")

        if not isinstance(self.block, BlockConfig):
            raise ConfigError(f"model: expected a BlockConfig, got {type(self.block).__name__}")
        positive_int("batch_size", self.batch_size, 1)
        positive_int("seq_len", self.seq_len, 2)
        positive_int("num_seeds", self.num_seeds, 1)
        positive_int("seed", self.seed, 0)
        positive_int("chunk_size", self.chunk_size, 0)
        positive_int("points_per_step", self.points_per_step, 0)
        if not isinstance(self.reuse_projections, bool):
            raise ConfigError(f"reuse_projections: must be True or False, got "
                              f"{self.reuse_projections!r}")
        norms = self.bias_norms
        if not isinstance(norms, tuple) or not norms:
            raise ConfigError(f"bias_norms: must be a non-empty tuple of floats, got {norms!r}")
        for s in norms:
            if isinstance(s, bool) or not isinstance(s, (int, float)):
                raise ConfigError(f"bias_norms: {s!r} is not a number")
            if not math.isfinite(s):
                raise ConfigError(f"bias_norms: {s!r} is not finite")
            if s < 0:
                raise ConfigError(f"bias_norms: {s!r} is negative (a bias norm is ≥ 0)")

    @property
    def num_points(self) -> int:
        return self.num_seeds * len(self.bias_norms)

    def replace(self, **changes: Any) -> "SweepConfig":
        return dataclasses.replace(self, **changes)


_TOP_LEVEL_FIELDS = ("model", "batch_size", "seq_len", "bias_norms", "num_seeds", "seed",
                     "precision", "chunk_size", "reuse_projections", "points_per_step",
                     "compare_field", "compare_values")


def _as_bias_norms(value: Any) -> tuple[float, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ConfigError(f"bias_norms: must be a sequence of numbers, got {value!r}")
    out = []
    for s in value:
        if isinstance(s, bool) or not isinstance(s, (int, float, np.integer, np.floating)):
            raise ConfigError(f"bias_norms: {s!r} is not a number")
        out.append(float(s))
    return tuple(out)


def sweep_configs_from_mapping(fields: Mapping[str, Any]) -> list[tuple[str, SweepConfig]]:
    """Validates an experiment config (e.g. an ml_collections ConfigDict) into typed sweeps.

    Returns [(label, SweepConfig)]: one sweep, or one per entry of `compare_values` when
    `compare_field` names a model field (labels "field=value"; the sweeps share seeds and grid).
    Every error is a one-line `ConfigError` naming the field, raised before anything is compiled.
    """
    for key in fields:
        if key not in _TOP_LEVEL_FIELDS:
            raise ConfigError(f"{key}: unknown field; known fields are {list(_TOP_LEVEL_FIELDS)}")
    model_fields = dict(fields.get("model", {}))
    if "precision" in model_fields:
        raise ConfigError("model.precision: set the top-level `precision` instead")
    if "precision" in fields:
        model_fields["precision"] = fields["precision"]
    block = block_config_from_mapping(model_fields)
    kwargs = {name: fields[name] for name in ("batch_size", "seq_len", "num_seeds", "seed",
                                              "chunk_size", "reuse_projections",
                                              "points_per_step")
              if name in fields}
    if "bias_norms" in fields:
        kwargs["bias_norms"] = _as_bias_norms(fields["bias_norms"])
    base = SweepConfig(block=block, **kwargs)

    compare_field = fields.get("compare_field", "") or ""
    compare_values = tuple(fields.get("compare_values", ()) or ())
    if not compare_field:
        if compare_values:
            raise ConfigError("compare_values: set compare_field to the model field they vary")
        return [(_default_label(block), base)]
    known = {f.name for f in dataclasses.fields(BlockConfig)} - {"precision"}
    if compare_field not in known:
        raise ConfigError(f"compare_field: {compare_field!r} is not a model field; choose one of "
                          f"{sorted(known)}")
    if len(compare_values) < 1:
        raise ConfigError("compare_values: give at least one value of compare_field")
    sweeps = []
    for value in compare_values:
        try:
            block_v = block.replace(**{compare_field: value})
        except ConfigError as err:
            raise ConfigError(f"compare_values: {err}") from None
        sweeps.append((f"{compare_field}={value}", base.replace(block=block_v)))
    labels = [label for label, _ in sweeps]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"compare_values: repeated values {list(compare_values)}")
    return sweeps


def _default_label(block: BlockConfig) -> str:
    parts = [f"{block.norm_position}-LN" if block.norm_position != "none" else "no LN",
             f"init={block.init}" + (f"({block.init_std:g})" if block.init == "bert" else "")]
    if not block.use_mlp:
        parts.append("attention only")
    return ", ".join(parts)


# --------------------------------------------------------------------------------------------
# Seeds: weights, tokens and bias direction

class SeedState(NamedTuple):
    """Per-seed draws, each with a leading axis of num_seeds."""

    params: Any  # block parameters
    z: Array     # (S, B, L, D) tokens
    u: Array     # (S, D) unit bias directions


@functools.partial(jax.jit, static_argnames=("block", "batch_size", "seq_len"))
def _init_seeds(keys: Array, block: BlockConfig, batch_size: int, seq_len: int) -> SeedState:
    split = jax.vmap(inputs.split_seed_key)(keys)
    params = model.init_block_params(block, split.params)
    z = jax.vmap(lambda k: inputs.gaussian_tokens(k, batch_size, seq_len, block.d_model))(
        split.tokens)
    u = jax.vmap(lambda k: inputs.random_unit_vector(k, block.d_model))(split.direction)
    return SeedState(params, z, u)


def init_seeds(config: SweepConfig) -> SeedState:
    """Weights, z and u of every seed (a pure function of config.seed and the shapes)."""
    keys = inputs.seed_keys(config.seed, config.num_seeds)
    return _init_seeds(keys, config.block, config.batch_size, config.seq_len)


# --------------------------------------------------------------------------------------------
# One grid point

def _mean_norm(x: Array) -> Array:
    """Mean ‖x_i‖ over the leading axes, without overflow of the squares."""
    return jnp.mean(metrics.vector_norms(x))


def reduce_probes(probes: Mapping[str, Array], block: BlockConfig) -> dict[str, Array]:
    """Block probes of one grid point → {metric: scalar} and {"per_head/metric": (H,)}.

    Attention averages run over batch, heads and queries; with a causal mask the first query (a
    single visible key, no choice) is excluded from the normalised entropy and from the max.
    Query/key geometry is per head (means over batch and positions), then averaged over heads.
    """
    probes = {k: v.astype(jnp.float32) for k, v in probes.items()}  # bfloat16 runs: f32 metrics
    x, attn, y = probes["resid_pre"], probes["attn_out"], probes["resid_post"]
    batch, seq_len, _ = x.shape
    # Per-query softmax statistics (B, H, Lq): computed from the logits by the plain attention
    # path, or on chip by the fused kernel (attention_impl='pallas'), which never writes logits.
    entropy_BxHxLq = probes["attn_entropy"]
    mask = model.attention_mask(seq_len, block.causal, None)
    counts_Lq = metrics.visible_key_counts((seq_len, seq_len), None if mask is None else mask[0, 0])
    query_weight_Lq = (counts_Lq > 1).astype(jnp.float32)
    query_weight_Lq = query_weight_Lq / jnp.sum(query_weight_Lq)

    def mean_over_queries(v_BxHxLq):  # → (H,)
        return jnp.einsum("bhq,q->h", v_BxHxLq, query_weight_Lq) / batch

    # entropy / ln(visible keys), 0 for a query with one visible key (metrics convention).
    log_counts_Lq = jnp.log(jnp.maximum(counts_Lq, 2).astype(jnp.float32))
    norm_entropy_BxHxLq = jnp.where(counts_Lq[None, None, :] > 1,
                                    entropy_BxHxLq / log_counts_Lq[None, None, :], 0.0)
    norm_entropy_h = mean_over_queries(norm_entropy_BxHxLq)
    max_h = mean_over_queries(probes["attn_max"])
    sink_h = mean_over_queries(probes["attn_sink"])
    qk = metrics.query_key_geometry(probes["queries"], probes["keys"])

    out = {
        "input_cosine": metrics.average_cosine_similarity(x),
        "input_norm": _mean_norm(x),
        "input_drift_norm": metrics.drift_norm(x),
        "attention_output_cosine": metrics.average_cosine_similarity(attn),
        "attention_output_norm": _mean_norm(attn),
        "output_cosine": metrics.average_cosine_similarity(y),
        "output_within_sequence_cosine": metrics.within_sequence_cosine_similarity(y),
        "output_norm": _mean_norm(y),
        "output_isoscore": metrics.isoscore(y),
        "output_drift_norm": metrics.drift_norm(y),
        "output_relative_drift": metrics.relative_drift(y),
        "attention_entropy": jnp.mean(mean_over_queries(entropy_BxHxLq)),
        "attention_entropy_normalized": jnp.mean(norm_entropy_h),
        "attention_max": jnp.mean(max_h),
        "attention_sink_mass": jnp.mean(sink_h),
        "mean_query_key_abs_cosine": jnp.mean(jnp.abs(qk["mean_query_key_cosine"])),
    }
    if batch >= 2:
        out["attention_output_cross_sequence_cosine"] = (
            metrics.cross_sequence_cosine_similarity(attn))
        out["output_cross_sequence_cosine"] = metrics.cross_sequence_cosine_similarity(y)
    for name in ("query_norm", "key_norm", "mean_query_norm", "mean_key_norm",
                 "mean_query_key_cosine", "mean_query_key_dot"):
        out[name] = jnp.mean(qk[name])
        out[f"per_head/{name}"] = qk[name]
    out["per_head/attention_entropy_normalized"] = norm_entropy_h
    out["per_head/attention_max"] = max_h
    return out


class ProjectedSeed(NamedTuple):
    """One seed's attention input projection, split along x = z + s·u (float32, no bias)."""

    qkv_z_BxLx3D: Array  # z·[W_q W_k W_v]
    qkv_u_3D: Array      # u·[W_q W_k W_v]


def can_reuse_projections(block: BlockConfig) -> bool:
    """Whether attention sees x itself (post-LN or no LN), so its input projection is linear in s.
    With pre-LN it sees LN(z + s·u), which is not."""
    return block.norm_position != "pre"


def project_seed(block: BlockConfig, params: Any, z_BxLxD: Array, u_D: Array) -> ProjectedSeed:
    """z·W and u·W, computed once per seed and shared by all its bias norms: then each point's
    projection is z·W + s·(u·W) + b, an element-wise update instead of a (B·L, D) × (D, 3D) matmul
    (a quarter of the block's FLOPs for BERT-base)."""
    return ProjectedSeed(model.qkv_projection(block, params, z_BxLxD),
                         model.qkv_projection(block, params, u_D))


def block_at(block: BlockConfig, params: Any, z_BxLxD: Array, u_D: Array, bias_norm: Array,
             projected: ProjectedSeed | None = None) -> tuple[Array, dict[str, Array]]:
    """(output, probes) of the block on x = z + s·u; with `projected` (see `project_seed`) the
    attention input projection is assembled from it instead of recomputed."""
    x_BxLxD = inputs.biased_inputs(z_BxLxD, u_D, bias_norm)
    qkv = None
    if projected is not None:
        base_BxLx3D = projected.qkv_z_BxLx3D  # shared by every s of the seed (unbatched)
        bias_3D = model.qkv_bias(params)
        if bias_3D is not None:
            base_BxLx3D = base_BxLx3D + bias_3D[None, None, :]
        qkv = model.AffineQKV(base_BxLx3D, projected.qkv_u_3D, bias_norm)
    return model.TransformerBlock(block).apply(params, x_BxLxD, attention_qkv=qkv)


def point_metrics(block: BlockConfig, params: Any, z_BxLxD: Array, u_D: Array,
                  bias_norm: Array, projected: ProjectedSeed | None = None) -> dict[str, Array]:
    """Forward of the block on x = z + s·u and the metric reduction, for one grid point."""
    _, probes = block_at(block, params, z_BxLxD, u_D, bias_norm, projected)
    return reduce_probes(probes, block)


def point_forward(block: BlockConfig, params: Any, z_BxLxD: Array, u_D: Array,
                  bias_norm: Array, projected: ProjectedSeed | None = None) -> dict[str, Array]:
    """The bare forward (no metrics) for benchmarks and bookkeeping tests: one cheap scalar per
    point, {"output_checksum": Σ_i y_i · y_0}, so that the output is used (not pruned), nothing
    large leaves the device, and (unlike Σ y, which a post-LN block makes 0) it depends on the
    point."""
    y_BxLxD, _ = block_at(block, params, z_BxLxD, u_D, bias_norm, projected)
    return {"output_checksum": jnp.sum(y_BxLxD * y_BxLxD[:1, :1, :])}


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
                      reuse_projections: bool = True, points_per_step: int = 0) -> Callable:
    """The library's per-chunk function: `point_metrics` (or the bare `point_forward`) over a
    chunk of the grid (`grid_computation`)."""
    point = functools.partial(point_metrics if with_metrics else point_forward, block)
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
                   out_shardings=NamedSharding(mesh, P(None, GRID_AXIS)))


@functools.lru_cache(maxsize=32)
def make_chunk_fn(block: BlockConfig, mesh: Mesh, with_metrics: bool = True,
                  reuse_projections: bool = True, points_per_step: int = 0) -> Callable:
    """The jitted, sharded per-chunk computation (cached per static configuration);
    points_per_step 0 = auto for the mesh's platform (`default_points_per_step`)."""
    width = points_per_step or default_points_per_step(mesh.devices.flat[0].platform)
    return jit_chunk(chunk_computation(block, with_metrics, reuse_projections, width), mesh)


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


@dataclasses.dataclass(frozen=True)
class ChunkProgress:
    index: int          # 1-based
    total: int
    seeds: tuple[int, int]        # [first, last] seed of the chunk
    bias_norms: tuple[float, float]  # [first, last] real s of the chunk
    seconds: float


def place(tree: Any, sharding: NamedSharding) -> Any:
    """Host values → global arrays with `sharding` (works across hosts: every process passes the
    same values and each fills its own devices). Chunk functions are traced for inputs placed
    like this: call them with placed inputs (as `run_sweep` does) to reuse one trace."""
    def put(a):
        a = np.asarray(a)
        return jax.make_array_from_callback(a.shape, sharding, lambda index: a[index])
    return jax.tree.map(put, tree)


def _fetch(tree: Any) -> Any:
    """Device arrays → numpy, gathering the shards of other hosts when there are several."""
    def fetch(a):
        if getattr(a, "is_fully_addressable", True):
            return np.asarray(a)
        from jax.experimental import multihost_utils
        return np.asarray(multihost_utils.process_allgather(a, tiled=True))
    return jax.tree.map(fetch, tree)


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
                f"float32 activations overflow for bias norms this large")


def run_sweep(config: SweepConfig, *, mesh: Mesh | None = None, chunk_fn: Callable | None = None,
              with_metrics: bool = True,
              progress: Callable[[ChunkProgress], None] | None = None) -> SweepResult:
    """Runs the whole (seed × s) grid chunk by chunk; see the module docstring.

    Args:
      config: the sweep.
      mesh: devices to shard the s axis over (default `grid_mesh()`: all visible devices).
      chunk_fn: a prebuilt jitted chunk function (default `make_chunk_fn(config.block, mesh,
        with_metrics)`, cached, so repeated sweeps of the same shapes compile once).
      with_metrics: False runs the bare forward (benchmarks); per_seed then holds
        "output_checksum".
      progress: called after every chunk with a `ChunkProgress`.
    Raises:
      FloatingPointError: a metric is not finite (names the metric, s and seed).
    """
    mesh = grid_mesh() if mesh is None else mesh
    num_devices = mesh.size
    fn = (make_chunk_fn(config.block, mesh, with_metrics, config.reuse_projections,
                        config.points_per_step) if chunk_fn is None else chunk_fn)
    norms = np.asarray(config.bias_norms, np.float32)
    num_bias, num_seeds = len(norms), config.num_seeds
    layout = chunk_layout(num_seeds, num_bias, config.chunk_size, num_devices)
    replicated = NamedSharding(mesh, P())
    grid_sharding = NamedSharding(mesh, P(GRID_AXIS))

    start = time.perf_counter()
    state = _fetch(init_seeds(config))  # host copies: placed per seed block below
    per_seed: dict[str, np.ndarray] = {}
    per_head: dict[str, np.ndarray] = {}
    first_chunk_seconds = 0.0
    index = 0
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
            out = _fetch(fn(params, z, u, place(s_chunk, grid_sharding)))
            out = {k: v[: len(real_seeds), : hi - lo] for k, v in out.items()}
            _check_finite(out, real_seeds, norms[lo:hi], config.block)
            for name, values in out.items():
                target = per_head if name.startswith("per_head/") else per_seed
                key = name.removeprefix("per_head/")
                if key not in target:
                    target[key] = np.zeros((num_seeds, num_bias) + values.shape[2:], values.dtype)
                target[key][real_seeds[0]: real_seeds[-1] + 1, lo:hi] = values
            index += 1
            seconds = time.perf_counter() - t0
            if index == 1:
                first_chunk_seconds = seconds
            if progress is not None:
                progress(ChunkProgress(index, layout.num_chunks,
                                       (int(real_seeds[0]), int(real_seeds[-1])),
                                       (float(norms[lo]), float(norms[hi - 1])), seconds))
    return SweepResult(config=config, bias_norms=np.asarray(config.bias_norms, np.float64),
                       per_seed=per_seed, per_head=per_head, layout=layout,
                       num_devices=num_devices, seconds=time.perf_counter() - start,
                       first_chunk_seconds=first_chunk_seconds)


# --------------------------------------------------------------------------------------------
# Summaries and closed forms

def summarize(per_seed: Mapping[str, np.ndarray]) -> dict[str, dict[str, list]]:
    """{name: {"mean": [per s], "std": [per s], "per_seed": [[per s] per seed]}} (results
    contract). std is the sample standard deviation over seeds (ddof=1), 0 with one seed."""
    out = {}
    for name, values in per_seed.items():
        values = np.asarray(values, np.float64)
        std = values.std(axis=0, ddof=1) if values.shape[0] > 1 else np.zeros(values.shape[1])
        out[name] = {"mean": values.mean(axis=0).tolist(), "std": std.tolist(),
                     "per_seed": values.tolist()}
    return out


def kernel_variance(block: BlockConfig) -> float:
    """σ_w² of the D → D kernels (q, k, v, out) under the configured init."""
    if block.init == "bert":
        return block.init_std ** 2
    return 1.0 / block.d_model  # lecun: 1/fan_in; xavier: 2/(fan_in + fan_out) = 1/D for D → D


def closed_forms(config: SweepConfig, bias_norms: Any) -> dict[str, dict[str, Any]]:
    """SCIENCE.md closed forms evaluated on the grid: {metric: {"formula", "predicted" [per s]}}.

    F1 input cosine s²/(s² + d); F2 query norm σ_w √(d·Dh) √(1 + s²/d); F3 attention entropy at
    s = 0, ln L − ½ v (L−1)/L with logit variance v = (σ_w² d)² / τ² (sample variance over L keys);
    F4 attention-output cross-sequence cosine s²/(s² + d/L) (assumes near-uniform attention);
    post-LN output norm √d. F2–F4 assume the plain softmax attention with zero linear biases;
    F3 and F4 also a non-causal block.
    """
    block = config.block
    s = np.asarray(bias_norms, np.float64)
    d, dh, seq_len = block.d_model, block.d_head, config.seq_len
    var_w = kernel_variance(block)
    forms: dict[str, dict[str, Any]] = {
        "input_cosine": {"formula": "F1: s^2/(s^2+d)", "predicted": s ** 2 / (s ** 2 + d)},
    }
    if block.attention == "softmax":
        # Pre-LN feeds LN(x) ≈ (z + s·u)/√(1 + s²/d) to the projections: its norm stays ≈ √d.
        growth = np.ones_like(s) if block.norm_position == "pre" else np.sqrt(1 + s ** 2 / d)
        forms["query_norm"] = {"formula": "F2 (pre-LN: LN(x) has norm sqrt(d)): "
                               "sigma_w*sqrt(d*d_head)" if block.norm_position == "pre" else
                               "F2: sigma_w*sqrt(d*d_head)*sqrt(1+s^2/d)",
                               "predicted": math.sqrt(var_w * d * dh) * growth}
    if block.attention == "softmax" and not block.causal:  # F3, F4: every query sees all L keys
        v = (var_w * d) ** 2 / block.logit_temperature ** 2
        entropy0 = math.log(seq_len) - 0.5 * v * (seq_len - 1) / seq_len
        forms["attention_entropy"] = {
            "formula": "F3 (s=0 only): ln L - (sigma_w^2 d / tau)^2 (L-1)/(2L)",
            "predicted": np.where(s == 0, entropy0, np.nan)}
        forms["attention_output_cross_sequence_cosine"] = {
            "formula": "F4 (near-uniform attention): s^2/(s^2+d/L)",
            "predicted": s ** 2 / (s ** 2 + d / seq_len)}
    if block.norm_position == "post":
        forms["output_norm"] = {"formula": "post-LN: sqrt(d)",
                                "predicted": np.full_like(s, math.sqrt(d))}
    return forms


def compare_with_closed_forms(config: SweepConfig, bias_norms: Any,
                              per_seed: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """For each closed form: predicted, measured mean over seeds, and the largest |deviation|
    (absolute and relative) over the s where a prediction exists."""
    out = {}
    for name, form in closed_forms(config, bias_norms).items():
        if name not in per_seed:
            continue
        predicted = np.asarray(form["predicted"], np.float64)
        measured = np.asarray(per_seed[name], np.float64).mean(axis=0)
        where = np.isfinite(predicted)
        dev = np.abs(measured - predicted)[where]
        big = np.abs(predicted[where]) >= 0.1  # relative deviations only where they mean something
        rel = dev[big] / np.abs(predicted[where][big])
        worst = int(np.flatnonzero(where)[np.argmax(dev)]) if dev.size else None
        out[name] = {"formula": form["formula"], "predicted": predicted.tolist(),
                     "measured": measured.tolist(),
                     "max_abs_deviation": float(dev.max()) if dev.size else None,
                     "max_rel_deviation": float(rel.max()) if rel.size else None,
                     "worst_s": float(np.asarray(bias_norms)[worst]) if worst is not None
                     else None}
    return out


TREND_METRICS = ("attention_entropy_normalized", "attention_max", "output_cosine",
                 "output_cross_sequence_cosine", "mean_query_key_abs_cosine")


def trends(bias_norms: Any, per_seed: Mapping[str, np.ndarray],
           names: tuple[str, ...] = TREND_METRICS) -> dict[str, dict[str, Any]]:
    """How each metric's mean over seeds moves from the smallest to the largest s: its first and
    last values, "rises" | "falls" | "flat" (|change| < 1e-3), and the fraction of consecutive
    steps of s that move in that direction (1.0 = monotone). SCIENCE.md F5 predicts that the
    normalised entropy falls with post-LN and rises with pre-LN."""
    order = np.argsort(np.asarray(bias_norms, np.float64), kind="stable")
    out = {}
    for name in names:
        if name not in per_seed:
            continue
        mean = np.asarray(per_seed[name], np.float64).mean(axis=0)[order]
        change = mean[-1] - mean[0]
        direction = "flat" if abs(change) < 1e-3 else ("rises" if change > 0 else "falls")
        steps = np.diff(mean)
        if direction == "flat" or steps.size == 0:
            fraction = 1.0
        else:
            fraction = float(np.mean(np.sign(steps) == np.sign(change)))
        out[name] = {"first": float(mean[0]), "last": float(mean[-1]), "direction": direction,
                     "fraction_of_steps_in_direction": fraction}
    return out
