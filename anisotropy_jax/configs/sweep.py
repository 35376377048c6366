"""Config of the untrained-block bias sweep (docs/SCIENCE.md "The untrained-block experiment").

Run (default = the docs/SCIENCE.md protocol: one BERT-base post-LN layer at N(0, 0.02²) init, B = 16,
L = 128, 3 seeds, s = 0 and 2^-2 … 2^12 in half-octave steps):

  anisotropy-jax sweep --workdir=runs/bias_sweep
  python experiments/sweep.py --config=sweep --workdir=runs/bias_sweep

Variants (`--config=sweep:VARIANT` or `anisotropy_jax/configs/sweep.py:VARIANT`):
  smoke           tiny block and grid, for CI (seconds)
  pre_ln          GPT-2-style pre-LN layer (LayerNorm eps 1e-5)
  lecun           Flax's default lecun_normal init instead of N(0, 0.02²)
  attention_only  the attention sublayer alone (post-LN, no MLP)
  post_vs_pre     post-LN and pre-LN into shared figures (compare_fields = model.norm_position)
  init_std        N(0, σ²) for σ in 0.01, 0.02, 0.05 into shared figures
  temperature     logit temperature τ in 0.5, 1, 2 into shared figures
  dense_1024      1,024 bias norms (0 and 1,023 log-spaced in [2^-2, 2^12]), B = 32, 1 seed:
                  the memory check (chunk_size bounds the points in flight)
  control         biased inputs x = z + s·u and the norm-matched control x = z·√(1 + s²/d) into
                  shared figures (compare_fields = inputs; same weights, seeds and grid)
  fixed_norm      biased inputs and the fixed-norm control x = (z + s·u)/√(1 + s²/d) (the shared
                  direction without the norm growth), shared figures
  per_sequence    biased inputs and the per-sequence control x_b = z_b + s·u_b (one direction per
                  sequence: shared within a sequence only), shared figures
  controls        all four side by side: biased, norm_matched, fixed_norm, per_sequence
                  (docs/SWEEP.md "The controls"; `:pre_ln+controls` for the pre-LN block)
  normalizations  the attention normalisations softmax, off_by_one, sigmoid_per_query_bias
                  (σ(ℓ − ln n), n the query's visible keys: the runs committed under
                  docs/results/sweep/normalizations; not the scalar-bias 'sigmoid'), softpick,
                  clipped_softmax and softmax with the head-wise output gate, each on the biased
                  inputs and the norm-matched control (12 sweeps, same weights, seeds and grid),
                  with the attention mass, sink rate and no-op score (docs/SWEEP.md
                  "Softmax alternatives at init"; `:smoke+normalizations` for CI)
Variants combine with '+', e.g. `:pre_ln+controls`; smoke applies last wherever it stands, so
`:X+smoke` (= `:smoke+X`) is X on the smoke block and grid (`:dense_1024+smoke` is smoke). Any
field can be overridden on the command line at its dataclass path, e.g. `--config.num_seeds=5
--config.model.init_std=0.05 --config.model.precision=default --config.chunk_size=4`, or
`--config.compare_fields='("model.init",)' --config.compare_values='("bert", "lecun")'`.
Fields, defaults and their meaning: SweepConfig (below) and BlockConfig (`model`, in
anisotropy_jax/config); `sweep_config_dict` adds `compare_fields`, `compare_values`;
`anisotropy-jax sweep --help` lists them.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import ml_collections
import numpy as np

from anisotropy_jax.config import BlockConfig, with_variants
from anisotropy_jax.config.base import ConfigError, from_mapping, require, require_bool, require_choice, require_int
from anisotropy_jax.config.defaults import config_dict, field_names

# The settings: each field, its meaning and its check.
# s = 0 plus 2^-2 … 2^12 in half-octave steps (29 values): from "no bias" through s² ≈ d (s ≈ 28 for
# BERT-base, where F1 crosses 1/2) to far beyond 1,024.
DEFAULT_BIAS_NORMS: tuple[float, ...] = (0.0,) + tuple(2.0 ** (k / 2) for k in range(-4, 25))
# x = z + s·u (the experiment) | x = z·√(1 + s²/d) (the norm-matched control: same expected norm,
# no common direction; docs/SCIENCE.md "The control") | x = (z + s·u)/√(1 + s²/d) (the shared
# direction without the norm growth) | x_b = z_b + s·u_b (one direction per sequence: shared
# within a sequence only). docs/SWEEP.md "The controls".
INPUTS = ("biased", "norm_matched", "fixed_norm", "per_sequence")
# Sweep (not model) fields that `compare_fields` may vary besides the block's (`model.NAME`): the
# compared sweeps keep weights, seeds and grid.
COMPARABLE_SWEEP_FIELDS = ("inputs",)


def _as_bias_norms(value: Any) -> tuple[float, ...]:
    """A non-empty tuple of finite floats ≥ 0 (ConfigError naming `bias_norms` otherwise)."""
    require(not isinstance(value, (str, bytes)) and hasattr(value, "__iter__"), "bias_norms",
            f"must be a non-empty sequence of numbers, got {value!r}")
    out = []
    for s in value:
        require(not isinstance(s, bool)
                and isinstance(s, (int, float, np.integer, np.floating)), "bias_norms",
                f"{s!r} is not a number")
        require(math.isfinite(s), "bias_norms", f"{s!r} is not finite")
        require(s >= 0, "bias_norms", f"{s!r} is negative (a bias norm is ≥ 0)")
        out.append(float(s))
    require(len(out) > 0, "bias_norms", "must be a non-empty sequence of numbers, got ()")
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """A bias sweep: the block, the inputs, the grid and how it is chunked.

    Attributes:
      model: the block (its `precision` is the sweep's matmul precision).
      batch_size: B sequences per grid point.
      seq_len: L tokens per sequence (≥ 2: attention needs a choice).
      bias_norms: the swept s values (finite, ≥ 0), in the order reported.
      inputs: 'biased' (x = z + s·u), 'norm_matched' (x = z·√(1 + s²/d), the control: the
        same expected norm ‖x‖² ≈ d + s² without a common direction), 'fixed_norm'
        (x = (z + s·u)/√(1 + s²/d): the common direction at the unbiased norm ‖x‖² ≈ d) or
        'per_sequence' (x_b = z_b + s·u_b with an independent direction u_b per sequence, drawn
        once per seed: shared within a sequence, not across sequences).
      num_seeds: independent draws of (weights, z, u and the per-sequence u_b); every s of a
        seed shares them, and so does every `inputs` kind of the same seed.
      seed: base PRNG seed; seed i uses fold_in(key(seed), i).
      chunk_size: grid points (seed × s) in flight at once over all devices; 0 = the whole grid.
        The s-block of a chunk is rounded up to a multiple of the device count.
      reuse_projections: compute each seed's attention input projection z·W, u·W once per chunk
        and assemble z·W + s·(u·W) + b per point (same function, a quarter fewer FLOPs for
        BERT-base; post-LN and no-LN blocks only, ignored for pre-LN). False runs the block
        literally on x. Both agree within float32 rounding (tests/test_sweep.py). For
        'norm_matched' inputs the projection is c·(z·W) + b with c = √(1 + s²/d), for
        'fixed_norm' (z·W + s·(u·W))/c + b, for 'per_sequence' z_b·W + s·(u_b·W) + b.
      points_per_step: bias norms of a seed evaluated at once (vmapped) inside a chunk, the rest
        in a loop on the device; 0 = auto (1 on the CPU, the whole chunk on accelerators). Same
        values either way; only speed and memory change.
      sink_metrics: also report the attention mass Σ_k w_qk (1 by definition for softmax), Gu et
        al.'s sink rate (share of (sequence, head) pairs whose mean weight on key 0 exceeds 0.3)
        and the no-op score α_0·‖v_0‖/mean‖v‖ at every s (studies/sweep/points.py SINK_METRICS);
        on by itself for an attention_normalization other than softmax.
    """

    model: BlockConfig = BlockConfig()
    batch_size: int = 16
    seq_len: int = 128
    bias_norms: tuple[float, ...] = DEFAULT_BIAS_NORMS
    inputs: str = "biased"
    num_seeds: int = 3
    seed: int = 0
    chunk_size: int = 8
    reuse_projections: bool = True
    points_per_step: int = 0
    sink_metrics: bool = False

    def __post_init__(self):
        require(isinstance(self.model, BlockConfig), "model",
                f"expected a BlockConfig, got {type(self.model).__name__}")
        for name, minimum in (("batch_size", 1), ("seq_len", 2), ("num_seeds", 1), ("seed", 0),
                              ("chunk_size", 0), ("points_per_step", 0)):
            require_int(getattr(self, name), name, minimum)
        require_bool(self.reuse_projections, "reuse_projections")
        require_bool(self.sink_metrics, "sink_metrics")
        require_choice(self.inputs, "inputs", INPUTS, "inputs")
        require(isinstance(self.bias_norms, tuple), "bias_norms",
                f"must be a non-empty tuple of floats, got {self.bias_norms!r}")
        object.__setattr__(self, "bias_norms", _as_bias_norms(self.bias_norms))

    @property
    def reports_sink_metrics(self) -> bool:
        """`sink_metrics`, or a normalisation whose weights need not sum to one."""
        return self.sink_metrics or self.model.attention_normalization != "softmax"

    @property
    def num_points(self) -> int:
        return self.num_seeds * len(self.bias_norms)

    def replace(self, **changes: Any) -> "SweepConfig":
        return dataclasses.replace(self, **changes)


def default_label(block: BlockConfig) -> str:
    """A short name of a sweep's block: "post-LN, init=bert(0.02)" and the like."""
    parts = [f"{block.norm_position}-LN" if block.norm_position != "none" else "no LN",
             f"init={block.init}" + (f"({block.init_std:g})" if block.init == "bert" else "")]
    if not block.use_mlp:
        parts.append("attention only")
    return ", ".join(parts)


def sweep_config_dict() -> ml_collections.ConfigDict:
    """SweepConfig's defaults as the experiment form that `sweep_configs_from_mapping` reads
    (anisotropy_jax/configs/sweep.py starts from it): every SweepConfig field at its dataclass
    path (the block's under `model`, its `precision` included), and

      compare_fields: () (one sweep), or the dataclass paths of the fields to vary into shared
        figures, one sweep per entry of compare_values: block fields ('model.norm_position')
        and COMPARABLE_SWEEP_FIELDS ('inputs').
      compare_values: one value per sweep (same weights, seeds and grid for every value): with
        one field the value itself, with several a tuple of values in field order.
    """
    out = config_dict(SweepConfig)
    out.compare_fields, out.compare_values = (), ()
    return out


def _compare_fields(value: Any) -> tuple[str, ...]:
    """`compare_fields` as a tuple of valid dataclass paths (one-line ConfigError otherwise)."""
    choices = [f"model.{name}" for name in field_names(BlockConfig)] + list(
        COMPARABLE_SWEEP_FIELDS)
    require(isinstance(value, (tuple, list)) and all(isinstance(v, str) for v in value),
            "compare_fields", f"must be a tuple of field paths such as ('model.norm_position',), "
            f"got {value!r}")
    for path in value:
        require(path in choices, "compare_fields",
                f"{path!r} is not a block field (model.NAME) or one of "
                f"{COMPARABLE_SWEEP_FIELDS}; choose from {choices}")
    require(len(set(value)) == len(value), "compare_fields", f"repeated paths {tuple(value)}")
    return tuple(value)


def sweep_configs_from_mapping(fields: Mapping[str, Any]) -> list[tuple[str, SweepConfig]]:
    """Validates an experiment config (e.g. an ml_collections ConfigDict) into typed sweeps.

    The experiment form is SweepConfig's (`model` the block), and optionally `compare_fields` /
    `compare_values`. Returns [(label, SweepConfig)]: one sweep, or one per entry of
    `compare_values` (labels "name=value", or "n1=v1, n2=v2" with several fields, each name the
    last component of its path; the sweeps share seeds and grid). A recorded config of the
    older form is read too (`upgrade_recorded`). Every error is a one-line `ConfigError`
    naming the field.
    """
    rest = upgrade_recorded(fields)
    paths = _compare_fields(rest.pop("compare_fields", ()) or ())
    compare_values = tuple(rest.pop("compare_values", ()) or ())
    if "bias_norms" in rest:
        rest["bias_norms"] = _as_bias_norms(rest["bias_norms"])
    base = from_mapping(SweepConfig, rest)
    if not paths:
        require(not compare_values, "compare_values",
                "set compare_fields to the fields they vary")
        return [(default_label(base.model), base)]
    require(len(compare_values) >= 1, "compare_values",
            "give at least one value of compare_fields")
    names = [path.rsplit(".", 1)[-1] for path in paths]
    sweeps = []
    for value in compare_values:
        values = (tuple(value) if len(paths) > 1 and isinstance(value, (tuple, list))
                  else (value,))
        require(len(values) == len(paths), "compare_values",
                f"{value!r} does not give one value for each of {paths}")
        sweep_changes = {p: v for p, v in zip(paths, values) if p in COMPARABLE_SWEEP_FIELDS}
        model_changes = {p.split(".", 1)[1]: v for p, v in zip(paths, values)
                         if p not in sweep_changes}
        try:
            sweep = base.replace(model=base.model.replace(**model_changes), **sweep_changes)
        except ConfigError as err:
            raise ConfigError(f"compare_values: {err}") from None
        sweeps.append((", ".join(f"{n}={v}" for n, v in zip(names, values)), sweep))
    labels = [label for label, _ in sweeps]
    require(len(set(labels)) == len(labels), "compare_values",
            f"repeated values {list(compare_values)}")
    return sweeps


def upgrade_recorded(config: Any) -> dict[str, Any]:
    """A recorded sweep or depth config (results.json "config", config.json, a run's
    "sweep_config" / "depth_config", a report's stamps) in the current form, as a plain dict;
    one of the current form is returned as it is. The older forms:

      the experiment form before the command line equalled the dataclass: `model` without
        `precision`, the block's `precision` at top level, and (sweep) `compare_field`, field
        names joined by ',' (-> `compare_fields`, their dataclass paths);
      the dataclass itself before its block field was named `model`: `block`;
      a `model` recorded before a block field was added (e.g. `norm_gain`): the field at its
        BlockConfig default, as `from_mapping` reads it.
    """
    out = dict(config.to_dict() if hasattr(config, "to_dict") else config)
    if "block" in out and "model" not in out:
        out["model"] = out.pop("block")
    if "precision" in out:
        model = dict(out.get("model") or {})
        require("precision" not in model, "precision",
                "the block's precision is `model.precision`")
        model["precision"] = out.pop("precision")
        out["model"] = model
    if "compare_field" in out:
        require("compare_fields" not in out, "compare_field", "use compare_fields alone")
        old = out.pop("compare_field") or ""
        names = [name.strip() for name in old.split(",")] if old else []
        out["compare_fields"] = tuple(
            name if name in COMPARABLE_SWEEP_FIELDS else f"model.{name}" for name in names)
    if isinstance(out.get("model"), Mapping):
        out["model"] = {**{f.name: f.default for f in dataclasses.fields(BlockConfig)},
                        **out["model"]}
    return out


# The named variants (`--config=sweep:VARIANT`).
# Every inputs kind, the biased inputs first (config/sweep.py INPUTS).
CONTROLS = ("biased", "norm_matched", "fixed_norm", "per_sequence")
# The normalisations side by side (models/attention.py NORMALIZATIONS; the gate with softmax),
# each on the biased inputs and the norm-matched control.
NORMALIZATION_RUNS = tuple((name, gate, kind) for name, gate in (
    ("softmax", False), ("off_by_one", False), ("sigmoid_per_query_bias", False),
    ("softpick", False), ("clipped_softmax", False), ("softmax", True))
    for kind in ("biased", "norm_matched"))
DENSE_1024_BIAS_NORMS = (0.0,) + tuple(2.0 ** (-2 + 14 * k / 1022) for k in range(1023))
# The fields each variant sets (`with_variants`; a nested one by its dotted path).
SETTINGS = {
    "smoke": {"model.d_model": 64, "model.num_heads": 4, "model.d_ff": 128, "batch_size": 4,
              "seq_len": 16, "num_seeds": 2,
              "bias_norms": (0.0, 1.0, 4.0, 16.0, 64.0, 256.0, 1024.0), "chunk_size": 8},
    "pre_ln": {"model.norm_position": "pre", "model.layer_norm_eps": 1e-5},
    "lecun": {"model.init": "lecun"},
    "attention_only": {"model.use_mlp": False},
    "post_vs_pre": {"compare_fields": ("model.norm_position",), "compare_values": ("post", "pre")},
    "init_std": {"compare_fields": ("model.init_std",), "compare_values": (0.01, 0.02, 0.05)},
    "temperature": {"compare_fields": ("model.logit_temperature",),
                    "compare_values": (0.5, 1.0, 2.0)},
    "dense_1024": {"bias_norms": DENSE_1024_BIAS_NORMS, "batch_size": 32, "num_seeds": 1},
    "control": {"compare_fields": ("inputs",), "compare_values": ("biased", "norm_matched")},
    "fixed_norm": {"compare_fields": ("inputs",), "compare_values": ("biased", "fixed_norm")},
    "per_sequence": {"compare_fields": ("inputs",), "compare_values": ("biased", "per_sequence")},
    "controls": {"compare_fields": ("inputs",), "compare_values": CONTROLS},
    "normalizations": {"compare_fields": ("model.attention_normalization",
                                          "model.attention_output_gate", "inputs"),
                       "compare_values": NORMALIZATION_RUNS, "sink_metrics": True},
}
VARIANTS = tuple(SETTINGS)

# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": (SweepConfig, sweep_config_dict), "model": BlockConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """SweepConfig's defaults and fields (anisotropy_jax/config), then the variants of `arg`."""
    return with_variants(sweep_config_dict(), arg, VARIANTS, SETTINGS)
