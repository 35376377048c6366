"""The checkpoint series as a study of the protocol (`anisotropy_jax.protocol`;
experiments/series.py): validate checks the text, the series folder and the tokenizer
(`analysis.validate`), run says what it measures and measures every checkpoint, `report.write`
writes, and the script prints the per-checkpoint table and the files written."""
from __future__ import annotations

import pathlib
from typing import Any, Mapping

from anisotropy_jax.config import from_mapping
from anisotropy_jax.configs.series import SeriesConfig
from anisotropy_jax.protocol import Progress
from anisotropy_jax.studies.series import analysis, report


def validate(config: Any, workdir: pathlib.Path) -> analysis.Inputs:
    """Every check; nothing compiled."""
    return analysis.validate(from_mapping(SeriesConfig, config))


def run(inputs: analysis.Inputs, progress: Progress) -> analysis.SeriesResult:
    series = inputs.series
    progress.say(f"{len(series.checkpoints)} checkpoints of {series.family.name} "
                 f"(steps {series.steps[0]} … {series.steps[-1]}); "
                 f"{len(inputs.sentences)} sentences from {inputs.text_source}")
    return analysis.run(inputs.config, inputs, progress)


def format_report(doc: Mapping[str, Any], workdir: pathlib.Path) -> str:
    return (f"{report.format_report(doc)}\n"
            f"wrote {workdir}/results.json, report.txt, series.npz, figures/*.png")
