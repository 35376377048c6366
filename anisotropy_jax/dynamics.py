"""Per-checkpoint analysis of a training run: query/key geometry, attention sharpness and
anisotropy along training (layer 6; SCIENCE.md "The training-dynamics experiment").

For every saved checkpoint, on one fixed validation batch of clean text (no MLM masking):
  per layer and head (arrays (S, layers, H), S checkpoints):
    mean_query_norm ‖q̄‖, mean_key_norm ‖k̄‖, mean_query_key_cosine cos(q̄, k̄),
    mean_query_key_dot q̄·k̄/√Dh, query_norm, key_norm (mean ‖q_i‖, ‖k_j‖),
    attention_entropy (nats), attention_entropy_normalized (÷ ln of the number of visible keys),
    attention_max, first_position_mass — averaged over the batch and over the queries that see
    more than one key (a causal head's first query has no choice; it is excluded everywhere);
  per hidden state (arrays (S, layers + 1); index 0 = the embedding output, i = output of block
    i − 1; for clm the last one is the input of the final LayerNorm):
    average_cosine (all pairs), cross_sequence_cosine, within_sequence_cosine, drift_norm,
    relative_drift, isoscore;
  embedding matrices (arrays (S,)): partition isotropy of the input embedding and of the output
    projection (the same matrix when tied), raw and centred (input_raw, input_centered,
    output_raw, output_centered), over the rows of the byte ids that occur in the corpus (plus
    MASK for mlm; the other rows never get a gradient), and over all rows (input_all_rows_raw …);
  clm only: the final LayerNorm's input vs output (average/cross-sequence cosine, IsoScore, drift).
Across checkpoints: Spearman correlation of the normalised entropy with |q̄·k̄/√Dh| (per head over
checkpoints, and pooled over checkpoints, layers and heads), and a summary of the SCIENCE.md
expected trends with the numbers (`expected_trends`).
"""
from __future__ import annotations

import functools
import json
import pathlib
import sys
import warnings
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax import checkpointing, data as data_lib, metrics
from anisotropy_jax.config import TransformerConfig
from anisotropy_jax.model import Transformer, attention_mask

HEAD_METRICS = ("mean_query_norm", "mean_key_norm", "mean_query_key_cosine", "mean_query_key_dot",
                "query_norm", "key_norm", "attention_entropy", "attention_entropy_normalized",
                "attention_max", "first_position_mass")
LAYER_METRICS = ("average_cosine", "cross_sequence_cosine", "within_sequence_cosine",
                 "drift_norm", "relative_drift", "isoscore")


def _hidden_metrics(h_BxLxD: jax.Array) -> dict[str, jax.Array]:
    return {
        "average_cosine": metrics.average_cosine_similarity(h_BxLxD),
        "cross_sequence_cosine": metrics.cross_sequence_cosine_similarity(h_BxLxD),
        "within_sequence_cosine": metrics.within_sequence_cosine_similarity(h_BxLxD),
        "drift_norm": metrics.drift_norm(h_BxLxD),
        "relative_drift": metrics.relative_drift(h_BxLxD),
        "isoscore": metrics.isoscore(h_BxLxD),
    }


def head_metrics(queries_BxLxHxDh: jax.Array, keys_BxLxHxDh: jax.Array,
                 logits_BxHxLxL: jax.Array, weights_BxHxLxL: jax.Array,
                 causal: bool) -> dict[str, jax.Array]:
    """Per-head metrics (each (H,)) of one attention layer; see the module docstring."""
    seq_len = logits_BxHxLxL.shape[-1]
    mask = attention_mask(seq_len, causal, None)
    counts_L = metrics.visible_key_counts((seq_len, seq_len), None if mask is None else mask[0, 0])
    valid_L = (counts_L > 1).astype(jnp.float32)

    def mean_over_queries(v_BxHxL):
        return jnp.einsum("bhl,l->h", v_BxHxL, valid_L) / (v_BxHxL.shape[0] * jnp.sum(valid_L))

    out = dict(metrics.query_key_geometry(queries_BxLxHxDh, keys_BxLxHxDh))
    out["attention_entropy"] = mean_over_queries(metrics.attention_entropy(logits_BxHxLxL, mask))
    out["attention_entropy_normalized"] = mean_over_queries(
        metrics.normalized_attention_entropy(logits_BxHxLxL, mask))
    out["attention_max"] = mean_over_queries(metrics.attention_max(weights_BxHxLxL))
    out["first_position_mass"] = mean_over_queries(metrics.attention_sink_mass(weights_BxHxLxL))
    return out


def _isotropy_variants(w_VxD: jax.Array, w_out_VxD: jax.Array) -> dict[str, jax.Array]:
    """Partition isotropy of the input and output matrices, raw and centred (one vmapped call,
    so the eigendecomposition is compiled once)."""
    def centred(w):
        return w - jnp.mean(w, axis=0, keepdims=True)

    stack_4xVxD = jnp.stack([w_VxD, centred(w_VxD), w_out_VxD, centred(w_out_VxD)])
    values = jax.vmap(metrics.partition_isotropy)(stack_4xVxD)
    return dict(zip(("input_{}raw", "input_{}centered", "output_{}raw", "output_{}centered"),
                    values))


def make_analysis_fn(config: TransformerConfig, used_ids: np.ndarray) -> Callable:
    """jit-compiled fn(variables, tokens_BxL) → nested dict of metric arrays for one checkpoint.

    Per-layer metrics are vmapped over the stacked layers, so the compiled program does not grow
    with depth.
    """
    model = Transformer(config, with_head=False)
    rows = jnp.asarray(used_ids)
    causal = config.block.causal

    @jax.jit
    def analyse(variables, tokens_BxL):
        _, probes = model.apply(variables, tokens_BxL)
        blocks = probes["blocks"]

        def stacked(name):
            return jnp.stack([p[name] for p in blocks])

        heads = jax.vmap(functools.partial(head_metrics, causal=causal))(
            stacked("queries"), stacked("keys"), stacked("attn_logits"), stacked("attn_weights"))
        heads = {name: heads[name] for name in HEAD_METRICS}
        states = jnp.stack([probes["embeddings"]] + [p["resid_post"] for p in blocks])
        layers = jax.vmap(_hidden_metrics)(states)
        params = variables["params"]
        w_in = params["token_embedding"]["embedding"]
        w_out = w_in if config.tie_embeddings else params["output"]["kernel"].T
        emb = {k.format(""): v for k, v in _isotropy_variants(w_in[rows], w_out[rows]).items()}
        emb.update({k.format("all_rows_"): v
                    for k, v in _isotropy_variants(w_in, w_out).items()})
        out = {"heads": heads, "layers": layers, "embeddings": emb}
        if config.final_norm:
            both = jax.vmap(_hidden_metrics)(jnp.stack([probes["final_norm_in"],
                                                        probes["final_hidden"]]))
            out["final_norm"] = {**{f"before_{k}": v[0] for k, v in both.items()},
                                 **{f"after_{k}": v[1] for k, v in both.items()}}
        return out

    return analyse


def analysis_tokens(stream: data_lib.BatchIterator, batch_size: int, seed: int) -> np.ndarray:
    """The fixed validation batch of clean text the analysis runs on (B, L)."""
    batch = stream.validation_batch(batch_size, seed)
    # mlm: the unmasked bytes (targets); clm: the inputs.
    return batch["targets"] if stream.config.objective == "mlm" else batch["inputs"]


def _stack(records: list[dict]) -> dict:
    if isinstance(records[0], dict):
        return {k: _stack([r[k] for r in records]) for k in records[0]}
    return np.stack([np.asarray(r, np.float64) for r in records])


def spearman_entropy_vs_qk(entropy_SxNxH: np.ndarray, qk_dot_SxNxH: np.ndarray) -> dict[str, Any]:
    """Spearman ρ of the normalised entropy with |q̄·k̄/√Dh| over checkpoints.

    `pooled`: over every (checkpoint, layer, head) point; `per_head` (layers, H): over the
    checkpoints of each head; `per_head_median`. NaN where a series is constant (scipy's
    convention, kept). Needs ≥ 3 checkpoints.
    """
    from scipy import stats

    entropy = np.asarray(entropy_SxNxH, np.float64)
    qk = np.abs(np.asarray(qk_dot_SxNxH, np.float64))
    if entropy.shape[0] < 3:
        raise ValueError(f"a correlation over checkpoints needs >= 3 checkpoints, "
                         f"got {entropy.shape[0]}")
    pooled = stats.spearmanr(entropy.reshape(-1), qk.reshape(-1))
    per_head = np.full(entropy.shape[1:], np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant series → NaN, reported as such
        for idx in np.ndindex(*entropy.shape[1:]):
            per_head[idx] = stats.spearmanr(entropy[(slice(None),) + idx],
                                            qk[(slice(None),) + idx]).statistic
    finite = per_head[np.isfinite(per_head)]
    return {"pooled": float(pooled.statistic), "pooled_p": float(pooled.pvalue),
            "n_pooled": int(entropy.size), "per_head": per_head,
            "per_head_median": float(np.median(finite)) if finite.size else float("nan"),
            "per_head_fraction_negative": float(np.mean(finite < 0)) if finite.size else
            float("nan")}


def expected_trends(steps: np.ndarray, heads: dict, layers: dict, correlation: dict,
                    objective: str) -> dict[str, Any]:
    """SCIENCE.md's expected trends, each with the numbers at the first and last checkpoint and
    whether it holds in this run (`holds` is a plain comparison, no significance test)."""
    first, last = 0, -1
    num_layers = heads["mean_query_norm"].shape[1]

    def head_mean(name, index, fn=lambda x: x):
        return float(np.mean(fn(heads[name][index])))

    out = {}
    for name in ("mean_query_norm", "mean_key_norm"):
        a, b = head_mean(name, first), head_mean(name, last)
        out[f"{name}_grows"] = {"first": a, "last": b, "holds": b > a}
    a, b = head_mean("mean_query_key_cosine", first, np.abs), head_mean(
        "mean_query_key_cosine", last, np.abs)
    out["abs_cosine_grows_from_zero"] = {"first": a, "last": b, "holds": b > a}
    cos_last = heads["mean_query_key_cosine"][last]
    positive, negative = int(np.sum(cos_last > 0)), int(np.sum(cos_last < 0))
    signs = {"positive_heads": positive, "negative_heads": negative,
             "holds": positive > 0 and negative > 0}
    if objective == "clm":
        signs["mostly_negative"] = negative > positive
    out["both_signs_across_heads"] = signs
    a, b = head_mean("attention_entropy_normalized", first), head_mean(
        "attention_entropy_normalized", last)
    out["entropy_falls"] = {"first": a, "last": b, "holds": b < a}
    out["entropy_anticorrelates_with_abs_qk"] = {
        "spearman_pooled": correlation["pooled"], "p": correlation["pooled_p"],
        "per_head_median": correlation["per_head_median"],
        "holds": correlation["pooled"] < 0 and correlation["pooled_p"] < 0.05}
    inter = slice(1, num_layers)  # outputs of blocks 0 .. n-2: neither the input nor the last
    if num_layers >= 2:
        cross = layers["cross_sequence_cosine"]
        a, b = float(np.mean(cross[first, inter])), float(np.mean(cross[last, inter]))
        out["intermediate_anisotropy_rises"] = {
            "first": a, "last": b, "max_over_steps": float(np.max(np.mean(cross[:, inter], 1))),
            "per_layer_first": cross[first].tolist(), "per_layer_last": cross[last].tolist(),
            "holds": b > a}
    out["steps"] = [int(steps[0]), int(steps[-1])]
    return out


def load_run_config(workdir: str | pathlib.Path):
    """The TrainConfig saved in a training run's config.json."""
    from anisotropy_jax import train  # train imports nothing from dynamics

    path = pathlib.Path(workdir) / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"--workdir: {path} does not exist; is it a training run "
                                f"(experiments/train.py)?")
    return train.config_from_mapping(json.loads(path.read_text())["train"])


def analyze_run(workdir: str | pathlib.Path, batch_size: int = 16, seed: int = 0,
                steps: list[int] | None = None, progress: bool = True) -> dict[str, Any]:
    """Analyses every readable checkpoint of the run in `workdir`.

    Returns {"steps": (S,), "heads": {name: (S, layers, H)}, "layers": {name: (S, layers + 1)},
    "embeddings": {name: (S,)}, ["final_norm": {name: (S,)}], "correlation": {...},
    "trends": {...}, "objective": ...} with numpy arrays.
    """
    from anisotropy_jax import train

    config = load_run_config(workdir)
    stream = data_lib.BatchIterator(config.data)
    tokens = analysis_tokens(stream, batch_size, seed)
    analyse = make_analysis_fn(config.transformer_config(), stream.used_token_ids())
    # One device is plenty for one batch, and a replicated multi-device program gains nothing
    # (with forced host devices it was seen to stall in the eigendecompositions).
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    abstract = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=device),
                            train.abstract_state(config)[0])
    records, done = [], []
    with checkpointing.manager(pathlib.Path(workdir) / "checkpoints", read_only=True) as mngr:
        wanted = checkpointing.saved_steps(mngr) if steps is None else list(steps)
        if not wanted:
            raise FileNotFoundError(f"no checkpoints in {pathlib.Path(workdir) / 'checkpoints'}")
        for i, (step, state) in enumerate(checkpointing.iterate_readable(mngr, abstract, wanted)):
            records.append(jax.device_get(analyse(state["params"], tokens)))
            done.append(step)
            if progress:
                print(f"analysed checkpoint {step} ({i + 1}/{len(wanted)})", file=sys.stderr,
                      flush=True)
    if not records:
        raise FileNotFoundError(f"no readable checkpoint in {workdir}")
    out = _stack(records)
    out["steps"] = np.asarray(done)
    out["objective"] = config.objective
    if len(done) >= 3:
        out["correlation"] = spearman_entropy_vs_qk(out["heads"]["attention_entropy_normalized"],
                                                    out["heads"]["mean_query_key_dot"])
        out["trends"] = expected_trends(out["steps"], out["heads"], out["layers"],
                                        out["correlation"], config.objective)
    return out


def flatten_arrays(analysis: dict[str, Any]) -> dict[str, np.ndarray]:
    """{"heads/mean_query_norm": array, ...} for results.write_npz."""
    flat = {"steps": np.asarray(analysis["steps"])}
    for group in ("heads", "layers", "embeddings", "final_norm"):
        for name, value in analysis.get(group, {}).items():
            flat[f"{group}/{name}"] = np.asarray(value)
    if "correlation" in analysis:
        flat["correlation/per_head"] = np.asarray(analysis["correlation"]["per_head"])
    return flat


def analyze_and_write(workdir, batch_size: int, seed: int, progress: bool = True) -> dict:
    """Runs `analyze_run` on `workdir` and writes results.json (provenance, config, metrics,
    correlation, trends), dynamics.npz and figures/*.png there; returns the results dict."""
    from anisotropy_jax import results, train  # layer 8 and the training loop: imported lazily
    from anisotropy_jax.plotting import dynamics as plots

    workdir = pathlib.Path(workdir)
    provenance = results.Provenance()
    analysis = analyze_run(workdir, batch_size=batch_size, seed=seed, progress=progress)
    saved_config = json.loads((workdir / "config.json").read_text())
    records = train.read_metrics(workdir)
    evals = train.read_jsonl(workdir / "eval.jsonl")
    out = {
        "provenance": provenance.finish(),
        "config": {**saved_config, "analysis": {"batch_size": batch_size, "seed": seed}},
        "objects": {
            "heads": "per checkpoint, layer, head: query/key geometry and attention sharpness on "
                     "a fixed validation batch (queries with one visible key excluded)",
            "layers": "per checkpoint and hidden state (0 = embedding output, i = block i-1 "
                      "output): contextual-representation anisotropy",
            "embeddings": "partition isotropy of the input/output embedding matrices (rows of "
                          "byte ids present in the corpus; *_all_rows: every row)",
            "final_norm": "clm only: hidden states before/after the final LayerNorm",
        },
        "training": {
            "first_loss": records[0]["loss"] if records else None,
            "final_loss": records[-1]["loss"] if records else None,
            "val_loss": [[r["step"], r["val_loss"]] for r in evals],
        },
        "steps": analysis["steps"],
        **{k: analysis[k] for k in ("heads", "layers", "embeddings", "final_norm",
                                    "correlation", "trends") if k in analysis},
    }
    results.write_npz(workdir / "dynamics.npz", flatten_arrays(analysis))
    figures = workdir / "figures"
    results.save_figure(plots.loss_figure(records, evals), figures / "loss.png")
    results.save_figure(plots.trajectories_figure(analysis), figures / "trajectories.png")
    results.save_figure(plots.anisotropy_heatmap_figure(analysis),
                        figures / "anisotropy_heatmap.png")
    if len(analysis["steps"]) >= 3:
        results.save_figure(plots.cosine_vs_entropy_figure(analysis),
                            figures / "cosine_vs_entropy.png")
    results.write_json(workdir / "results.json", out)
    return out
