"""Attention sinks, massive activations and rogue dimensions per layer, beside the untrained
re-initialisations (docs/EXTREME.md).

  inputs    natural Shakespeare sentences, random ids, one repeated id (text); the modality
            defaults (images, audio)
  layers    one jitted forward per batch and every statistic reduced inside it (no L × L array
            kept; `storage_bytes`)
  summary   per-layer numbers of one forward and of the untrained seeds
  analysis  `validate(config) -> Plan`, `run(plan) -> result`
  report    `write` (config.json, summary.md, figures/<kind>_by_layer.png, results.json last)
            and `format_report`
  intervention  Godey 3 inside trained networks: each block's input intervened on, its
            attention measured (`--config=extreme:intervention`)
  loading   `load`: a folder of results, later runs adding what a model's first run lacks
  claims    the verdicts of claims (a)–(e) from committed results, by the thresholds and rules
            of `rules`
  sensitivity  each claim recomputed under other choices of its rule's constants, and the
            table docs/REPORT.md embeds
  STUDY     the study protocol (experiments/extreme.py; `anisotropy-jax extreme`)
"""
from __future__ import annotations

import pathlib
from typing import Any

from anisotropy_jax.config import from_mapping
from anisotropy_jax.configs.extreme import ExtremeConfig
from anisotropy_jax.protocol import Progress, Study
from anisotropy_jax.studies.extreme import analysis, report


def _validate(config: Any, workdir: pathlib.Path) -> analysis.Plan:
    return analysis.validate(from_mapping(ExtremeConfig, config))


def _run(plan: analysis.Plan, progress: Progress) -> dict[str, Any]:
    for name, why in plan.skipped.items():
        progress.say(f"skipping {name}: {why}")
    return analysis.run(plan, progress)


def _format(doc: Any, workdir: Any) -> str:
    if report.is_intervention(doc):
        return f"{report.format_intervention(doc)}\nwrote {workdir}/results.json, summary.md"
    return (f"{report.format_report(doc)}\nwrote {workdir}/results.json, summary.md, "
            f"figures/*_by_layer.png")


STUDY = Study(_validate, _run, report.write, _format, on_demand_memory=True)

__all__ = ["STUDY"]
