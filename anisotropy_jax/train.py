"""Training small byte-level LMs from scratch, with every log-spaced step checkpointed (layer 6).

Two models from the existing block (`model.Transformer`):
  mlm  BERT-style post-LN encoder (embedding LayerNorm, no final LayerNorm), masked-LM loss on the
       15% selected positions (80/10/10 mask/random/keep, `data.mlm_mask`).
  clm  GPT-style pre-LN causal LM with a final LayerNorm, next-byte loss on every position.
Both: learned position embeddings, tied or untied output embedding (`model.tie_embeddings`).

Optimiser: AdamW (weight decay on kernels and embeddings, ndim ≥ 2), linear warmup then cosine
decay, global-norm gradient clipping. One jitted train step, data-parallel over every visible
device (the batch axis is sharded with `jax.sharding.NamedSharding`; parameters are replicated).

Outputs in the workdir: `config.json`, `metrics.jsonl` (per step: loss, learning rate, gradient
norm before clipping, tokens/s), `eval.jsonl` (validation loss at each checkpoint),
`checkpoints/<step>/` (orbax). Running the same command again resumes from the newest readable
checkpoint and reproduces an uninterrupted run exactly (same parameters, same loss curve on CPU).
A non-finite loss, gradient or parameter stops the run with FloatingPointError before anything
non-finite is saved; the last good checkpoint stays.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import pathlib
import sys
import time
from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from anisotropy_jax import checkpointing, data as data_lib, results
from anisotropy_jax.config import (INITS, PRECISIONS, BlockConfig, ConfigError, require,
                                   TransformerConfig)
from anisotropy_jax.model import Transformer

# Test hook (documented in docs/TRAINING.md): when set to N, the training loop stops making progress
# before step N and sleeps, so that a test can SIGKILL a real run mid-way at a known place.
HANG_ENV = "ANISOTROPY_JAX_TEST_HANG_AT_STEP"


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Architecture of the trained model (the rest follows from `objective`).

    Attributes:
      d_model, num_heads, d_ff, num_layers: widths and depth.
      init: 'bert' (N(0, init_std²)), 'lecun' or 'xavier' kernels (config.BlockConfig).
      init_std: std of the 'bert' init.
      layer_norm_eps: LayerNorm epsilon.
      tie_embeddings: the output projection is the transposed input embedding.
      precision: matmul precision, 'highest' | 'default' | 'bfloat16'.
    """

    d_model: int = 256
    num_heads: int = 4
    d_ff: int = 1024
    num_layers: int = 4
    init: str = "bert"
    init_std: float = 0.02
    layer_norm_eps: float = 1e-5
    tie_embeddings: bool = True
    precision: str = "highest"

    def __post_init__(self):
        for name in ("d_model", "num_heads", "d_ff", "num_layers"):
            value = getattr(self, name)
            require(isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                  f"model.{name}", f"must be a positive integer, got {value!r}")
        require(self.d_model % self.num_heads == 0, "model.num_heads",
              f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}")
        require(self.init in INITS, "model.init", f"unknown init {self.init!r}; choose one of {INITS}")
        require(self.precision in PRECISIONS, "model.precision",
              f"unknown precision {self.precision!r}; choose one of {PRECISIONS}")
        require(math.isfinite(self.init_std) and self.init_std > 0, "model.init_std",
              f"must be finite and > 0, got {self.init_std!r}")
        require(math.isfinite(self.layer_norm_eps) and self.layer_norm_eps > 0,
              "model.layer_norm_eps", f"must be finite and > 0, got {self.layer_norm_eps!r}")
        require(isinstance(self.tie_embeddings, bool), "model.tie_embeddings",
              f"must be True or False, got {self.tie_embeddings!r}")


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """AdamW with warmup + cosine decay and gradient clipping.

    Attributes:
      learning_rate: peak learning rate.
      warmup_steps: linear warmup from 0 to the peak.
      end_lr_ratio: the cosine decays to learning_rate · end_lr_ratio at the last step.
      weight_decay: decoupled weight decay on tensors with ndim ≥ 2 (kernels, embeddings).
      b1, b2, eps: Adam moments.
      grad_clip: global-norm clipping threshold (0 = no clipping).
    """

    learning_rate: float = 1e-3
    warmup_steps: int = 100
    end_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    b1: float = 0.9
    b2: float = 0.98
    eps: float = 1e-9
    grad_clip: float = 1.0

    def __post_init__(self):
        for name in ("learning_rate", "end_lr_ratio", "weight_decay", "b1", "b2", "eps",
                     "grad_clip"):
            value = getattr(self, name)
            require(isinstance(value, (int, float)) and math.isfinite(value) and value >= 0,
                  f"optim.{name}", f"must be a finite number >= 0, got {value!r}")
        require(self.learning_rate > 0, "optim.learning_rate", "must be > 0")
        require(self.b1 < 1 and self.b2 < 1, "optim.b1", "b1 and b2 must be < 1")
        require(isinstance(self.warmup_steps, int) and self.warmup_steps >= 0,
              "optim.warmup_steps", f"must be a non-negative integer, got {self.warmup_steps!r}")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """One training run.

    Attributes:
      objective: 'mlm' or 'clm'.
      model, data, optim: see ModelSpec, data.DataConfig, OptimConfig.
      steps: number of optimiser updates.
      seed: seed of the parameter initialisation (the data have their own, data.seed).
      checkpoint_every: also checkpoint every this many steps, besides 0, 1, 2, 4, 8, … and the
        last step (0 = log-spaced only).
      eval_batch_size: sequences of the fixed validation batch (loss at each checkpoint).
    """

    objective: str = "clm"
    model: ModelSpec = ModelSpec()
    data: data_lib.DataConfig = data_lib.DataConfig()
    optim: OptimConfig = OptimConfig()
    steps: int = 1000
    seed: int = 0
    checkpoint_every: int = 250
    eval_batch_size: int = 32

    def __post_init__(self):
        require(self.objective in data_lib.OBJECTIVES, "objective",
              f"unknown objective {self.objective!r}; choose one of {data_lib.OBJECTIVES}")
        require(self.data.objective == self.objective, "data.objective",
              f"{self.data.objective!r} differs from objective {self.objective!r}")
        for name in ("steps", "eval_batch_size"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 1, name,
                  f"must be a positive integer, got {value!r}")
        for name in ("seed", "checkpoint_every"):
            value = getattr(self, name)
            require(isinstance(value, int) and value >= 0, name,
                  f"must be a non-negative integer, got {value!r}")
        require(self.optim.warmup_steps <= self.steps, "optim.warmup_steps",
              f"{self.optim.warmup_steps} exceeds steps={self.steps}")

    def transformer_config(self) -> TransformerConfig:
        """mlm: post-LN bidirectional encoder with embedding LayerNorm; clm: pre-LN causal LM
        with a final LayerNorm. max_len = seq_len (learned positions)."""
        m, mlm = self.model, self.objective == "mlm"
        block = BlockConfig(d_model=m.d_model, num_heads=m.num_heads, d_ff=m.d_ff,
                            norm_position="post" if mlm else "pre", init=m.init,
                            init_std=m.init_std, layer_norm_eps=m.layer_norm_eps,
                            causal=not mlm, precision=m.precision)
        return TransformerConfig(block=block, num_layers=m.num_layers,
                                 vocab_size=data_lib.vocab_size(self.objective),
                                 max_len=self.data.seq_len, embedding_norm=mlm,
                                 final_norm=not mlm, tie_embeddings=m.tie_embeddings,
                                 output_bias=True)


def _fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _build(cls, mapping: Mapping[str, Any], prefix: str, **extra):
    known = _fields(cls)
    for key in mapping:
        require(key in known, f"{prefix}{key}", f"unknown field; known fields are {sorted(known)}")
    return cls(**{k: mapping[k] for k in mapping}, **extra)


def config_from_mapping(cfg: Mapping[str, Any]) -> TrainConfig:
    """TrainConfig from a (nested) mapping such as the experiment's ConfigDict.

    Keys outside the training fields ('analysis') are ignored here; unknown keys inside
    model/data/optim and unknown top-level keys are an error naming the field.
    """
    cfg = dict(cfg.to_dict() if hasattr(cfg, "to_dict") else cfg)
    top = _fields(TrainConfig) | {"analysis"}
    for key in cfg:
        require(key in top, key, f"unknown field; known fields are {sorted(top)}")
    objective = cfg.get("objective", "clm")
    require(objective in data_lib.OBJECTIVES, "objective",
          f"unknown objective {objective!r}; choose one of {data_lib.OBJECTIVES}")
    model = _build(ModelSpec, dict(cfg.get("model", {})), "model.")
    data_fields = dict(cfg.get("data", {}))
    if "objective" in data_fields:  # as saved in config.json; must agree with the top level
        require(data_fields.pop("objective") == objective, "data.objective",
              f"differs from objective {objective!r}; set the top-level objective only")
    data = _build(data_lib.DataConfig, data_fields, "data.", objective=objective)
    optim = _build(OptimConfig, dict(cfg.get("optim", {})), "optim.")
    rest = {k: cfg[k] for k in cfg if k not in ("model", "data", "optim", "analysis")}
    return TrainConfig(model=model, data=data, optim=optim, **rest)


def to_dict(config: TrainConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)


# ----------------------------------------------------------------------------------------------
# Model, loss, optimiser


def learning_rate_schedule(optim: OptimConfig, steps: int) -> optax.Schedule:
    """Linear warmup 0 → peak over warmup_steps, then cosine to peak · end_lr_ratio at `steps`."""
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=optim.learning_rate, warmup_steps=optim.warmup_steps,
        decay_steps=max(steps, optim.warmup_steps + 1),
        end_value=optim.learning_rate * optim.end_lr_ratio)


def optimizer(optim: OptimConfig, steps: int) -> optax.GradientTransformation:
    schedule = learning_rate_schedule(optim, steps)
    decay_mask = lambda params: jax.tree.map(lambda p: p.ndim >= 2, params)  # noqa: E731
    adamw = optax.adamw(schedule, b1=optim.b1, b2=optim.b2, eps=optim.eps,
                        weight_decay=optim.weight_decay, mask=decay_mask)
    if optim.grad_clip > 0:
        return optax.chain(optax.clip_by_global_norm(optim.grad_clip), adamw)
    return adamw


def weighted_cross_entropy(logits_BxLxV: jax.Array, targets_BxL: jax.Array,
                           weights_BxL: jax.Array) -> jax.Array:
    """Σ w·CE / max(Σ w, 1), in float32 (nats per predicted byte)."""
    ce_BxL = optax.softmax_cross_entropy_with_integer_labels(
        logits_BxLxV.astype(jnp.float32), targets_BxL)
    return jnp.sum(ce_BxL * weights_BxL) / jnp.maximum(jnp.sum(weights_BxL), 1.0)


def init_state(model: nn.Module, tx: optax.GradientTransformation, seed: int,
               seq_len: int) -> dict[str, Any]:
    variables = model.init(jax.random.key(seed), jnp.zeros((1, seq_len), jnp.int32))
    return {"step": jnp.zeros((), jnp.int32), "params": variables,
            "opt_state": tx.init(variables)}


def _all_finite(tree) -> jax.Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


def train_step(state, batch, *, model: nn.Module, tx: optax.GradientTransformation,
               schedule: optax.Schedule):
    """One AdamW update; metrics: loss, learning rate, gradient norm (before clipping), whether
    the new parameters are all finite."""

    def loss_fn(variables):
        logits, _ = model.apply(variables, batch["inputs"])
        return weighted_cross_entropy(logits, batch["targets"], batch["weights"])

    loss, grads = jax.value_and_grad(loss_fn)(state["params"])
    updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
    params = optax.apply_updates(state["params"], updates)
    metrics = {"loss": loss, "learning_rate": schedule(state["step"]),
               "grad_norm": optax.tree.norm(grads), "params_finite": _all_finite(params)}
    return {"step": state["step"] + 1, "params": params, "opt_state": opt_state}, metrics


def eval_loss(variables, batch, *, model: nn.Module):
    logits, _ = model.apply(variables, batch["inputs"])
    return weighted_cross_entropy(logits, batch["targets"], batch["weights"])


# ----------------------------------------------------------------------------------------------
# Files


def read_jsonl(path: pathlib.Path) -> list[dict]:
    records = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a line cut by a kill: everything after it is dropped
    return records


def truncate_jsonl(path: pathlib.Path, before_step: int) -> None:
    """Keeps the complete records with step < before_step (atomically): a resumed run recomputes
    the rest, so the file ends up as an uninterrupted run's."""
    kept = [r for r in read_jsonl(path) if r.get("step", -1) < before_step]
    with results.atomic_path(path) as tmp:
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))


def read_metrics(workdir: str | os.PathLike) -> list[dict]:
    """The per-step records of metrics.jsonl."""
    return read_jsonl(pathlib.Path(workdir) / "metrics.jsonl")


def _check_same_config(path: pathlib.Path, config: TrainConfig) -> None:
    """Refuses to resume a run whose saved training config differs (names the first field)."""
    if not path.exists():
        return
    saved = json.loads(path.read_text()).get("train", {})
    now = results.to_jsonable(to_dict(config))

    def first_diff(a, b, prefix=""):
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b)):
                found = first_diff(a.get(key), b.get(key), f"{prefix}{key}.")
                if found:
                    return found
            return None
        return None if a == b else (prefix[:-1], a, b)

    diff = first_diff(saved, now)
    if diff:
        field, old, new = diff
        raise ConfigError(f"{field}: the workdir {path.parent} holds a run with {field}={old!r}; "
                          f"this command asks for {new!r} (use another --workdir)")


class _Progress:
    """tqdm bar on stderr when available and wanted, else nothing."""

    def __init__(self, enabled: bool, total: int, initial: int, desc: str):
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, initial=initial, desc=desc, file=sys.stderr,
                                mininterval=1.0, dynamic_ncols=True)
            except ImportError:  # tqdm is a core dependency; this is only a guard
                self.bar = None

    def update(self, record: dict) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{record['loss']:.3f}", refresh=False)

    def write(self, message: str) -> None:
        if self.bar is not None:
            self.bar.write(message, file=sys.stderr)
        else:
            print(message, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# ----------------------------------------------------------------------------------------------
# The run


def data_mesh() -> Mesh:
    return Mesh(np.array(jax.devices()), ("data",))


def check_devices(config: TrainConfig, num_devices: int | None = None) -> None:
    """The global batch must split evenly over the devices (checked before any compilation)."""
    n = jax.device_count() if num_devices is None else num_devices
    require(config.data.batch_size % n == 0, "data.batch_size",
          f"{config.data.batch_size} does not split over the {n} devices; use a multiple of {n}")
    require(config.eval_batch_size % n == 0, "eval_batch_size",
          f"{config.eval_batch_size} does not split over the {n} devices; use a multiple of {n}")


def abstract_state(config: TrainConfig) -> tuple[Any, nn.Module, optax.GradientTransformation]:
    """(abstract train state with replicated shardings, model, optimiser)."""
    model = Transformer(config.transformer_config())
    tx = optimizer(config.optim, config.steps)
    shapes = jax.eval_shape(functools.partial(init_state, model, tx, config.seed,
                                              config.data.seq_len))
    replicated = NamedSharding(data_mesh(), P())
    abstract = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=replicated),
                            shapes)
    return abstract, model, tx


def train(config: TrainConfig, workdir: str | os.PathLike, *, progress: bool = True,
          extra_config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Trains (or resumes) the run in `workdir`; returns a summary dict.

    `extra_config` (e.g. the analysis settings) is stored in config.json beside the training
    config. Raises FloatingPointError on a non-finite loss, gradient or parameter.
    """
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    check_devices(config)
    _check_same_config(workdir / "config.json", config)
    results.write_json(workdir / "config.json",
                       {"train": to_dict(config), **dict(extra_config or {})})

    mesh = data_mesh()
    replicated, batch_sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    stream = data_lib.BatchIterator(config.data)
    abstract, model, tx = abstract_state(config)
    schedule = learning_rate_schedule(config.optim, config.steps)
    step_fn = jax.jit(functools.partial(train_step, model=model, tx=tx, schedule=schedule),
                      in_shardings=(replicated, batch_sharded),
                      out_shardings=(replicated, replicated), donate_argnums=0)
    eval_fn = jax.jit(functools.partial(eval_loss, model=model),
                      in_shardings=(replicated, batch_sharded), out_shardings=replicated)
    val_batch = jax.device_put(stream.validation_batch(config.eval_batch_size), batch_sharded)
    save_steps = set(checkpointing.checkpoint_steps(config.steps, config.checkpoint_every))
    hang_at = int(os.environ.get(HANG_ENV, "-1"))
    metrics_path, eval_path = workdir / "metrics.jsonl", workdir / "eval.jsonl"

    def evaluate_and_save(mngr, step, state):
        val = float(eval_fn(state["params"], val_batch))
        checkpointing.save(mngr, step, state, stream.state())
        with open(eval_path, "a") as f:
            f.write(json.dumps({"step": step, "val_loss": val}) + "\n")
        return val

    with checkpointing.manager(workdir / "checkpoints") as mngr:
        restored = checkpointing.restore_latest(mngr, abstract)
        if restored is None:
            start = 0
            state = jax.jit(functools.partial(init_state, model, tx, config.seed,
                                              config.data.seq_len),
                            out_shardings=replicated)()
            truncate_jsonl(metrics_path, 0)
            truncate_jsonl(eval_path, 0)
            evaluate_and_save(mngr, 0, state)
        else:
            start, state, data_state = restored
            if int(state["step"]) != start:
                raise ValueError(f"checkpoint {start} holds a state of step {int(state['step'])}")
            stream.restore(data_state)
            truncate_jsonl(metrics_path, start)
            truncate_jsonl(eval_path, start + 1)
        last_good = start
        bar = _Progress(progress, config.steps, start, f"train {config.objective}")
        if start:
            bar.write(f"resuming from checkpoint step {start} in {workdir / 'checkpoints'}")
        tokens = config.data.batch_size * config.data.seq_len
        tick = time.perf_counter()
        try:
            with open(metrics_path, "a") as log:
                for step in range(start, config.steps):
                    if step == hang_at:
                        bar.write(f"{HANG_ENV}={hang_at}: hanging before step {step}")
                        while True:
                            time.sleep(1.0)
                    stream.position = step
                    batch = jax.device_put(next(stream), batch_sharded)
                    state, metrics = step_fn(state, batch)
                    metrics = jax.device_get(metrics)
                    now = time.perf_counter()
                    record = {"step": step, "loss": float(metrics["loss"]),
                              "learning_rate": float(metrics["learning_rate"]),
                              "grad_norm": float(metrics["grad_norm"]),
                              "tokens_per_s": tokens / max(now - tick, 1e-9)}
                    tick = now
                    if not (math.isfinite(record["loss"]) and math.isfinite(record["grad_norm"])
                            and bool(metrics["params_finite"])):
                        raise FloatingPointError(
                            f"non-finite training at step {step}: loss={record['loss']}, "
                            f"grad_norm={record['grad_norm']}, finite parameters after the "
                            f"update: {bool(metrics['params_finite'])}; the last good checkpoint "
                            f"is step {last_good} in {workdir / 'checkpoints'} (kept)")
                    log.write(json.dumps(record) + "\n")
                    log.flush()
                    bar.update(record)
                    if step + 1 in save_steps:
                        log.flush()
                        val = evaluate_and_save(mngr, step + 1, state)
                        last_good = step + 1
                        bar.write(f"step {step + 1}: loss {record['loss']:.4f}, "
                                  f"val loss {val:.4f}, checkpoint saved")
        finally:
            bar.close()
    records = read_metrics(workdir)
    return {"final_step": config.steps, "first_loss": records[0]["loss"] if records else None,
            "final_loss": records[-1]["loss"] if records else None,
            "eval": read_jsonl(eval_path), "checkpoints": sorted(save_steps)}
