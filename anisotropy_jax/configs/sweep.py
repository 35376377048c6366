"""Config of the untrained-block bias sweep (docs/SCIENCE.md "The untrained-block experiment").

Run (default = the docs/SCIENCE.md protocol: one BERT-base post-LN layer at N(0, 0.02²) init, B = 16,
L = 128, 3 seeds, s = 0 and 2^-2 … 2^12 in half-octave steps):

  anisotropy-jax sweep --workdir=runs/bias_sweep
  python experiments/sweep.py --config=sweep --workdir=runs/bias_sweep

Variants (`--config=sweep:VARIANT`, or `--config=sweep:VARIANT`):
  smoke           tiny block and grid, for CI (seconds)
  pre_ln          GPT-2-style pre-LN layer (LayerNorm eps 1e-5)
  lecun           Flax's default lecun_normal init instead of N(0, 0.02²)
  attention_only  the attention sublayer alone (post-LN, no MLP)
  post_vs_pre     post-LN and pre-LN into shared figures (compare_field = norm_position)
  init_std        N(0, σ²) for σ in 0.01, 0.02, 0.05 into shared figures
  temperature     logit temperature τ in 0.5, 1, 2 into shared figures
  dense_1024      1,024 bias norms (0 and 1,023 log-spaced in [2^-2, 2^12]), B = 32, 1 seed:
                  the memory check (chunk_size bounds the points in flight)
  control         biased inputs x = z + s·u and the norm-matched control x = z·√(1 + s²/d) into
                  shared figures (compare_field = inputs; same weights, seeds and grid)
  fixed_norm      biased inputs and the fixed-norm control x = (z + s·u)/√(1 + s²/d) (the shared
                  direction without the norm growth), shared figures
  per_sequence    biased inputs and the per-sequence control x_b = z_b + s·u_b (one direction per
                  sequence: shared within a sequence only), shared figures
  controls        all four side by side: biased, norm_matched, fixed_norm, per_sequence
                  (docs/SWEEP.md "The controls"; `:pre_ln+controls` for the pre-LN block)
  normalizations  every attention normalisation (softmax, off_by_one, sigmoid, softpick,
                  clipped_softmax) and softmax with the head-wise output gate, each on the biased
                  inputs and the norm-matched control (12 sweeps, same weights, seeds and grid),
                  with the attention mass, sink rate and no-op score (docs/SWEEP.md
                  "Softmax alternatives at init"; `:smoke+normalizations` for CI)
Variants combine with '+', e.g. `:smoke+post_vs_pre`. Any field can be overridden on the command
line, e.g. `--config.num_seeds=5 --config.model.init_std=0.05 --config.chunk_size=4`.
Fields, defaults and their meaning: SweepConfig and BlockConfig (`model`) in anisotropy_jax/config
(`sweep_config_dict`: top-level `precision`, `compare_field`, `compare_values`);
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
from anisotropy_jax.config.defaults import block_form

# The settings: each field, its meaning and its check.
# s = 0 plus 2^-2 … 2^12 in half-octave steps (29 values): from "no bias" through s² ≈ d (s ≈ 28 for
# BERT-base, where F1 crosses 1/2) to far beyond 1,024.
DEFAULT_BIAS_NORMS: tuple[float, ...] = (0.0,) + tuple(2.0 ** (k / 2) for k in range(-4, 25))
# x = z + s·u (the experiment) | x = z·√(1 + s²/d) (the norm-matched control: same expected norm,
# no common direction; docs/SCIENCE.md "The control") | x = (z + s·u)/√(1 + s²/d) (the shared
# direction without the norm growth) | x_b = z_b + s·u_b (one direction per sequence: shared
# within a sequence only). docs/SWEEP.md "The controls".
INPUTS = ("biased", "norm_matched", "fixed_norm", "per_sequence")
# Sweep (not model) fields that `compare_field` may vary: the compared sweeps keep weights, seeds
# and grid.
COMPARABLE_SWEEP_FIELDS = ("inputs",)
# The BlockConfig fields of the experiment form's `model` (anisotropy_jax/configs/sweep.py;
# `precision` is top level there). Others may be added to BlockConfig without joining the form.
SWEEP_MODEL_FIELDS = ("d_model", "num_heads", "d_ff", "norm_position", "init", "init_std",
                      "layer_norm_eps", "attention", "logit_temperature", "causal", "use_mlp",
                      "use_bias", "attention_impl")


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
      block: the block (its `precision` is the sweep's matmul precision).
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

    block: BlockConfig = BlockConfig()
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
        require(isinstance(self.block, BlockConfig), "model",
                f"expected a BlockConfig, got {type(self.block).__name__}")
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
        return self.sink_metrics or self.block.attention_normalization != "softmax"

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
    """SweepConfig's defaults in the experiment form that `sweep_configs_from_mapping` reads
    (anisotropy_jax/configs/sweep.py starts from it): SweepConfig's fields, `model` = the
    block's SWEEP_MODEL_FIELDS, and at top level

      precision: the block's matmul precision, 'highest' | 'default' | 'bfloat16'.
      compare_field: '' (one sweep), or a model field or one of COMPARABLE_SWEEP_FIELDS
        ('inputs') to vary into shared figures: one sweep per value of compare_values; or
        several such fields joined by ',' (e.g. 'attention_normalization,inputs').
      compare_values: the values of compare_field, one sweep each (same weights, seeds and grid
        for every value); with several fields, one tuple of values (in field order) per sweep.
    """
    out = block_form(SweepConfig(), SWEEP_MODEL_FIELDS)
    out.compare_field, out.compare_values = "", ()
    return out


def sweep_configs_from_mapping(fields: Mapping[str, Any]) -> list[tuple[str, SweepConfig]]:
    """Validates an experiment config (e.g. an ml_collections ConfigDict) into typed sweeps.

    The experiment form has `model` (the block), a top-level `precision`, and optionally
    `compare_field` / `compare_values`. Returns [(label, SweepConfig)]: one sweep, or one per
    entry of `compare_values` when `compare_field` names a model field or one of
    `COMPARABLE_SWEEP_FIELDS` (labels "field=value", or "f1=v1, f2=v2" with several fields
    joined by ','; the sweeps share seeds and grid). Every
    error is a one-line `ConfigError` naming the field.
    """
    rest = dict(fields.to_dict() if hasattr(fields, "to_dict") else fields)
    model_fields = dict(rest.pop("model", {}))
    require("precision" not in model_fields, "model.precision",
            "set the top-level `precision` instead")
    if "precision" in rest:
        model_fields["precision"] = rest.pop("precision")
    compare_field = rest.pop("compare_field", "") or ""
    compare_values = tuple(rest.pop("compare_values", ()) or ())
    block = from_mapping(BlockConfig, model_fields, "model.")
    if "block" in rest:
        raise ConfigError("block: unknown field; the block's fields go under `model`")
    if "bias_norms" in rest:
        rest["bias_norms"] = _as_bias_norms(rest["bias_norms"])
    base = from_mapping(SweepConfig, rest, block=block)
    if not compare_field:
        require(not compare_values, "compare_values",
                "set compare_field to the model field they vary")
        return [(default_label(block), base)]
    known = {f.name for f in dataclasses.fields(BlockConfig)} - {"precision"}
    fields = [name.strip() for name in compare_field.split(",")]
    for name in fields:
        require(name in known | set(COMPARABLE_SWEEP_FIELDS), "compare_field",
                f"{name!r} is not a model field or one of {COMPARABLE_SWEEP_FIELDS}; "
                f"choose one of {sorted(known) + list(COMPARABLE_SWEEP_FIELDS)}")
    require(len(compare_values) >= 1, "compare_values", "give at least one value of compare_field")
    sweeps = []
    for value in compare_values:
        values = (tuple(value) if len(fields) > 1 and isinstance(value, (tuple, list))
                  else (value,))
        require(len(values) == len(fields), "compare_values",
                f"{value!r} does not give one value for each of {fields}")
        sweep_changes = {f: v for f, v in zip(fields, values) if f in COMPARABLE_SWEEP_FIELDS}
        model_changes = {f: v for f, v in zip(fields, values) if f not in sweep_changes}
        try:
            sweep = base.replace(block=block.replace(**model_changes), **sweep_changes)
        except ConfigError as err:
            raise ConfigError(f"compare_values: {err}") from None
        sweeps.append((", ".join(f"{f}={v}" for f, v in zip(fields, values)), sweep))
    labels = [label for label, _ in sweeps]
    require(len(set(labels)) == len(labels), "compare_values",
            f"repeated values {list(compare_values)}")
    return sweeps


# The named variants (`--config=sweep:VARIANT`).
# Every inputs kind, the biased inputs first (config/sweep.py INPUTS).
CONTROLS = ("biased", "norm_matched", "fixed_norm", "per_sequence")
# The normalisations side by side (models/attention.py NORMALIZATIONS; the gate with softmax),
# each on the biased inputs and the norm-matched control.
NORMALIZATION_RUNS = tuple((name, gate, kind) for name, gate in (
    ("softmax", False), ("off_by_one", False), ("sigmoid", False), ("softpick", False),
    ("clipped_softmax", False), ("softmax", True)) for kind in ("biased", "norm_matched"))
DENSE_1024_BIAS_NORMS = (0.0,) + tuple(2.0 ** (-2 + 14 * k / 1022) for k in range(1023))
# The fields each variant sets (`with_variants`; a nested one by its dotted path).
SETTINGS = {
    "smoke": {"model.d_model": 64, "model.num_heads": 4, "model.d_ff": 128, "batch_size": 4,
              "seq_len": 16, "num_seeds": 2,
              "bias_norms": (0.0, 1.0, 4.0, 16.0, 64.0, 256.0, 1024.0), "chunk_size": 8},
    "pre_ln": {"model.norm_position": "pre", "model.layer_norm_eps": 1e-5},
    "lecun": {"model.init": "lecun"},
    "attention_only": {"model.use_mlp": False},
    "post_vs_pre": {"compare_field": "norm_position", "compare_values": ("post", "pre")},
    "init_std": {"compare_field": "init_std", "compare_values": (0.01, 0.02, 0.05)},
    "temperature": {"compare_field": "logit_temperature", "compare_values": (0.5, 1.0, 2.0)},
    "dense_1024": {"bias_norms": DENSE_1024_BIAS_NORMS, "batch_size": 32, "num_seeds": 1},
    "control": {"compare_field": "inputs", "compare_values": ("biased", "norm_matched")},
    "fixed_norm": {"compare_field": "inputs", "compare_values": ("biased", "fixed_norm")},
    "per_sequence": {"compare_field": "inputs", "compare_values": ("biased", "per_sequence")},
    "controls": {"compare_field": "inputs", "compare_values": CONTROLS},
    "normalizations": {"compare_field": "attention_normalization,attention_output_gate,inputs",
                       "compare_values": NORMALIZATION_RUNS, "sink_metrics": True},
}
VARIANTS = tuple(SETTINGS)

# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": (SweepConfig, sweep_config_dict), "model": BlockConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """SweepConfig's defaults and fields (anisotropy_jax/config), then the variants of `arg`."""
    return with_variants(sweep_config_dict(), arg, VARIANTS, SETTINGS, combine=True)
