"""Writing the embedding-isotropy study: tokenizer.json, results.npz, figures/*.png, then
results.json (last, atomically), and the tables docs/EMBEDDINGS.md quotes.

results.json: `provenance`, `config` (as given), `embeddings_config` (validated), `widths`,
`seeds`, `steps`, `data` (token counts), `num_params` (W,), `isotropy`
{"<input|output|output_scaled>_<raw|centered>_<one_sign|sign_free>" and the controls of
`train.measure` ("output_<equalnorm|meangain|rowdir>_<raw|centered>_<c>",
"<matrix>_unitnorm_<raw|centered>_<c>", "<matrix>_gaussian_raw_<c>"): {"per_seed": (W, S, C),
"mean": (W, C)}}, `gain_direction` {"<raw|centered>": the sign-free difference
I(W·diag γ) − I(W·c) at equal Frobenius norm, {"per_seed": (W, S, C), "mean", "low", "high":
(W, C) (a 95 % Student-t interval over the seeds, the independent units; null with one seed),
"positive": (W, C) seeds with a difference > 0, "n": S}}, `stats`
{"<matrix>_<relative_drift|mean_norm|isoscore>", "final_gain_<mean|std|frobenius_ratio>":
(W, S, C)},
`val_loss` (W, S, C), `train_loss` (W, S, C: mean training loss of the updates since the previous
measured step; null at step 0), `last_block` {"rankme", "alpha_req": (W, S, C)} (RankMe and α-ReQ
of the last block's output, the input of the final LayerNorm, over the B·L tokens of the first
validation batch: Li et al.'s compression phase, `studies.report.compression`), `run_seconds`
(W, S), `seconds`.
results.npz: "train_loss" (W, S, steps), "steps", "token_counts" (V,) and
"proj__<matrix>_<raw|centered>" (W, C, V, 2), the 2-D SVD projections of the first seed.

The tables: `python -m anisotropy_jax.studies.embeddings.report RESULTS_JSON`; the figures
again from the files: `python -m anisotropy_jax.studies.embeddings.report RESULTS_JSON --figures`
(reads results.npz beside results.json, writes figures/ there).
"""
from __future__ import annotations

import dataclasses
import pathlib
import sys
from typing import Any, Mapping

import numpy as np

from anisotropy_jax import results
from anisotropy_jax.configs.embeddings import EmbeddingsConfig
from anisotropy_jax.metrics.correlation import t_interval
from anisotropy_jax.plotting import embeddings as plots


Doc = Mapping[str, Any]
LABELS = {"output_scaled": "output × γ", "output_meangain": "output × mean γ"}
VARIANTS = ("raw", "centered")
KEY_COLUMNS = (("raw", "one_sign"), ("raw", "sign_free"), ("centered", "one_sign"),
               ("centered", "sign_free"))


@dataclasses.dataclass(frozen=True)
class EmbeddingsResult:
    """The study's measurements; W widths, S seeds, C measured steps, V vocabulary entries.

    Attributes:
      config: the validated config.
      steps: (C,) measured steps (0 = the init).
      isotropy: {"<input|output|output_scaled>_<raw|centered>_<one_sign|sign_free>": (W, S, C)},
        `metrics.embedding_isotropy`, and the controls of `train.measure`
        ("output_<equalnorm|meangain|rowdir>_<raw|centered>_<convention>",
        "<matrix>_unitnorm_<raw|centered>_<convention>", "<matrix>_gaussian_raw_<convention>").
      stats: {"<matrix>_<relative_drift|mean_norm|isoscore>",
        "final_gain_<mean|std|frobenius_ratio>": (W, S, C)}.
      val_loss: (W, S, C) validation cross-entropy, nats per token.
      train_loss: (W, S, steps) training loss of every update.
      last_block: {"rankme", "alpha_req": (W, S, C)} of the last block's output on the first
        validation batch (`metrics.spectrum_metrics`).
      projections: {"<matrix>_<raw|centered>": (W, C, V, 2)} 2-D SVD projections, first seed.
      num_params: (W,) parameters per model.
      run_seconds: (W, S) wall time per model, compilation included.
      token_counts: (V,) occurrences of each id in the training stream.
      tokenizer_json: the trained tokenizer (tokenizer.json text).
      data: token and character counts of both sides; `unused_ids`, ids that never occur in
        the training stream (their input rows only decay).
      seconds: wall time of `run`.
    """

    config: EmbeddingsConfig
    steps: np.ndarray
    isotropy: dict[str, np.ndarray]
    stats: dict[str, np.ndarray]
    val_loss: np.ndarray
    train_loss: np.ndarray
    projections: dict[str, np.ndarray]
    num_params: np.ndarray
    run_seconds: np.ndarray
    token_counts: np.ndarray
    tokenizer_json: str
    data: dict[str, int]
    seconds: float
    last_block: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)


def _interval_train_loss(result: EmbeddingsResult) -> np.ndarray:
    """(W, S, C): mean training loss of the updates between consecutive measured steps."""
    steps = [int(s) for s in result.steps]
    out = np.full(result.val_loss.shape, np.nan)
    for c in range(1, len(steps)):
        out[:, :, c] = result.train_loss[:, :, steps[c - 1]:steps[c]].mean(axis=-1)
    return out


def gain_direction(isotropy: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """results.json "gain_direction" (module docstring) from the isotropy arrays (W, S, C): what
    the direction-dependence of the final gain does, beside the scale it adds."""
    out = {}
    for variant in VARIANTS:
        diff = (np.asarray(isotropy[f"output_scaled_{variant}_sign_free"], np.float64)
                - np.asarray(isotropy[f"output_equalnorm_{variant}_sign_free"], np.float64))
        n = diff.shape[1]
        interval = t_interval(diff, axis=1) if n >= 2 else {"low": None, "high": None}
        out[variant] = {"per_seed": diff, "mean": diff.mean(axis=1), "low": interval["low"],
                        "high": interval["high"], "positive": np.sum(diff > 0, axis=1), "n": n}
    return out


def document(result: EmbeddingsResult, provenance: dict, config: Any) -> dict:
    """The results.json dict (module docstring)."""
    cfg = result.config
    train_loss = _interval_train_loss(result)
    return results.to_jsonable({
        "provenance": provenance, "config": config, "embeddings_config": cfg,
        "widths": list(cfg.widths), "seeds": list(cfg.seeds), "steps": result.steps,
        "vocab_size": cfg.vocab_size, "data": result.data, "num_params": result.num_params,
        "isotropy": {k: {"per_seed": v, "mean": v.mean(axis=1)}
                     for k, v in sorted(result.isotropy.items())},
        "gain_direction": gain_direction(result.isotropy),
        "stats": dict(sorted(result.stats.items())), "val_loss": result.val_loss,
        "train_loss": [[[None if np.isnan(x) else float(x) for x in s] for s in w]
                       for w in train_loss],
        "last_block": dict(sorted(result.last_block.items())),
        "run_seconds": result.run_seconds, "seconds": result.seconds})


def write(result: EmbeddingsResult, workdir: str | pathlib.Path, provenance: results.Provenance,
          config: Any = None) -> dict:
    """tokenizer.json, results.npz, figures/*.png, then results.json (last); returns its dict."""
    workdir = pathlib.Path(workdir)
    results.write_text(workdir / "tokenizer.json", result.tokenizer_json)
    results.write_npz(workdir / "results.npz", {
        "steps": result.steps, "train_loss": result.train_loss,
        "token_counts": result.token_counts,
        **{f"proj__{k}": v for k, v in result.projections.items()}})
    doc = document(result, provenance.finish("embeddings"), config)
    write_figures(doc, {f"proj__{k}": v for k, v in result.projections.items()},
                  result.token_counts, workdir / "figures")
    results.write_json(workdir / "results.json", doc)
    return doc


def write_figures(doc: Doc, projections: Mapping[str, np.ndarray], token_counts: np.ndarray,
                  folder: pathlib.Path) -> None:
    """figures/isotropy.png, training.png and svd_D<width>.png from the results.json dict and
    the npz's "proj__*" arrays (W, C, V, 2) (so they can be redrawn from the files)."""
    results.save_figure(plots.isotropy(doc), folder / "isotropy.png", dpi=80)
    results.save_figure(plots.training(doc), folder / "training.png", dpi=80)
    for i, width in enumerate(doc["widths"]):
        grid = {k.removeprefix("proj__"): v[i] for k, v in projections.items()}
        results.save_figure(plots.svd_grid(grid, doc["steps"], width, token_counts),
                            folder / f"svd_D{width}.png", dpi=65)


def _value(per_seed_S: list[float]) -> str:
    """One seed: the value; several: mean [min, max]."""
    v = np.asarray(per_seed_S, float)
    if len(v) == 1:
        return f"{v[0]:.3g}"
    return f"{v.mean():.3g} [{v.min():.3g}, {v.max():.3g}]"


def format_table(doc: Doc, steps: tuple[int, ...] | None = None) -> str:
    """Markdown: partition isotropy per width, matrix and step (default: first and last), in
    both sign conventions, raw and centred; an isotropic Gaussian of the raw matrix's shape and
    norm (sign-free); the matrix's mean row norm. Rows "output × mean γ" are the control."""
    all_steps = list(doc["steps"])
    columns = [all_steps.index(s) for s in (steps or (all_steps[0], all_steps[-1]))]
    head = " | ".join(f"{v}, {c.replace('_', ' ')}" for v, c in KEY_COLUMNS)
    lines = [f"| D | matrix | step | {head} | Gaussian, equal norm | mean ‖row‖ |",
             "|" + " --- |" * (5 + len(KEY_COLUMNS))]
    iso = doc["isotropy"]
    for i, width in enumerate(doc["widths"]):
        for matrix in plots.ROWS:
            for c in columns:
                def cell(key):
                    return _value([s[c] for s in iso[key]["per_seed"][i]])
                cells = [cell(f"{matrix}_{v}_{k}") for v, k in KEY_COLUMNS]
                gaussian = f"{matrix}_gaussian_raw_sign_free"
                cells.append(cell(gaussian) if gaussian in iso else "")
                stat = doc["stats"].get(f"{matrix}_mean_norm")
                cells.append("" if stat is None else _value([s[c] for s in stat[i]]))
                label = LABELS.get(matrix, matrix)
                lines.append(f"| {width} | {label} | {all_steps[c]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_unitnorm_table(doc: Doc) -> str:
    """Markdown: the scale control, sign-free partition isotropy of each matrix rescaled to mean
    row norm 1, at the first and last step."""
    steps, iso = list(doc["steps"]), doc["isotropy"]
    names = [(m, v) for m in plots.MATRICES for v in VARIANTS]
    lines = ["| D | step | " + " | ".join(f"{LABELS.get(m, m)}, {v}" for m, v in names) + " |",
             "|" + " --- |" * (2 + len(names))]
    for i, width in enumerate(doc["widths"]):
        for c in (0, len(steps) - 1):
            cells = [_value([s[c] for s in iso[f"{m}_unitnorm_{v}_sign_free"]["per_seed"][i]])
                     for m, v in names]
            lines.append(f"| {width} | {steps[c]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_gain_table(doc: Doc) -> str:
    """Markdown: the final gain's controls at the last step, sign-free, per width, raw and
    centred: I(W·diag γ), I(W·c) at equal Frobenius norm, their difference (mean over seeds
    [95 % t-interval], seeds > 0 of n), I(W·mean γ), the random-row-direction control, mean γ and
    c. Each cell of I: mean [min, max] over the seeds."""
    iso, stats, last = doc["isotropy"], doc["stats"], len(doc["steps"]) - 1
    lines = ["| D | variant | output × γ | output × c (equal norm) | difference [95 % t] | "
             "seeds > 0 | output × mean γ | random row directions | mean γ | c |",
             "|" + " --- |" * 10]
    for i, width in enumerate(doc["widths"]):
        def cell(values):
            return _value([s[last] for s in values[i]])
        for variant in VARIANTS:
            g = doc["gain_direction"][variant]
            low, high = (None, None) if g["low"] is None else (g["low"][i][last],
                                                               g["high"][i][last])
            interval = "" if low is None else f" [{low:+.4f}, {high:+.4f}]"
            cells = [cell(iso[f"output_{m}_{variant}_sign_free"]["per_seed"])
                     for m in ("scaled", "equalnorm")]
            cells += [f"{g['mean'][i][last]:+.4f}{interval}", f"{g['positive'][i][last]} of {g['n']}"]
            cells += [cell(iso[f"output_{m}_{variant}_sign_free"]["per_seed"])
                      for m in ("meangain", "rowdir")]
            cells += [cell(stats[f"final_gain_{k}"]) for k in ("mean", "frobenius_ratio")]
            lines.append(f"| {width} | {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_loss_table(doc: Doc) -> str:
    """Markdown: per width, parameters, validation loss at every measured step, wall time."""
    steps = doc["steps"]
    lines = ["| D | parameters | " + " | ".join(f"val loss @{s}" for s in steps) + " | s/model |",
             "|" + " --- |" * (3 + len(steps))]
    for i, width in enumerate(doc["widths"]):
        losses = [_value([s[c] for s in doc["val_loss"][i]]) for c in range(len(steps))]
        seconds = np.mean(doc["run_seconds"][i])
        lines.append(f"| {width} | {doc['num_params'][i]:,} | " + " | ".join(losses)
                     + f" | {seconds:.0f} |")
    return "\n".join(lines)


def format_report(doc: Doc) -> str:
    """What the script prints: data, the loss table and the isotropy table."""
    data = doc["data"]
    head = (f"BPE vocabulary {doc['vocab_size']}: {data['train_tokens']:,} training tokens "
            f"({data['train_chars'] / max(data['train_tokens'], 1):.2f} chars/token), "
            f"{data['val_tokens']:,} validation tokens, {data['unused_ids']} ids unused in "
            f"training; seeds {doc['seeds']}")
    parts = [head, format_loss_table(doc), format_table(doc),
             "Scale control: sign-free partition isotropy at mean row norm 1",
             format_unitnorm_table(doc)]
    if "gain_direction" in doc:  # results written before the gain's controls have none
        parts += [f"The final gain's controls at step {doc['steps'][-1]} (sign-free)",
                  format_gain_table(doc)]
    return "\n\n".join(parts)


def _main(argv: list[str]) -> None:
    path = pathlib.Path(argv[1])
    doc = results.read_results(path)
    if "--figures" in argv[2:]:
        with np.load(path.with_name("results.npz")) as f:
            arrays = {k: f[k] for k in f.files}
        write_figures(doc, {k: v for k, v in arrays.items() if k.startswith("proj__")},
                      arrays["token_counts"], path.parent / "figures")
    print(format_report(doc))


if __name__ == "__main__":
    _main(sys.argv)
