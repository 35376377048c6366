"""Files and the printed table of a pretrained-model run (experiments/pretrained.py).

`write(result, workdir, provenance)` writes, each atomically (`anisotropy_jax.results`):
  config.json        the resolved PretrainedConfig
  sentences.txt      the sentences measured, one per line (inputs.txt for image and audio
                     models: one line per image or utterance, its file or the words spoken)
  report.txt         `format_report(result)`
  figures/cosine_by_layer.png, drift_by_layer.png, isotropy_by_layer.png, drift_vs_cosine.png
  hidden_states[_untrained].npz   with config.save_hidden_states: layer_0 … layer_L, each (N, D)
                     float32 in (sentence, position) order, plus token_ids, sentence_index,
                     position, special (image/audio models: layer_i (N_i, D_i) and input_index_i
                     per state, token counts and widths may differ between states)
  results.json       LAST: provenance, config, model (with state_labels), layers, metrics,
                     correlations, embeddings (partition isotropy), untrained_seeds (each
                     re-initialisation's values and the per-state intervals over them:
                     states.seed_summary), data, timing
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Any, Callable, Sequence

from anisotropy_jax import results as results_lib
from anisotropy_jax.plotting import pretrained as plots
from anisotropy_jax.studies.pretrained.analysis import PretrainedResult
from anisotropy_jax.studies.pretrained.states import TokenStates

TABLE_METRICS = ("average_cosine", "centered_average_cosine", "centering_removed_share",
                 "cross_sequence_cosine", "within_sequence_cosine", "sampled_pair_cosine",
                 "drift_norm", "relative_drift", "isoscore", "effective_rank", "twonn_dimension",
                 "gride_dimension")
SHORT_NAMES = {"average_cosine": "avg_cos", "centered_average_cosine": "centred_cos",
               "centering_removed_share": "removed", "cross_sequence_cosine": "cross_cos",
               "within_sequence_cosine": "within_cos", "sampled_pair_cosine": "sampled_cos",
               "drift_norm": "drift", "relative_drift": "rel_drift", "isoscore": "isoscore",
               "effective_rank": "eff_rank", "effective_rank_centered": "eff_rank_c",
               "top_pc_variance_ratio": "top_pc", "mean_norm": "mean_norm",
               "twonn_dimension": "twonn", "gride_dimension": "gride_8_16"}


def summary(result: PretrainedResult, provenance: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    """The results.json dict (also what `plotting.pretrained` takes)."""
    return {"provenance": provenance, "config": dataclasses.asdict(result.config),
            "model": result.model, "layers": result.layers, "metrics": result.metrics,
            "correlations": result.correlations, "embeddings": result.embeddings,
            "untrained_seeds": result.untrained_seeds, "data": result.data,
            "timing": result.timing}


def format_report(doc: dict[str, Any], names: Sequence[str] = TABLE_METRICS) -> str:
    """The per-layer table and the correlations of a results.json dict (`summary`) as plain
    text (what the script prints)."""
    lines = []
    labels = doc["model"].get("state_labels") or [str(i) for i in doc["layers"]]
    seeds = doc.get("untrained_seeds", {}).get("seeds")
    for run, values in doc["metrics"].items():
        names = [n for n in names if n in values]  # results of before a metric existed lack it
        lines.append(f"[{run}] state 0 = embedding output"
                     + ("; last = after the final norm" if labels[-1] == "final_norm" else "")
                     + (f"; mean over {len(seeds)} seeds {seeds}" if run == "untrained" and seeds
                        else ""))
        lines.append("state       " + " ".join(f"{SHORT_NAMES.get(n, n):>11}" for n in names))
        for layer in doc["layers"]:
            lines.append(f"{labels[layer]:<11} " + " ".join(_cell(values[n][layer])
                                                           for n in names))
        if run in doc["embeddings"]:  # the sign-conventions keys (not the *_raw/*_centred aliases)
            lines.append("  partition isotropy: " + ", ".join(
                f"{k} {v:.4g}" for k, v in doc["embeddings"][run].items()
                if k.endswith(("_one_sign", "_sign_free"))))
        for pair, c in doc["correlations"][run].items():
            lines.append(f"  {pair}: {_correlation(c)}")
    return "\n".join(lines)


def _correlation(c: dict[str, Any]) -> str:
    """One run's ρ with its p, or the untrained seeds' mean ρ with its range (`seed_means`)."""
    if "seeds" in c:
        return (f"spearman {c['spearman']:+.3f} [{c['spearman_min']:+.3f}, "
                f"{c['spearman_max']:+.3f}], pearson {c['pearson']:+.3f} "
                f"[{c['pearson_min']:+.3f}, {c['pearson_max']:+.3f}] (mean [range] over "
                f"{c['seeds']} seeds), n={c['n']}")
    return (f"spearman {c['spearman']:+.3f} (p={c['spearman_p']:.3g}), "
            f"pearson {c['pearson']:+.3f} (p={c['pearson_p']:.3g}), n={c['n']}")


def _cell(value: float | None) -> str:
    return f"{'-':>11}" if value is None else f"{value:>11.4f}"


def _hidden_arrays(states: TokenStates) -> dict[str, Any]:
    if "token_ids" not in states.tags:  # images, audio: states may differ in their tokens
        return {**{f"layer_{i}": x for i, x in enumerate(states.layers)},
                **{f"input_index_{i}": x for i, x in enumerate(states.index)}}
    arrays = {f"layer_{i}": layer for i, layer in enumerate(states.layers)}
    arrays.update(token_ids=states.tags["token_ids"], sentence_index=states.index[0],
                  position=states.position[0], special=states.tags["special"])
    return arrays


def write_measured(result: Any, workdir: str | os.PathLike, provenance: results_lib.Provenance,
                   study: str,
                   summary: Callable[..., dict[str, Any]], format_report: Callable[..., str],
                   own_files: Callable[[Any, pathlib.Path], None]) -> dict[str, Any]:
    """Writes a run measured on sampled sentences (this study's, the checkpoint series'):
    config.json (`result.config`), sentences.txt (`result.sentences`; inputs.txt where the
    result's data has an image or audio modality: those are not sentences) and report.txt
    (`format_report(summary(result))`), then `own_files(result, workdir)` (its figures and
    arrays), and results.json (`summary(result, provenance)`, its provenance naming `study`) LAST;
    returns that dict."""
    workdir = pathlib.Path(workdir)
    media = (getattr(result, "data", None) or {}).get("modality") in plots.MEDIA_MODALITIES
    results_lib.write_json(workdir / "config.json", result.config)
    results_lib.write_text(workdir / ("inputs.txt" if media else "sentences.txt"),
                           "\n".join(result.sentences) + "\n")
    results_lib.write_text(workdir / "report.txt", format_report(summary(result)) + "\n")
    own_files(result, workdir)
    out = summary(result, provenance.finish(study))
    results_lib.write_json(workdir / "results.json", out)
    return out


def _figures_and_states(result: PretrainedResult, workdir: pathlib.Path) -> None:
    curves = {**summary(result), "metrics": {  # None (undefined) plots as a gap
        run: {n: [float("nan") if v is None else v for v in vs] for n, vs in values.items()}
        for run, values in result.metrics.items()}}
    model_dir = pathlib.Path(result.model["model_dir"])
    name = model_dir.name if model_dir.name not in ("model", "data") else model_dir.parent.name
    figures = {
        "cosine_by_layer": plots.cosine_by_layer(curves, f"{name}: cosine similarity"),
        "drift_by_layer": plots.drift_by_layer(curves, f"{name}: drift"),
        "isotropy_by_layer": plots.isotropy_by_layer(curves, f"{name}: isotropy"),
        "drift_vs_cosine": plots.drift_vs_cosine(curves,
                                                 title=f"{name}: drift vs average cosine"),
    }
    for fig_name, fig in figures.items():
        results_lib.save_figure(fig, workdir / "figures" / f"{fig_name}.png")
    if result.config.save_hidden_states:
        for run, states in result.hidden_states.items():
            suffix = "" if run == "trained" else f"_{run}"
            results_lib.write_npz(workdir / f"hidden_states{suffix}.npz", _hidden_arrays(states))


def write(result: PretrainedResult, workdir: str | os.PathLike,
          provenance: results_lib.Provenance) -> dict[str, Any]:
    """Writes every output file (module docstring), results.json last; returns its dict."""
    return write_measured(result, workdir, provenance, "pretrained", summary, format_report,
                          _figures_and_states)
