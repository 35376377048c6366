"""Writing a depth sweep: chunks/ (every finished chunk, atomically, so a killed run resumes),
results.json (last, atomically), results.npz, figures/*.png and the printed table.

results.json: `provenance`, `config`, `bias_norms`, and per stack ("post_d768", ...): `curves`
({metric: {"mean", "std"}: (s, layers 0..N)}, layer 0 = the input), `per_layer` (the bias sweep's
metrics, mean over seeds, (s, layers 1..N)), `depth_to_cosine_0.9` (mean curve and per seed),
and the theory beside the data (`theory`: pre-LN norm band, pure-attention cubic recursion).
"""
from __future__ import annotations

import json
import pathlib
from typing import Any, Mapping, Sequence

import numpy as np

from anisotropy_jax import results
from anisotropy_jax.config import ConfigError
from anisotropy_jax.configs.depth import DepthConfig
from anisotropy_jax.configs.sweep import upgrade_recorded
from anisotropy_jax.plotting import depth as depth_plots
from anisotropy_jax.studies.depth import theory
from anisotropy_jax.studies.depth.grid import DepthResult, StackResult

COS_THRESHOLD = 0.9
# (curve name, input metric, per-layer metric): curves over layers 0..N.
CURVES = (("average_cosine", "input_cosine", "output_cosine"),
          ("effective_rank", "effective_rank", "effective_rank"),
          ("rank1_residual", "rank1_residual", "rank1_residual"),
          ("residual_rms", "residual_rms", "residual_rms"))


class ChunkStore:
    """Finished chunks as workdir/chunks/<stack>/<range>.npz, each written atomically. The first
    use writes chunks/config.json; a store whose config differs refuses (ConfigError naming the
    workdir) instead of mixing two sweeps."""

    def __init__(self, workdir: pathlib.Path, config: DepthConfig):
        self.root = pathlib.Path(workdir) / "chunks"
        stamp = json.loads(json.dumps(results.to_jsonable(config)))
        path = self.root / "config.json"
        if path.exists():
            if upgrade_recorded(json.loads(path.read_text())["config"]) != stamp:
                raise ConfigError(f"workdir: {self.root} holds chunks of another depth config; "
                                 f"use a new --workdir or delete it")
        else:
            results.write_json(path, {"config": stamp})

    def _path(self, name: str) -> pathlib.Path:
        return self.root / f"{name}.npz"

    def has(self, name: str) -> bool:
        return self._path(name).exists()

    def load(self, name: str) -> dict[str, np.ndarray]:
        with np.load(self._path(name)) as f:
            return {k.replace("__", "/"): f[k] for k in f.files}

    def save(self, name: str, arrays: Mapping[str, np.ndarray]) -> None:
        results.write_npz(self._path(name), {k.replace("/", "__"): v for k, v in arrays.items()})


def curve(stack: StackResult, input_metric: str, layer_metric: str) -> np.ndarray:
    """(seeds, s, layers 0..N): the input's value then the value after every layer."""
    if input_metric == "input_cosine":
        first = stack.per_layer["input_cosine"][:, :, 0]
    else:
        first = stack.inputs[input_metric]
    return np.concatenate([first[:, :, None], stack.per_layer[layer_metric]], axis=2)


def _threshold_depths(cos: np.ndarray) -> dict[str, Any]:
    """First depth with cosine ≥ COS_THRESHOLD: of the mean over seeds, and per seed."""
    mean = cos.mean(axis=0)
    return {"threshold": COS_THRESHOLD,
            "mean_curve": [theory.depth_to_threshold(mean[j], COS_THRESHOLD)
                           for j in range(mean.shape[0])],
            "per_seed": [[theory.depth_to_threshold(cos[i, j], COS_THRESHOLD)
                          for j in range(cos.shape[1])] for i in range(cos.shape[0])]}


def _theory(config: DepthConfig, stack: StackResult) -> dict[str, Any]:
    if stack.architecture == "pre":
        return {"pre_ln_norm_growth": theory.compare_pre_ln(
            config, stack.width, stack.per_layer["residual_rms"], stack.inputs["residual_rms"])}
    if stack.architecture == "attention_only" and config.attention_only_skip == 0:
        r = stack.per_layer["rank1_residual"].mean(axis=0)  # (s, layers)
        return {"pure_attention_collapse": [
            {"bias_norm": s, "measured": r[j].tolist(),
             **(theory.cubic_recursion(float(r[j, 0]), float(r[j, 1]), config.num_layers)
                if config.num_layers >= 2 else {})}
            for j, s in enumerate(config.bias_norms)]}
    return {}


def stack_summary(config: DepthConfig, stack: StackResult) -> dict[str, Any]:
    # float64: a stack near float32's limit (its last layers before the cut) overflows squares
    curves = {name: curve(stack, a, b).astype(np.float64) for name, a, b in CURVES}
    return {
        "architecture": stack.architecture, "width": stack.width,
        "block": config.block_for(stack.architecture, stack.width),
        "curves": {name: {"mean": v.mean(axis=0), "std": v.std(axis=0, ddof=1)
                          if v.shape[0] > 1 else np.zeros(v.shape[1:])}
                   for name, v in curves.items()},
        "per_layer": {name: v.mean(axis=0) for name, v in stack.per_layer.items()},
        "depth_to_cosine_0.9": _threshold_depths(curves["average_cosine"]),
        # (seeds, s): 1 + the first layer past float32's range (metrics NaN from there), 0 = none
        "range_exceeded_layer": stack.inputs.get("range_exceeded_layer"),
        "theory": _theory(config, stack),
    }


def arrays(result: DepthResult) -> dict[str, Any]:
    """The contents of results.npz: "<stack>__input__<m>" (seeds, s), "<stack>__<m>" (seeds, s,
    layers), "<stack>__per_head__<m>" (seeds, s, layers, heads)."""
    out: dict[str, Any] = {"bias_norms": np.asarray(result.config.bias_norms)}
    for name, stack in result.stacks.items():
        out.update({f"{name}__input__{k}": v for k, v in stack.inputs.items()})
        out.update({f"{name}__{k}": v for k, v in stack.per_layer.items()})
        out.update({f"{name}__per_head__{k}": v for k, v in stack.per_head.items()})
    return out


def write(result: DepthResult, workdir: pathlib.Path, provenance: results.Provenance,
          config: Any) -> dict:
    """results.npz, figures/*.png, then results.json (last, atomically); returns its dict."""
    cfg = result.config
    stacks = {name: stack_summary(cfg, stack) for name, stack in result.stacks.items()}
    doc = results.to_jsonable({
        "provenance": provenance.finish("depth"), "config": config, "depth_config": cfg,
        "bias_norms": list(cfg.bias_norms), "num_layers": cfg.num_layers,
        "stacks": stacks, "chunk_layout": result.layout, "num_devices": result.num_devices,
        "num_processes": result.num_processes, "chunks_computed": result.chunks_computed,
        "chunks_loaded": result.chunks_loaded, "seconds": result.seconds})
    for name, make in depth_plots.FIGURES.items():
        results.save_figure(make(doc), pathlib.Path(workdir) / "figures" / f"{name}.png")
    results.write_npz(pathlib.Path(workdir) / "results.npz", arrays(result))
    results.write_json(pathlib.Path(workdir) / "results.json", doc)
    return doc


def format_table(doc: Mapping[str, Any]) -> str:
    """Per stack and bias norm: cosine and effective rank at depths 0, 1, N/4, N/2, N, and the
    first depth where the mean cosine reaches 0.9."""
    n, s = doc["num_layers"], doc["bias_norms"]
    cols = sorted({0, 1, max(1, n // 4), max(1, n // 2), n})
    head = " ".join(f"{'cos@' + str(c):>8}" for c in cols) + " " + " ".join(
        f"{'erank@' + str(c):>9}" for c in cols)
    lines = [f"{'stack':>20} {'s':>7} {head} {'d(cos>=.9)':>10}"]
    for name, st in doc["stacks"].items():
        cos = st["curves"]["average_cosine"]["mean"]
        rank = st["curves"]["effective_rank"]["mean"]
        for j, sj in enumerate(s):
            d = st["depth_to_cosine_0.9"]["mean_curve"][j]
            lines.append(f"{name:>20} {sj:7.3g} " + " ".join(f"{float(cos[j][c]):8.3f}" for c in cols)
                         + " " + " ".join(f"{float(rank[j][c]):9.2f}" for c in cols)
                         + f" {'-' if d is None else d:>10}")
    return "\n".join(lines)


_ARCH_NAMES = {"post": "post", "pre": "pre", "attention_only": "attention-only"}


def markdown_table(doc: Mapping[str, Any], rows: Sequence[tuple[str, float]] | None = None
                   ) -> str:
    """Markdown: per (stack, s) of `rows` (default: every stack × every s), the average cosine
    and effective rank at the input and at the deepest layer (mean over seeds), and the first
    depth where the mean cosine reaches 0.9 ('never' if it does not). docs/DEPTH.md embeds it
    (anisotropy_jax/doc_tables.py)."""
    n, norms = doc["num_layers"], [float(s) for s in doc["bias_norms"]]
    rows = rows or [(name, s) for name in doc["stacks"] for s in norms]
    lines = [f"| stack | s | cos@0 | cos@{n} | eff. rank@0 | eff. rank@{n} | depth cos ≥ 0.9 |",
             "|---|---|---|---|---|---|---|"]
    for name, s in rows:
        st, j = doc["stacks"][name], norms.index(float(s))
        cos = st["curves"]["average_cosine"]["mean"][j]
        rank = st["curves"]["effective_rank"]["mean"][j]
        depth = st["depth_to_cosine_0.9"]["mean_curve"][j]
        label = f"{_ARCH_NAMES.get(st['architecture'], st['architecture'])} D={st['width']}"
        lines.append(f"| {label} | {s:g} | {cos[0]:.3f} | {cos[-1]:.3f} | {rank[0]:.3g} | "
                     f"{rank[-1]:.3g} | {'never' if depth is None else depth} |")
    return "\n".join(lines)
