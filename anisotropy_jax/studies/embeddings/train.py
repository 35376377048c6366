"""One GPT-NeoX-style causal LM trained on the BPE token stream, measured at its checkpoints.

The model is the package's one LM, `models.transformer.Transformer` with its head, configured as
GPT-NeoX (`models/families/gpt_neox.py`): pre-LN blocks with parallel attention and MLP
(x + attn(ln1(x)) + mlp(ln2(x))), rotary positions on the first `rotary_pct` of each head's dims,
exact GELU, LayerNorm, a final LayerNorm, and untied input and output embeddings (the token
embedding and the `output` Dense, no bias; N(0, init_std²) like Hugging Face's init). The logits
are final_hidden · W_out with W_out the (D, V) `output` kernel, as GPTNeoXForCausalLM's embed_outᵀ.

Training reuses the training study's pieces (`studies/training/step.py`): AdamW with warmup and
cosine decay, clipping, `train_step`, `eval_loss`; batches are a pure function of (seed, step).
At every measured step (0 = the init) the embeddings go through `measure`: Machina & Mercer's
partition isotropy (`metrics.embedding_isotropy`, both sign conventions, raw and centred), the
2-D SVD projections, and three descriptive statistics per matrix; and the last block's output
(the input of the final LayerNorm) on the first validation batch goes to the host for its RankMe
and α-ReQ (`metrics.spectrum_metrics`, numpy float64: Li et al.'s compression phase).
"""
from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax import metrics
from anisotropy_jax.config import BlockConfig, OptimConfig, TransformerConfig
from anisotropy_jax.configs.embeddings import EmbeddingsConfig
from anisotropy_jax.metrics.embedding_isotropy import (GAIN_CONTROLS, embedding_isotropy,
                                                      gain_controls,
                                                      partition_isotropy_conventions,
                                                      svd_projection_2d)
from anisotropy_jax.models.transformer import Transformer, embedding_matrices
from anisotropy_jax.studies import training
from anisotropy_jax.studies.embeddings import tokens

MATRICES = ("input", "output", "output_scaled")
# Controls beside Machina & Mercer's three matrices (docs/EMBEDDINGS.md). Partition isotropy is not
# scale-invariant (I(aW) ≠ I(W)), so each is about scale:
#   output_equalnorm W·c, c = ‖W·diag γ‖_F / ‖W‖_F: the output embedding at the Frobenius norm of
#                    W·diag(γ), so I(W·diag γ) − I(W·c) is what γ does beyond changing the scale;
#   output_meangain  the output embedding times the *mean* gain (a uniform rescaling, for
#                    reference: its norm differs from W·diag(γ)'s by the spread of γ);
#   output_rowdir    each row of W·diag(γ) with its norm in a uniformly random direction (mean
#                    over ROW_DRAWS draws of a fixed key): the isotropy of the row norms alone
#                    (`metrics.embedding_isotropy.gain_controls`);
#   <m>_unitnorm     each matrix rescaled to mean row norm 1: compares geometry at equal scale
#                    (across widths and steps).
#   <m>_gaussian     an isotropic Gaussian of the matrix's shape and Frobenius norm: what an
#                    isotropic matrix of that scale scores.
CONTROL = "output_meangain"
GAIN_KEYS = tuple(f"output_{c}" for c in GAIN_CONTROLS)
GAUSSIAN_KEY, ROW_KEY, ROW_DRAWS = 0x6A55, 0x60A1, 8
# Descriptive statistics per matrix (not Machina & Mercer's): ‖mean row‖ / mean ‖row‖, mean ‖row‖,
# IsoScore (mean-invariant spectrum flatness); and the final LayerNorm gain's mean and std and the
# Frobenius ratio c.
STATS = ("relative_drift", "mean_norm", "isoscore")


def transformer_config(config: EmbeddingsConfig, width: int) -> TransformerConfig:
    """The GPT-NeoX-style model of width D (module docstring)."""
    block = BlockConfig(
        d_model=width, num_heads=width // config.head_dim, head_dim=config.head_dim,
        d_ff=config.ff_ratio * width, norm_position="pre", layer_norm_eps=1e-5,
        activation="gelu", parallel_residual=True, rotary_dims=config.rotary_dims(),
        causal=True, init_std=config.init_std, residual_init_std=config.init_std,
        precision=config.precision)
    return TransformerConfig(
        block=block, num_layers=config.num_layers, vocab_size=config.vocab_size,
        max_len=config.seq_len, learned_positions=False, embedding_norm=False, final_norm=True,
        tie_embeddings=False, output_bias=False)


def _equal_norm_gaussian(w_VxD: jax.Array) -> jax.Array:
    """N(0, 1) entries (a fixed key) rescaled to the Frobenius norm of w."""
    g_VxD = jax.random.normal(jax.random.key(GAUSSIAN_KEY), w_VxD.shape, w_VxD.dtype)
    norm = lambda x: metrics.vector_norms(x.reshape(1, -1))[0]  # noqa: E731
    return g_VxD * (norm(w_VxD) / norm(g_VxD))


def _conventions(out: dict, prefix: str, w_VxD: jax.Array, centred: bool = True) -> None:
    """out["<prefix>_<raw|centered>_<convention>"] = partition isotropy of w (and centred w)."""
    variants = {"raw": w_VxD}
    if centred:
        variants["centered"] = w_VxD - jnp.mean(w_VxD, axis=0, keepdims=True)
    for variant, x in variants.items():
        for convention, value in partition_isotropy_conventions(x).items():
            out[f"{prefix}_{variant}_{convention}"] = value


@jax.jit
def measure(w_in_VxD: jax.Array, w_out_VxD: jax.Array, gain_D: jax.Array
            ) -> tuple[dict, dict, dict]:
    """(isotropy, stats {"<matrix>_<stat>", "final_gain_<mean|std>"}, projections
    {"<matrix>_<raw|centered>": (V, 2)}) of one checkpoint's embeddings. isotropy:
    `embedding_isotropy`'s 12 keys and the controls above:
    "output_<equalnorm|meangain|rowdir>_<raw|centered>_<c>", "<matrix>_unitnorm_<raw|centered>_<c>",
    "<matrix>_gaussian_raw_<c>" (c = one_sign | sign_free)."""
    isotropy = dict(embedding_isotropy(w_in_VxD, w_out_VxD, gain_D))
    mats = {"input": w_in_VxD, "output": w_out_VxD, "output_scaled": w_out_VxD * gain_D[None]}
    controls = gain_controls(w_out_VxD, gain_D, jax.random.key(ROW_KEY), ROW_DRAWS)
    stats = {"final_gain_mean": jnp.mean(gain_D), "final_gain_std": jnp.std(gain_D),
             "final_gain_frobenius_ratio": controls.pop("final_gain_frobenius_ratio")}
    isotropy.update(controls)
    projections = {}
    for name, w in mats.items():
        _conventions(isotropy, f"{name}_unitnorm", w / metrics.mean_norm(w))
        _conventions(isotropy, f"{name}_gaussian", _equal_norm_gaussian(w), centred=False)
        stats[f"{name}_relative_drift"] = metrics.relative_drift(w)
        stats[f"{name}_mean_norm"] = metrics.mean_norm(w)
        stats[f"{name}_isoscore"] = metrics.isoscore(w)
        projections[f"{name}_raw"] = svd_projection_2d(w)
        projections[f"{name}_centered"] = svd_projection_2d(w, center=True)
    return isotropy, stats, projections


def measure_params(params: Any, config: TransformerConfig) -> tuple[dict, dict, dict]:
    """`measure` of a parameter tree (numpy results)."""
    mats = embedding_matrices(params, config)
    return jax.device_get(measure(mats["input"], mats["output"], mats["final_norm_scale"]))


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """What the progress printer sees at each measured step."""

    width: int
    seed: int
    step: int
    train_loss: float | None
    val_loss: float
    seconds: float
    isotropy: dict[str, float]


@dataclasses.dataclass(frozen=True)
class RunTrace:
    """One model's measurements, stacked over the measured steps (C)."""

    isotropy: dict[str, np.ndarray]      # (C,)
    stats: dict[str, np.ndarray]         # (C,)
    projections: dict[str, np.ndarray]   # (C, V, 2)
    val_loss: np.ndarray                 # (C,)
    train_loss: np.ndarray               # (steps,)
    seconds: float
    num_params: int
    last_block: dict[str, np.ndarray]    # (C,) "rankme", "alpha_req"


def _stack(records: list[dict]) -> dict[str, np.ndarray]:
    return {k: np.stack([np.asarray(r[k]) for r in records]) for k in records[0]}


def _check_finite(where: str, values: dict[str, np.ndarray]) -> None:
    bad = sorted(k for k, v in values.items() if not np.all(np.isfinite(v)))
    if bad:
        raise FloatingPointError(f"{where}: non-finite {', '.join(bad)}")


@functools.lru_cache(maxsize=4)
def _compiled(model_config: TransformerConfig, optim: OptimConfig, steps: int):
    """(jitted init state of a seed, jitted train step, jitted eval loss, jitted last block's
    output (B, L, D) of a batch), shared by the seeds of a width (one compilation per width)."""
    model = Transformer(model_config, with_head=True)
    tx = training.optimizer(optim, steps)
    schedule = training.learning_rate_schedule(optim, steps)
    step_fn = jax.jit(functools.partial(training.train_step, model=model, tx=tx,
                                        schedule=schedule), donate_argnums=0)
    init_fn = jax.jit(functools.partial(training.init_state, model, tx,
                                        seq_len=model_config.max_len))
    body = Transformer(model_config, with_head=False)  # no logits: the stored head is not read
    last_fn = jax.jit(lambda params, batch: body.apply(params, batch["inputs"])[1]["final_norm_in"])
    return init_fn, step_fn, jax.jit(functools.partial(training.eval_loss, model=model)), last_fn


def train_and_measure(config: EmbeddingsConfig, width: int, seed: int, data: tokens.TokenData,
                      val_batches: list[dict], progress: Callable[[Checkpoint], None] | None = None
                      ) -> RunTrace:
    """Trains the width-D model of `seed` for config.steps updates, measuring at every step of
    config.measured_steps; FloatingPointError (naming width, seed, step) when a loss, parameter
    or measurement is not finite."""
    model_config, start = transformer_config(config, width), time.perf_counter()
    init_fn, step_fn, eval_fn, last_fn = _compiled(model_config, config.optim, config.steps)
    state = init_fn(seed)
    records, losses, finite, since = [], [], [], 0
    for step in range(config.steps + 1):
        if step in config.measured_steps:
            where = f"width {width}, seed {seed}, step {step}"
            train_losses = np.asarray(jax.device_get(losses), np.float64)
            _check_finite(where, {"train loss": train_losses,
                                  "parameters": np.asarray(jax.device_get(finite), bool)})
            iso, stats, proj = measure_params(state["params"], model_config)
            val = float(np.mean([eval_fn(state["params"], b) for b in val_batches]))
            _check_finite(where, {**iso, **stats, "val loss": np.asarray(val)})
            spectrum = metrics.spectrum_metrics(last_fn(state["params"], val_batches[0]))
            records.append({"iso": iso, "stats": stats, "proj": proj, "val": val,
                            "last": spectrum})
            if progress is not None:
                recent = train_losses[since:]
                progress(Checkpoint(width, seed, step, float(recent.mean()) if len(recent) else
                                    None, val, time.perf_counter() - start,
                                    {k: float(v) for k, v in iso.items()}))
            since = len(train_losses)
        if step == config.steps:
            break
        rng = np.random.default_rng([seed, 0x7EA1, step])
        state, out = step_fn(state, tokens.batch(config, data.train_ids, rng))
        losses.append(out["loss"])
        finite.append(out["params_finite"])
    return RunTrace(
        isotropy=_stack([r["iso"] for r in records]), stats=_stack([r["stats"] for r in records]),
        projections=_stack([r["proj"] for r in records]),
        val_loss=np.asarray([r["val"] for r in records]),
        train_loss=np.asarray(jax.device_get(losses), np.float32),
        seconds=time.perf_counter() - start,
        num_params=int(sum(x.size for x in jax.tree.leaves(state["params"]))),
        last_block=_stack([r["last"] for r in records]))
