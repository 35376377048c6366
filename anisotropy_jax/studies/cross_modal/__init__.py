"""The cross-modal comparison (Godey et al. 2023; docs/CROSS_MODAL.md): per-layer average cosine of
every offline model of every modality beside its untrained re-initialisation, on one plot against
relative depth, and a table — built from the per-model results.json files of the pretrained
study (`report.write`), so the figure and table always come from committed raw results.

  MODELS        name → (modality, architecture, locator: () → model_dir or None if absent)
  check_models  every installed model's requirements, checked before the first one runs
  run_models    runs the pretrained study for each installed model into workdir/<name>/
                (skipping those whose results.json exists when `reuse`); writes through
                studies.pretrained.report
  collect       workdir/<name>/results.json → per model: labels, relative depth, curves (the
                average cosine; per_layer: average, cross-sequence and centred cosine, trained
                and every untrained seed) and its scope (`scope`)
  table         the markdown table of `collect`'s output (average cosine)
  seed_table    per state: trained against the untrained seeds (cross-sequence cosine)
  write         figures/cross_modal.png, cross_modal.md, results.json (last)
  STUDY         the study protocol (experiments/cross_modal.py): run_models then collect, write,
                the table

The CNN is an untrained ResNet-50 (no trained ResNet is available offline): its architecture from
`models.families.resnet.RESNET50`, measured through the same study (media_inputs) with the weights left
out, so only its untrained curve exists. The reproduction's vision/speech study is this comparison
on its models (`reproduce.runner.run_modalities`). Relative depth of state i of S states:
i / (S − 1) (0 = embedding output, 1 = the last state: the final norm where the family has one,
pooled features for the CNN).
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Any, Callable

import numpy as np

from anisotropy_jax import results as results_lib
from anisotropy_jax.config import ConfigError, from_mapping
from anisotropy_jax.configs.pretrained import CrossModalConfig
from anisotropy_jax.models.families import bert, mpnet, resnet, vit, whisper
from anisotropy_jax.models import packaged
from anisotropy_jax.models.formats import gguf
from anisotropy_jax.plotting import cross_modal as plots
from anisotropy_jax.protocol import SILENT, Progress, Study
from anisotropy_jax.studies.pretrained import analysis, media_inputs, report

def _parent(path: pathlib.Path | None) -> pathlib.Path | None:
    return None if path is None else path.parent


MODELS: dict[str, tuple[str, str, Callable[[], Any]]] = {
    "all-MiniLM-L6-v2": ("text", "transformer", bert.packaged_minilm_dir),
    "paraphrase-MiniLM-L3-v2": ("text", "transformer", packaged.minilm_l3_dir),
    "all-mpnet-base-v2": ("text", "transformer", mpnet.packaged_mpnet_dir),
    "SmolLM2-135M-Instruct": ("text", "transformer",
                              lambda: _parent(gguf.packaged_smollm2_gguf())),
    "DINOv2-S": ("image", "transformer", vit.packaged_dinov2_onnx),
    "ResNet-50-untrained": ("image", "cnn", lambda: "untrained"),
    "Whisper-tiny.en": ("audio", "transformer", whisper.packaged_tiny_en_dir),
    "Whisper-base": ("audio", "transformer", whisper.packaged_base_dir),
}


def _untrained_resnet_inputs(config) -> analysis.Inputs:
    """ResNet-50's architecture without weights (untrained only) on the default or given
    images, checked like any image model."""
    family = resnet.FAMILY
    cfg = family.config_from_hf(resnet.RESNET50, config.precision)
    model = analysis.PretrainedModel(pathlib.Path("ResNet-50 (architecture, no weights)"),
                                     dict(resnet.RESNET50), cfg, None, [], None, family)
    media = media_inputs.load(family, cfg, None, config)  # no preprocessor config: DINOv2 default
    return analysis.Inputs(config, model, media.names, len(media.names), media.source, media)


def _model_inputs(config: CrossModalConfig, name: str) -> analysis.Inputs | None:
    """The checked inputs of model `name` (analysis.validate), or None when it is not
    installed."""
    model_dir = MODELS[name][2]()
    if model_dir is None:
        return None
    if model_dir == "untrained":
        return _untrained_resnet_inputs(config.pretrained)
    return analysis.validate(dataclasses.replace(config.pretrained, model_dir=str(model_dir)))


def check_models(config: CrossModalConfig, workdir: str | os.PathLike) -> None:
    """Every requirement of every model that `run_models` will measure (weights, tokenizer,
    text, images, speech: the offline defaults or the `inputs` folder), checked before the first
    model runs: a one-line ConfigError naming the field otherwise. The inputs are read and
    dropped (run_models reads them again, one model at a time, to keep one model in memory)."""
    workdir = pathlib.Path(workdir)
    for name in config.models:
        if not (config.reuse and (workdir / name / "results.json").is_file()):
            _model_inputs(config, name)


def run_models(config: CrossModalConfig, workdir: str | os.PathLike,
               progress: Progress = SILENT) -> dict[str, str]:
    """Runs the pretrained study for every model of config.models that is installed, into
    workdir/<name>/ (a line each: reused, skipped, or its inputs); returns {name: why it was
    skipped} for the others."""
    workdir, skipped = pathlib.Path(workdir), {}
    for name in config.models:
        out = workdir / name
        if config.reuse and (out / "results.json").is_file():
            progress.say(f"{name}: reusing {out / 'results.json'}")
            continue
        inputs = _model_inputs(config, name)
        if inputs is None:
            skipped[name] = "not installed (scripts/install.sh models)"
            progress.say(f"{name}: skipped, {skipped[name]}")
            continue
        progress.say(f"{name}: {len(inputs.sentences)} inputs from {inputs.text_source}")
        shortfall = analysis.shortfall(inputs)
        if shortfall:
            progress.say(f"{name}: {shortfall}")
        provenance = results_lib.Provenance()
        # within(name): each forward's bar and each untrained seed, named by the model
        report.write(analysis.run(inputs.config, inputs, progress.within(name)), out,
                     provenance)
    return skipped


# The per-state metrics `collect` keeps for the trained model and every untrained seed.
PER_LAYER_METRICS = ("average_cosine", "cross_sequence_cosine", "centered_average_cosine")
# What a model's tokens are (for the scope of a claim): none of these models is character-level.
UNITS = {"text": "subword tokens", "image": "patches (+ prefix tokens)", "audio": "20 ms frames"}
# Which default inputs are synthetic (media_inputs' sources); text is natural text.
SYNTHETIC = {media_inputs.SKIMAGE_SOURCE: ("real photographs", False),
             media_inputs.ESPEAK_SOURCE: ("espeak-ng speech", True),
             media_inputs.FORMANT_SOURCE: ("formant speech (numpy synthesiser)", True)}


def scope(name: str, doc: dict[str, Any]) -> dict[str, Any]:
    """What a model's measurement covers, from its results.json: modality, architecture
    ('transformer' | 'cnn'), weights ('trained' | 'random-init only'), inputs (what they are)
    and inputs_synthetic (True | False | None: a user folder, unknown), units (what a token
    is), character_level (False for every model here)."""
    modality, architecture, _ = MODELS[name]
    source = doc["data"].get("inputs_source") or doc["data"].get("text_source")
    if modality == "text":
        inputs, synthetic = f"natural text: {source}", False
    else:
        inputs, synthetic = SYNTHETIC.get(source, (f"user inputs: {source}", None))
    units = "CNN positions (pooled last)" if architecture == "cnn" else UNITS[modality]
    return {"modality": modality, "architecture": architecture,
            "weights": "trained" if "trained" in doc["metrics"] else "random-init only",
            "inputs": inputs, "inputs_synthetic": synthetic, "units": units,
            "character_level": False}


def _per_layer(doc: dict[str, Any], metric: str) -> dict[str, Any]:
    """{"trained": list | None, "untrained": the seeds' mean, "untrained_low"/"_high" (95 %
    t-interval, None with one seed), "untrained_min"/"_max", "untrained_per_seed": one list per
    seed}. A results.json of one untrained seed (before untrained_seeds) reads as one seed."""
    seeds = doc.get("untrained_seeds") or {}
    if seeds:
        spread, per_seed = seeds["interval"][metric], seeds["metrics"][metric]
    else:
        one = doc["metrics"]["untrained"][metric]
        spread = {"mean": one, "low": [None] * len(one), "high": [None] * len(one),
                  "min": one, "max": one}
        per_seed = [one]
    trained = doc["metrics"].get("trained", {}).get(metric)
    return {"trained": trained, "untrained": spread["mean"],
            **{f"untrained_{k}": spread[k] for k in ("low", "high", "min", "max")},
            "untrained_per_seed": per_seed}


def collect(workdir: str | os.PathLike, names: tuple[str, ...]) -> dict[str, Any]:
    """{name: {"modality", "architecture", "labels", "depth", "trained"?, "untrained",
    "source", "inputs", "untrained_seeds", "per_layer", "scope"}} of every name with a
    workdir/<name>/results.json. "trained"/"untrained": the average cosine per state (untrained:
    the mean over the untrained seeds); "untrained_seeds": their seeds; "per_layer": metric of
    PER_LAYER_METRICS present → `_per_layer`; "scope": `scope`."""
    out = {}
    for name in names:
        path = pathlib.Path(workdir) / name / "results.json"
        if not path.is_file():
            continue
        doc = results_lib.read_results(path)
        labels = doc["model"]["state_labels"]
        entry = {"modality": MODELS[name][0], "architecture": MODELS[name][1],
                 "labels": labels, "depth": list(np.linspace(0.0, 1.0, len(labels))),
                 "source": str(path), "inputs": doc["data"].get("text_source")}
        for run, values in doc["metrics"].items():
            entry[run] = values["average_cosine"]
        entry["untrained_seeds"] = ((doc.get("untrained_seeds") or {}).get("seeds")
                                    or [doc.get("config", {}).get("seed", 0)])
        measured = ((doc.get("untrained_seeds") or {}).get("metrics")
                    or doc["metrics"]["untrained"])  # a one-seed file: its untrained run
        entry["per_layer"] = {m: _per_layer(doc, m) for m in PER_LAYER_METRICS if m in measured}
        entry["scope"] = scope(name, doc)
        out[name] = entry
    return out


def _fmt(values: list[float] | None, index) -> str:
    if values is None:
        return "—"
    picked = np.asarray(values)[index]
    return f"{picked.min():.2f}–{picked.max():.2f}" if picked.size > 1 else f"{picked.item():.2f}"


def table(models: dict[str, Any]) -> str:
    """Markdown: per model, the average cosine trained / untrained over the intermediate states
    (all but the first and the last: min–max), at the last state, and the count of states where
    trained exceeds untrained."""
    lines = ["| model | modality | states (last) | intermediate states: trained | untrained | "
             "last state: trained | untrained | states with trained > untrained |",
             "|---|---|---|---|---|---|---|---|"]
    for name, m in models.items():
        inner = slice(1, len(m["labels"]) - 1)
        trained, untrained = m.get("trained"), m["untrained"]
        above = ("—" if trained is None else
                 f"{int(np.sum(np.asarray(trained) > np.asarray(untrained)))} of {len(untrained)}")
        lines.append(f"| {name} | {m['modality']} ({m['architecture']}) | {len(m['labels'])} "
                     f"({m['labels'][-1]}) | {_fmt(trained, inner)} | {_fmt(untrained, inner)} | "
                     f"{_fmt(trained, -1)} | {_fmt(untrained, -1)} | {above} |")
    return "\n".join(lines)


def _cell(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def seed_table(models: dict[str, Any], metric: str = "cross_sequence_cosine") -> str:
    """Markdown, one row per state of every model: `metric` trained, and over the untrained
    seeds their mean, 95 % t-interval and [min, max], and whether trained lies above their max;
    the model's scope (inputs, weights) in its first row."""
    lines = [f"| model | state | {metric}: trained | untrained mean | 95 % t-interval | "
             f"[min, max] over seeds | trained > every seed | scope |",
             "|---|---|---|---|---|---|---|---|"]
    for name, m in models.items():
        curve = m.get("per_layer", {}).get(metric)
        if curve is None:
            continue
        sc, k = m["scope"], len(m["untrained_seeds"])
        for i, label in enumerate(m["labels"]):
            trained = None if curve["trained"] is None else curve["trained"][i]
            above = "—" if trained is None else str(trained > curve["untrained_max"][i])
            lines.append(
                f"| {name} | {label} | {_cell(trained)} | {_cell(curve['untrained'][i])} | "
                f"[{_cell(curve['untrained_low'][i])}, {_cell(curve['untrained_high'][i])}] | "
                f"[{_cell(curve['untrained_min'][i])}, {_cell(curve['untrained_max'][i])}] | "
                f"{above} | " + (f"{sc['inputs']}; {sc['weights']}; {k} untrained seeds |"
                                 if i == 0 else "|"))
    return "\n".join(lines)


def write(models: dict[str, Any], skipped: dict[str, str], workdir: str | os.PathLike,
          provenance: results_lib.Provenance) -> dict[str, Any]:
    """figures/cross_modal.png, cross_modal.md (`table`, then `seed_table`), then results.json
    (last; with the command that made it, `provenance.command`)."""
    workdir = pathlib.Path(workdir)
    results_lib.save_figure(plots.cross_modal_figure(models), workdir / "figures" /
                            "cross_modal.png")
    results_lib.write_text(workdir / "cross_modal.md", table(models) + "\n\n"
                           + seed_table(models) + "\n")
    out = {"provenance": provenance.finish("cross_modal"), "command": provenance.command, "models": models,
           "skipped": skipped}
    results_lib.write_json(workdir / "results.json", out)
    return out


# --------------------------------------------------------------------------------------------
# The study protocol (experiments/cross_modal.py)

@dataclasses.dataclass(frozen=True)
class Plan:
    config: CrossModalConfig
    workdir: pathlib.Path


@dataclasses.dataclass(frozen=True)
class Measured:
    models: dict[str, Any]   # `collect`
    skipped: dict[str, str]  # name: why it was not measured


def _validate(config: Any, workdir: pathlib.Path) -> Plan:
    """The config, then every model's requirements (`check_models`), before any model runs."""
    plan = Plan(from_mapping(CrossModalConfig, config), pathlib.Path(workdir))
    check_models(plan.config, plan.workdir)
    return plan


def _run(plan: Plan, progress: Progress) -> Measured:
    """`run_models`, then `collect`; ConfigError when no model was measured."""
    skipped = run_models(plan.config, plan.workdir, progress)
    models = collect(plan.workdir, plan.config.models)
    if not models:
        raise ConfigError(f"models: none measured "
                          f"({'; '.join(f'{k}: {v}' for k, v in skipped.items())})")
    return Measured(models, skipped)


def _format(doc: dict[str, Any], workdir: pathlib.Path) -> str:
    skipped = doc["skipped"]
    return (f"{table(doc['models'])}\nwrote {workdir}/results.json, cross_modal.md, "
            f"figures/cross_modal.png" + (f"; skipped {sorted(skipped)}" if skipped else ""))


def _write(measured: Measured, workdir: pathlib.Path, provenance: results_lib.Provenance
           ) -> dict[str, Any]:
    return write(measured.models, measured.skipped, workdir, provenance)


STUDY = Study(_validate, _run, _write, _format)
