"""Training runs and their per-checkpoint analysis as studies of the protocol
(`anisotropy_jax.protocol`), one per script:

  ANALYSIS  `anisotropy-jax dynamics`: the analysis of a finished run in the workdir
  TRAINING  `anisotropy-jax train`: trains (or resumes) the run in the workdir, then analyses it
            (unless analysis.run is off: then nothing more is written or printed)
  SEEDS     `anisotropy-jax seeds`: one run per seed in workdir/seed_<s>, the seeds trained as
            one vmapped program, each analysed (its own results.json), then the summary over them

The runs keep their checkpoints and logs in the workdir as they go (`training.train`: killed and
started again, a run resumes).
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any, Mapping, Sequence

from anisotropy_jax import data, results
from anisotropy_jax.config import AnalysisConfig, TrainConfig, train_config_from_mapping
from anisotropy_jax.protocol import Progress, Study, config_difference
from anisotropy_jax.studies import training
from anisotropy_jax.studies.training.logs import current_form
from anisotropy_jax.studies.train import analysis, report, seeds as seeds_lib


def _wrote(workdir: pathlib.Path) -> str:
    return f"wrote {workdir / 'results.json'}"


# --------------------------------------------------------------------------------------------
# The analysis of a finished run

@dataclasses.dataclass(frozen=True)
class AnalysisPlan:
    analysis: AnalysisConfig
    workdir: pathlib.Path  # the training run's


def validate_analysis(config: Any, workdir: pathlib.Path) -> AnalysisPlan:
    """The analysis settings (the `analysis` of a training config, the whole of which is checked),
    and the run's config.json (FileNotFoundError naming --workdir)."""
    plan = AnalysisPlan(train_config_from_mapping(config)[1], pathlib.Path(workdir))
    analysis.load_run_config(workdir)
    return plan


def run_analysis(plan: AnalysisPlan, progress: Progress) -> analysis.DynamicsResult:
    return analysis.run(plan.workdir, plan.analysis, progress=progress)


def format_analysis(doc: Mapping[str, Any], workdir: pathlib.Path) -> str:
    return f"{report.format_report(doc)}\n{_wrote(workdir)}"


# --------------------------------------------------------------------------------------------
# Training, then the analysis

@dataclasses.dataclass(frozen=True)
class TrainPlan:
    train: TrainConfig
    analysis: AnalysisConfig
    workdir: pathlib.Path


def _checked(config: Any, workdir: pathlib.Path) -> TrainPlan:
    train, settings = train_config_from_mapping(config)
    training.check_devices(train)
    data.BatchIterator(train.data)  # loads the corpus and checks the split; compiles nothing
    return TrainPlan(train, settings, pathlib.Path(workdir))


@dataclasses.dataclass(frozen=True)
class TrainRun:
    """The training summary and, where analysed, the analysis with its own provenance (started
    when the analysis starts, after training)."""

    summary: training.TrainSummary
    result: analysis.DynamicsResult | None = None
    provenance: results.Provenance | None = None


def run_training(plan: TrainPlan, progress: Progress) -> TrainRun:
    summary = training.train(plan.train, plan.workdir, progress=progress, analysis=plan.analysis)
    progress.say(training.format_summary(summary))
    if not plan.analysis.run:
        return TrainRun(summary)
    provenance = results.Provenance()
    return TrainRun(summary, analysis.run(plan.workdir, plan.analysis, progress=progress),
                    provenance)


def write_training(run: TrainRun, workdir: pathlib.Path, provenance: results.Provenance
                   ) -> dict[str, Any] | None:
    if run.result is None:
        return None
    return report.write(run.result, workdir, run.provenance)


# --------------------------------------------------------------------------------------------
# Several seeds

@dataclasses.dataclass(frozen=True)
class SeedsPlan:
    runs: tuple[tuple[int, TrainPlan], ...]


def validate_seeds(config: Any, workdir: pathlib.Path, seeds: Sequence[str]) -> SeedsPlan:
    """Seed s: the config with seed = data.seed = s, into workdir/seed_<s>; each checked."""
    runs = []
    for seed in seeds_lib.parse_seeds(seeds):
        c = config.copy_and_resolve_references()
        c.seed, c.data.seed = seed, seed
        runs.append((seed, _checked(c, pathlib.Path(workdir) / f"seed_{seed}")))
    return SeedsPlan(tuple(runs))


def analysed(workdir: pathlib.Path, train: TrainConfig, settings: AnalysisConfig
             ) -> dict[str, Any] | None:
    """The analysis results.json in `workdir` of a run of exactly `train` analysed with
    `settings`, or None: a seed trained and analysed earlier (also on another machine, its
    checkpoints not kept) is loaded instead of trained and analysed again."""
    path = pathlib.Path(workdir) / "results.json"
    if not path.is_file():
        return None
    doc = json.loads(path.read_text())
    recorded = doc.get("config", {})
    wanted = {"batch_size": settings.batch_size, "seed": settings.seed}
    if ("train" not in recorded or config_difference(  # a field added since: its default
            current_form(recorded["train"]), results.to_jsonable(train))
            is not None or recorded.get("analysis") != wanted):
        return None
    return doc


def run_seeds(plan: SeedsPlan, progress: Progress) -> dict[str, Any]:
    """Trains the seeds as one vmapped program (`training.train_seeds`: a finished run is left as
    it is, the others resume), then analyses each, writing its analysis into its folder; returns
    the summary over the seeds. A seed already analysed with the same settings (`analysed`) is
    loaded: a run stopped during the analyses goes on where it stopped."""
    runs = [seed for _, seed in plan.runs]
    docs = [analysed(r.workdir, r.train, r.analysis) for r in runs]
    todo = [r for r, doc in zip(runs, docs) if doc is None]
    started = [results.Provenance() for _ in todo]
    summaries = (training.train_seeds([r.train for r in todo], [r.workdir for r in todo],
                                      progress=progress, analyses=[r.analysis for r in todo])
                 if todo else [])
    done = {}
    for run, summary, provenance in zip(todo, summaries, started):
        progress.say(training.format_summary(summary))
        result = analysis.run(run.workdir, run.analysis, progress=progress)
        done[run.workdir] = report.write(result, run.workdir, provenance)
    return seeds_lib.aggregate([doc if doc is not None else done[r.workdir]
                                for r, doc in zip(runs, docs)])


def write_seeds(summary: Mapping[str, Any], workdir: pathlib.Path,
                provenance: results.Provenance) -> dict[str, Any]:
    return seeds_lib.write(summary, workdir, provenance, provenance.command)


ANALYSIS = Study(validate_analysis, run_analysis, report.write, format_analysis, quiet_logs=True)
TRAINING = Study(_checked, run_training, write_training, format_analysis, quiet_logs=True)
SEEDS = Study(validate_seeds, run_seeds, write_seeds,
              lambda doc, workdir: f"{seeds_lib.format_summary(doc)}\n{_wrote(workdir)}",
              quiet_logs=True)
