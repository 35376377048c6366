"""The reproduction as a study of the protocol (`anisotropy_jax.protocol`;
experiments/report.py): every study of the config into WORKDIR/<study>/ (`runner.run_all`),
the verdicts, REPORT.md (and with `report` a bundled copy), and the verdict lines printed."""
from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Mapping, Sequence

from anisotropy_jax import results
from anisotropy_jax.configs.report import ReproduceConfig, reproduce_config_from_mapping
from anisotropy_jax.protocol import Progress
from anisotropy_jax.studies.report import report, runner, verdicts


@dataclasses.dataclass(frozen=True)
class Plan:
    config: ReproduceConfig
    workdir: pathlib.Path
    report: str | None = None  # also write the report here (e.g. docs/REPORT.md)


def validate(config: Any, workdir: pathlib.Path, report: str | None = None) -> Plan:
    return Plan(reproduce_config_from_mapping(config), pathlib.Path(workdir), report)


@dataclasses.dataclass(frozen=True)
class Reproduction:
    plan: Plan
    runs: dict[str, runner.StudyRun]
    verdicts: Sequence[verdicts.Verdict]


def run(plan: Plan, progress: Progress) -> Reproduction:
    runs = runner.run_all(plan.config, plan.workdir, progress)
    return Reproduction(plan, runs, verdicts.all_verdicts(
        {k: r.results for k, r in runs.items()}, {k: r.reason for k, r in runs.items()}))


def write(done: Reproduction, workdir: pathlib.Path, provenance: results.Provenance
          ) -> dict[str, Any]:
    """REPORT.md (and the bundled copy); returns {"report": its markdown, "verdicts",
    "report_path"}."""
    text = report.write(done.runs, done.verdicts, workdir, provenance, provenance.command,
                        done.plan.report, done.plan.config.size)
    return {"report": text, "verdicts": done.verdicts, "report_path": done.plan.report}


def format_report(doc: Mapping[str, Any], workdir: pathlib.Path) -> str:
    return (f"{report.verdict_summary(doc['verdicts'])}\n\nwrote {workdir / report.REPORT_FILE}"
            + (f" and {doc['report_path']}" if doc["report_path"] else ""))
