"""The pretrained study as a study of the protocol (`anisotropy_jax.protocol`;
experiments/pretrained.py): validate loads and checks everything (`analysis.validate`),
run says what it measures and measures it, `report.write` writes, and the script prints the
per-layer table and the files written."""
from __future__ import annotations

import pathlib
from typing import Any, Mapping

from anisotropy_jax.config import from_mapping
from anisotropy_jax.configs.pretrained import PretrainedConfig
from anisotropy_jax.protocol import Progress
from anisotropy_jax.studies.pretrained import analysis, report


def validate(config: Any, workdir: pathlib.Path) -> analysis.Inputs:
    """Every check and all loading (model, tokenizer, sentences or media); nothing compiled."""
    return analysis.validate(from_mapping(PretrainedConfig, config))


def run(inputs: analysis.Inputs, progress: Progress) -> analysis.PretrainedResult:
    model = inputs.model
    what = "sentences" if inputs.media is None else f"{model.modality} inputs"
    progress.say(f"model {model.model_dir} ({model.hf_config.get('model_type')}, "
                 f"{model.shape['num_layers']} layers, d={model.shape['d_model']}, "
                 f"{model.num_parameters:,} parameters); {len(inputs.sentences)} of "
                 f"{inputs.num_candidate_sentences} {what} from {inputs.text_source}")
    shortfall = analysis.shortfall(inputs)
    if shortfall:
        progress.say(shortfall)
    return analysis.run(inputs.config, inputs, progress)


def format_report(doc: Mapping[str, Any], workdir: pathlib.Path) -> str:
    return (f"{report.format_report(doc)}\nwrote {workdir}/results.json, report.txt, figures/*.png"
            + (", hidden_states*.npz" if doc["config"]["save_hidden_states"] else ""))
