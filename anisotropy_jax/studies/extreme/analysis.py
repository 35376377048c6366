"""The extreme-token study's measurement: every model of the config, every input kind, the
trained weights and `untrained_seeds` re-initialisations (the pretrained study's: the family's
`init_params` from the first half of split(key(seed))), one jitted forward each
(`layers.layer_statistics_fn`), summarised per layer (`summary.summarise`).

`validate(config)` loads every installed model and its inputs through the pretrained study's
`validate` (so the checks, the sentences and the media defaults are that study's) and lists the
models that are not installed; `run` measures.
"""
from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any

import jax

from anisotropy_jax.config import require
from anisotropy_jax.configs.pretrained import PretrainedConfig
from anisotropy_jax.configs.extreme import GEMMA3, QWEN25_CODER, ExtremeConfig
from anisotropy_jax.models.formats import gguf
from anisotropy_jax.protocol import SILENT, Progress
from anisotropy_jax.studies.extreme import inputs as inputs_lib
from anisotropy_jax.studies.extreme import intervention, layers, summary
from anisotropy_jax.studies.pretrained import analysis as pretrained
from anisotropy_jax.studies import cross_modal


# name → () → the model's folder or file, None when not installed: the cross-modal study's
# locators, and Gemma-3's and Qwen2.5-Coder's GGUFs (joined once from their packages' parts into
# the cache).
LOCATORS = {**{name: entry[2] for name, entry in cross_modal.MODELS.items()},
            GEMMA3: gguf.packaged_gemma3_gguf,
            **{name: (lambda size=size: gguf.packaged_qwen25_coder_gguf(size))
               for size, name in QWEN25_CODER.items()}}


@dataclasses.dataclass(frozen=True)
class Plan:
    """The checked config, every loaded model's pretrained-study inputs, and the models not
    installed (name → why)."""

    config: ExtremeConfig
    models: dict[str, pretrained.Inputs]
    skipped: dict[str, str]


def pretrained_config(config: ExtremeConfig, model_dir: str) -> PretrainedConfig:
    """The pretrained study's config that draws this study's sentences or media inputs: one
    batch of num_sentences (num_inputs) inputs, the whole text length up to max_length."""
    return PretrainedConfig(model_dir=model_dir, num_sentences=config.num_sentences,
                            min_words=config.min_words, max_words=config.max_words,
                            max_length=config.max_length, num_inputs=config.num_inputs,
                            batch_size=max(config.num_sentences, config.num_inputs),
                            seed=config.seed, untrained_seeds=config.untrained_seeds,
                            precision=config.precision)


def model_name(model_dir: str) -> str:
    """results.json's name of a checkpoint given by `model_dir`: its folder's name, or its file's
    without the .gguf / .onnx suffix."""
    path = pathlib.Path(model_dir)
    return path.stem if path.suffix in (".gguf", ".onnx") else path.name


def validate(config: ExtremeConfig) -> Plan:
    """Loads config.model_dir, or else every installed model of config.models, with its inputs
    (ConfigError naming the field on a bad setting); nothing is compiled."""
    if config.model_dir:
        name = model_name(config.model_dir)
        plan = Plan(config, {name: pretrained.validate(pretrained_config(config,
                                                                         config.model_dir))}, {})
        return _checked(plan)
    models, skipped = {}, {}
    for name in config.models:
        model_dir = LOCATORS[name]()
        if model_dir is None:
            skipped[name] = "not installed"
            continue
        models[name] = pretrained.validate(pretrained_config(config, str(model_dir)))
    return _checked(Plan(config, models, skipped))


def _checked(plan: Plan) -> Plan:
    """The plan; ConfigError (field `measure`) where the intervention is asked of an image or
    audio model: it measures text models on their natural inputs only."""
    media = [name for name, loaded in plan.models.items() if loaded.media is not None]
    require(plan.config.measure != "intervention" or not media, "measure",
            f"the intervention measures text models only; {', '.join(media)} is not one "
            f"(name text models in `models`)")
    return plan


def model_summary(model: pretrained.PretrainedModel) -> dict[str, Any]:
    """The architecture as results.json names it."""
    return {"model_dir": str(model.model_dir), "family": model.family.name,
            "modality": model.modality, "causal": bool(model.family.causal), **model.shape,
            "state_labels": list(model.labels), "num_parameters": model.num_parameters}


def batches(loaded: pretrained.Inputs, config: ExtremeConfig) -> dict[str, Any]:
    """{kind: InputBatch}: the text kinds of config.inputs, or the media model's natural one."""
    if loaded.media is not None:
        return inputs_lib.media_batch(loaded)
    return inputs_lib.text_batches(loaded.model, loaded.sentences, config.inputs, config.seed)


def _same_as(kinds: dict[str, inputs_lib.InputBatch]) -> dict[str, str]:
    """{kind: the earlier kind with identical tokens, mask and control keys}: a first-token kind
    is one of natural / repeated when the tokenizer already does what it asks."""
    seen, out = {}, {}
    for kind, batch in kinds.items():
        if batch.token_ids is None:
            continue
        key = (batch.token_ids.tobytes(), batch.mask_BxL.tobytes(), batch.token_ids.shape,
               None if batch.control_key_B is None else batch.control_key_B.tobytes())
        if key in seen:
            out[kind] = seen[key]
        else:
            seen[key] = kind
    return out


def measure_model(loaded: pretrained.Inputs, config: ExtremeConfig, progress: Progress = SILENT
                  ) -> dict[str, Any]:
    """One model: per input kind, the trained and every untrained seed's statistics, summarised
    (`summary.input_summary`), and the bytes kept per forward and per model."""
    model = loaded.model
    stats_fn = layers.layer_statistics_fn(model.family, model.config, config.top_k,
                                          config.top_dims)
    seeds = [config.seed + k for k in range(config.untrained_seeds)]
    runs = {"trained": model.params}
    runs.update({f"untrained_seed_{s}": None for s in seeds})
    kinds = batches(loaded, config)
    for line in inputs_lib.input_warnings(loaded, tuple(kinds)):
        progress.say(f"warning: {line}")
    raw: dict[str, dict[str, Any]] = {kind: {} for kind in kinds}
    same = _same_as(kinds)
    timing, stored, done = {}, 0, 0
    for run in runs:
        start = time.perf_counter()
        params = runs[run] if run == "trained" else model.family.init_params(
            model.config, jax.random.split(jax.random.key(int(run.rsplit("_", 1)[1])))[0])
        for kind, batch in kinds.items():
            begun, done = time.perf_counter(), done + 1
            if kind in same:  # the same tokens as an earlier kind: its statistics
                raw[kind][run] = raw[same[kind]][run]
                how = f"the tokens of {same[kind]}, reused"
            else:
                raw[kind][run] = layers.to_host(stats_fn(params, batch.inputs, batch.mask_BxL,
                                                         batch.control_key_B))
                how = f"{time.perf_counter() - begun:.1f} s"
            stored += layers.storage_bytes(raw[kind][run])
            progress.say(f"{run}, {kind}: {how} ({done}/{len(runs) * len(kinds)})")
        timing[f"{run}_seconds"] = time.perf_counter() - start
        progress.say(f"{run}: {len(kinds)} inputs in {timing[f'{run}_seconds']:.1f} s")
        del params
    out = {"model": model_summary(model),
           "data": {"source": loaded.text_source, "num_inputs": len(loaded.sentences)},
           "seeds": seeds, "timing": timing,
           "storage_bytes": {"per_model": stored, "per_forward": stored // (len(runs) * len(kinds))},
           "inputs": {kind: summary.input_summary(raw[kind], seeds, config.epsilon)
                      for kind in kinds}}
    for kind, batch in kinds.items():
        entry = out["inputs"][kind]
        entry["num_tokens"] = int(
            batch.mask_BxL.sum()) if batch.mask_BxL is not None else None
        if batch.token_ids is not None:
            first = batch.token_ids[batch.mask_BxL[:, 0], 0]
            entry["first_tokens"] = sorted({int(t) for t in first})
        if kind in same:
            entry["same_tokens_as"] = same[kind]
    return out


def measure_intervention(loaded: pretrained.Inputs, config: ExtremeConfig,
                         progress: Progress = SILENT) -> dict[str, Any]:
    """One text model's intervention on its natural inputs (`intervention.measure`), with the
    model and the inputs as results.json names them."""
    model = loaded.model
    batch = inputs_lib.text_batches(model, loaded.sentences, ("natural",), config.seed)["natural"]
    for line in inputs_lib.input_warnings(loaded, ("natural",)):
        progress.say(f"warning: {line}")
    measured = intervention.measure(model.family, model.config, model.params, batch.inputs,
                                    batch.mask_BxL, config.num_directions, config.seed, progress)
    first = batch.token_ids[batch.mask_BxL[:, 0], 0]
    return {"model": model_summary(model),
            "data": {"source": loaded.text_source, "num_inputs": len(loaded.sentences),
                     "first_tokens": sorted({int(t) for t in first})}, **measured}


def run(plan: Plan, progress: Progress = SILENT) -> dict[str, Any]:
    """Every loaded model (`measure_model`, or `measure_intervention` where config.measure
    says so), in the config's order."""
    out = {}
    measure = measure_intervention if plan.config.measure == "intervention" else measure_model
    for name, loaded in plan.models.items():
        progress.say(f"{name} ({loaded.model.family.name}, {loaded.model.shape['num_layers']} "
                     f"layers): {len(loaded.sentences)} inputs from {loaded.text_source}")
        out[name] = measure(loaded, plan.config, progress.within(name))
    return {"config": plan.config, "models": out, "skipped": plan.skipped}
