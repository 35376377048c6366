"""REPORT.md of a reproduction: the studies run, then for each claim of docs/SCIENCE.md its
verdict, criterion, numbers and figures (relative links), all from the run's results.

`write(runs, verdicts, workdir, provenance, command, report_path)` writes WORKDIR/REPORT.md and,
with `report_path` (e.g. docs/REPORT.md), a copy there whose linked files (figures and the
studies' results.json) are copied into results/<its name>/ beside it (docs/results/report/).
"""
from __future__ import annotations

import json
import pathlib
import shutil
from typing import Any, Mapping, Sequence

from anisotropy_jax import results
from anisotropy_jax.studies.report import verdicts as verdicts_lib
from anisotropy_jax.studies.report.runner import RUNNERS, StudyRun
from anisotropy_jax.studies.report.verdicts import Verdict

REPORT_FILE = "REPORT.md"
# claim key → figure paths (glob patterns relative to the workdir), shown where they exist.
FIGURES = {
    "godey_1": ("modalities/figures/cross_modal.png",),
    "godey_2": ("pretrained/*/figures/drift_vs_cosine.png",),
    "godey_3a": ("sweep/figures/attention.png",),
    "godey_3b": ("sweep/figures/categorical.png",),
    "godey_4a": ("training/*/figures/seeds_query_key.png",),
    "godey_4b": ("training/*/figures/seeds_deficit_share.png",),
    "godey_4c": ("training/*/figures/seeds_anisotropy.png",),
    "mm_a": ("embeddings/figures/isotropy.png",),
    "mm_b": ("embeddings/figures/isotropy.png",),
    "depth_a": ("depth/figures/cosine_rank_vs_depth.png",),
    "depth_b": ("depth/figures/cosine_rank_vs_depth.png",),
}
RESULT_FILES = ("sweep/results.json", "training/*/results.json", "pretrained/*/results.json",
                "modalities/results.json", "depth/results.json", "embeddings/results.json")
# In a bundle: {"not_measured": {study: why}, "order": {study: [model or objective, ...]}}.
STUDIES_FILE = "studies.json"
# A bundled report's files go to <report's folder>/BUNDLE_PARENT/<report's name in lower case>/.
BUNDLE_PARENT = "results"
# The per-model/per-objective studies: their results are {name: results.json} in a StudyRun.
_KEYED = {"training", "pretrained"}


def _glob(workdir: pathlib.Path, patterns: Sequence[str]) -> list[str]:
    return [p.relative_to(workdir).as_posix() for pattern in patterns
            for p in sorted(workdir.glob(pattern))]


def claim_figures(key: str, workdir: pathlib.Path) -> list[str]:
    """The figures of a claim that exist in the workdir, relative to it."""
    return _glob(workdir, FIGURES[key])


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _commits(tree: Any) -> list[str]:
    """The git commits recorded in a study's results (every "provenance" inside), short form."""
    found: list[str] = []
    if isinstance(tree, Mapping):
        commit = tree.get("provenance", {}).get("git_commit") if isinstance(
            tree.get("provenance"), Mapping) else None
        short = commit[:7] + ("+modified" if "+modified" in commit else "") if isinstance(
            commit, str) else None
        if short and short not in found:
            found.append(short)
        for value in tree.values():
            found += [c for c in _commits(value) if c not in found]
    return found


def _studies_table(runs: Mapping[str, StudyRun], workdir: pathlib.Path) -> list[str]:
    lines = ["| study | status | wall | machine, commit | results |", "| --- | --- | --- | --- | --- |"]
    for name, run in runs.items():
        files = _glob(workdir, [p for p in RESULT_FILES if p.startswith(f"{name}/")])
        status = "ran" if run.results is not None else f"not measured: {run.reason}"
        if run.skipped and run.results is not None:
            status += "; skipped: " + "; ".join(run.skipped)
        links = ", ".join(f"[{f}]({f})" for f in files) or "–"
        wall = f"{run.seconds:.0f} s" if run.results is not None else "–"
        commits = ", ".join(_commits(run.results))
        machine = (run.device + (f", commit {commits}" if commits else "")
                   if run.results is not None else "–")
        lines.append(f"| {name} | {_cell(status)} | {wall} | {_cell(machine)} | {links} |")
    return lines


# The checkout this package lies in (where doc_tables finds the docs' generated tables).
REPOSITORY = pathlib.Path(__file__).resolve().parents[3]
# "sensitivity": the verdict's entry (`Verdict.sensitivity_entry`): robust, or which other
# choice of the rule's constants flips it, and to what.
CLAIMS_HEADER = "| claim | origin | verdict | sensitivity | scope | criterion | numbers |"


CLAIMS_INTRO = (
    "The sensitivity column recomputes each verdict from the same results under other choices of "
    "the constants its rule depends on (its thresholds and cuts, the operating points' range, the "
    "trend's first step, the intervals' level; each named in the entry): \"robust\" where none "
    "changes the verdict, else \"flips under\" each that does, with the verdict it gives; \"–\" "
    "where the claim is not measured.")


def _claims_table(verdicts: Sequence[Verdict]) -> list[str]:
    lines = [CLAIMS_HEADER, "| --- | --- | --- | --- | --- | --- | --- |"]
    for v in verdicts:
        lines.append(f"| {v.name}: {_cell(v.claim)} | {_cell(v.origin)} | **{v.verdict}** | "
                     f"{_cell(v.sensitivity_entry)} | {_cell(v.scope) or '–'} | "
                     f"{_cell(v.criterion)} | "
                     f"{_cell('; '.join(v.numbers))} |")
    return lines


def claims_table(verdicts: Sequence[Verdict]) -> str:
    """The claims table (the report's columns) of `verdicts`."""
    return "\n".join(_claims_table(verdicts))


def load_bundle(folder: pathlib.Path) -> tuple[dict[str, Any], dict[str, str]]:
    """({study: results or None}, {study: why not measured}) of a bundled report folder, as the
    reproduction had them: the studies' results.json files and `studies.json`."""
    folder = pathlib.Path(folder)
    index = json.loads((folder / STUDIES_FILE).read_text())
    docs: dict[str, Any] = {}
    for name in RUNNERS:
        if name in _KEYED:
            found = {key: results.read_results(folder / name / key / "results.json")
                     for key in index["order"].get(name, ())}
        else:
            path = folder / name / "results.json"
            found = results.read_results(path) if path.exists() else None
        docs[name] = found or None
    return docs, index["not_measured"]


def claims_table_from_bundle(folder: pathlib.Path) -> str:
    """The claims table of a bundled report, its verdicts recomputed from the bundled results by
    today's verdicts.py (tests/test_doc_tables.py: docs/REPORT.md cannot drift from them)."""
    docs, reasons = load_bundle(folder)
    return "\n".join(_claims_table(verdicts_lib.all_verdicts(docs, reasons)))


# Each claim's section states its sensitivity entry on a line of its own, opening with this.
SENSITIVITY_LABEL = "Sensitivity (the same rule under other choices of its constants):"


def _claim_section(v: Verdict, workdir: pathlib.Path) -> list[str]:
    lines = [f"### {v.name}: {v.claim}", "", f"**Verdict: {v.verdict}.** Criterion: {v.criterion}.",
             "", f"Origin: {v.origin}." + (f" Scope: {v.scope}." if v.scope else ""), "",
             f"{SENSITIVITY_LABEL} {v.sensitivity_entry}"
             + (" (not measured)." if v.verdict == verdicts_lib.NOT_MEASURED else "."), ""]
    lines += [f"- {n}" for n in v.numbers]
    figures = claim_figures(v.key, workdir)
    lines.append("")
    lines += [f"![{v.name}]({f})" for f in figures] or [
        "No figure: " + ("the claim was not measured." if v.verdict == "not measured"
                         else "the numbers above are the measurement.")]
    return lines + [""]


SMOKE_BANNER = ("> **Smoke size.** This report was made at `:smoke` size (a few steps, a few "
                "sentences, tiny blocks): it tests that the code runs end to end. Its verdicts "
                "say nothing about the claims; the committed report is made at `:gpu` size.")


def render(runs: Mapping[str, StudyRun], verdicts: Sequence[Verdict], workdir: pathlib.Path,
           provenance: Mapping[str, Any], command: str, size: str = "default") -> str:
    """The markdown of REPORT.md (links relative to the workdir); `size` the config's size
    (a smoke report carries SMOKE_BANNER)."""
    p = provenance
    head = [
        "# Reproduction report", "", *([SMOKE_BANNER, ""] if size == "smoke" else []),
        f"Generated by `{command}`. Every number, verdict and figure below comes from this run's "
        "results; each verdict is computed by anisotropy_jax/studies/report/verdicts.py with "
        "its criterion printed beside it, and a claim whose study did not run says why.", "",
        f"This report: commit {p.get('git_commit')}, JAX {p.get('jax_version')} on "
        f"{p.get('backend')} ({p.get('device_kind')}, {len(p.get('devices', []))} device(s)), "
        f"started {p.get('start_time')}, wall {p.get('wall_seconds', 0):.0f} s. A study loaded "
        "from an earlier run into the same workdir (its study_run.json) keeps the machine, "
        "commit and wall time of that run (table below).", "",
        f"Where the studies ran (wall time of each): {_machines(runs)}.", "",
        "## Studies", ""]
    body = (_studies_table(runs, workdir) + ["", "## Claims", "", CLAIMS_INTRO, ""]
            + _claims_table(verdicts))
    body += ["", "## Claims with their figures", ""]
    for v in verdicts:
        body += _claim_section(v, workdir)
    return "\n".join(head + body).rstrip() + "\n"


# In a bundled report (docs/REPORT.md), the sections after this line are written by hand, each
# bound to its own raw results by anisotropy_jax/doc_tables.py (e.g. the extreme-token and the
# normalisation sections); regenerating the report keeps them.
KEPT_MARKER = "<!-- kept: the sections below are not generated by reproduce.py -->"


def _kept_sections(report_path: pathlib.Path) -> str:
    """The part of an existing report from KEPT_MARKER on ("" when there is none)."""
    old = report_path.read_text() if report_path.exists() else ""
    start = old.find(KEPT_MARKER)
    return "" if start < 0 else old[start:]


# A bundle's folder of hand-kept files (the commands and logs of the runs): regenerating keeps it.
LOGS_FOLDER = "logs"


def _machines(runs: Mapping[str, StudyRun]) -> str:
    """'1 × NVIDIA H100 80GB HBM3: training (880 s), embeddings (370 s); 1 × cpu: …'."""
    by_device: dict[str, list[str]] = {}
    for name, run in runs.items():
        if run.results is not None:
            by_device.setdefault(run.device or "?", []).append(f"{name} ({run.seconds:.0f} s)")
    return "; ".join(f"{device}: {', '.join(studies)}" for device, studies in by_device.items())


def bundle(text: str, workdir: pathlib.Path, report_path: pathlib.Path,
           index: Mapping[str, Any]) -> pathlib.Path:
    """Writes `text` to report_path with every linked workdir file copied into
    report_path.parent/results/<stem in lower case>/ (docs/results/report/ for docs/REPORT.md,
    beside the other studies' results) and the links rewritten to it; the hand-written sections
    after KEPT_MARKER of an existing report_path are kept at the end."""
    kept = _kept_sections(report_path)
    folder = report_path.parent / BUNDLE_PARENT / report_path.stem.lower()
    prefix = folder.relative_to(report_path.parent).as_posix()
    linked = sorted(set(_glob(workdir, [f for v in FIGURES.values() for f in v])
                        + _glob(workdir, RESULT_FILES)))
    if (folder / STUDIES_FILE).exists():  # an earlier bundle: none of its results may stay
        for entry in folder.iterdir():  # but LOGS_FOLDER: how the runs were made, by hand
            if entry.name != LOGS_FOLDER:
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    for rel in linked:
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(workdir / rel, target)
        text = text.replace(f"]({rel})", f"]({prefix}/{rel})")
    results.write_json(folder / STUDIES_FILE, index)
    text = _bind_claims_table(text, folder)
    results.write_text(report_path, text + (f"\n{kept}" if kept else ""))
    return folder


def _bind_claims_table(text: str, folder: pathlib.Path) -> str:
    """Marks the claims table as generated from the bundle, in the marker anisotropy_jax/doc_tables.py
    reads, when the bundle lies inside this checkout, so that a test regenerates it."""
    try:
        rel = folder.resolve().relative_to(REPOSITORY).as_posix()
    except ValueError:
        return text
    start = text.index(CLAIMS_HEADER)
    end = text.index("\n\n", start) + 1
    return (text[:start] + f"<!-- table: claims {rel} -->\n" + text[start:end]
            + "<!-- end table -->\n" + text[end:])


def write(runs: Mapping[str, StudyRun], verdicts: Sequence[Verdict], workdir: pathlib.Path,
          provenance: results.Provenance, command: str,
          report_path: pathlib.Path | None = None, size: str = "default") -> str:
    """WORKDIR/REPORT.md (and the bundled copy at report_path); returns the markdown."""
    workdir = pathlib.Path(workdir)
    text = render(runs, verdicts, workdir, provenance.finish("report"), command, size)
    results.write_text(workdir / REPORT_FILE, text)
    if report_path is not None:
        bundle(text, workdir, pathlib.Path(report_path), {
            "not_measured": {n: r.reason for n, r in runs.items() if r.results is None},
            "order": {n: list(r.results) for n, r in runs.items()
                      if n in _KEYED and r.results is not None}})
    return text


def verdict_summary(verdicts: Sequence[Verdict]) -> str:
    """One line per claim, for the terminal."""
    return "\n".join(f"{v.name:<20} {v.verdict:<14} {'; '.join(v.numbers)}" for v in verdicts)
