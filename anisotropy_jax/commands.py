"""The installed command line, `anisotropy-jax COMMAND [flags]` (setup.py's console entry point;
also `python -m anisotropy_jax`), and the one table of commands that the experiments/ scripts
run too (`script`):

  anisotropy-jax sweep --config=sweep:control --workdir=DIR     a study, from any folder
  anisotropy-jax sweep --help                                   its flags, variants and fields
  anisotropy-jax sweep --config=sweep:smoke --print_config      the resolved config
  anisotropy-jax show [--csv] DIR                               the table of a finished workdir

Each command is a study of the protocol driven by `cli.main`, with its config from
`anisotropy_jax.configs` (`--config` optional: the command's own config by default).
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import os
import pathlib
import sys
import textwrap
from typing import Any, Callable

from absl import flags

import anisotropy_jax
from anisotropy_jax import cli, configs, frames, results

PROG = "anisotropy-jax"


def _progress(help_text: str) -> Callable[[], dict[str, Any]]:
    return lambda: {"progress": flags.DEFINE_bool("progress", True, help_text)}


def _sweep_flags() -> dict[str, Any]:
    return {
        "distributed": flags.DEFINE_bool(
            "distributed", False,
            "Call jax.distributed.initialize() first (one process per host)."),
        "figure_processes": flags.DEFINE_integer(
            "figure_processes", -1, "Processes drawing the figures, started with the run (-1: "
            "one per CPU core, at most 5; 0: none, this process draws them)."),
        "phase_times": flags.DEFINE_string(
            "phase_times", None,
            "Write each phase's end time as JSON here (benchmarks/process_time.py)."),
    }


def _depth_flags() -> dict[str, Any]:
    return {
        "distributed": flags.DEFINE_bool("distributed", False, "jax.distributed.initialize() "
                                         "first."),
        "coordinator_address": flags.DEFINE_string("coordinator_address", None,
                                                   "HOST:PORT (else auto-detected)."),
        "num_processes": flags.DEFINE_integer("num_processes", None,
                                              "Processes (else auto-detected)."),
        "process_id": flags.DEFINE_integer("process_id", None, "This process (else "
                                           "auto-detected)."),
    }


def _seeds_flags() -> dict[str, Any]:
    return {"seeds": flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds (>= 2, distinct)."),
            **_progress("Show progress on stderr.")()}


def _report_flags() -> dict[str, Any]:
    return {"report": flags.DEFINE_string("report", None,
                                          "Also write the report here (e.g. docs/REPORT.md).")}


@dataclasses.dataclass(frozen=True)
class Command:
    """One command of `anisotropy-jax`, and the study it runs. A study has one name, used for
    its command, its settings `anisotropy_jax/configs/<study>.py`, its package
    `anisotropy_jax/studies/<study>/`, its doc `docs/<STUDY>.md` and its committed results
    `docs/results/<study>/` (tests/test_layout.py checks them). The training study has three
    commands (train, seeds, dynamics) over one package, config and doc.

      summary    what it does and writes, for --help
      study      the study's name (default: the command's)
      attribute  the `protocol.Study` value in the study's package
      variant    the default variant of the study's config ('' = its defaults)
      flags      defines its own flags (absl), returns {name: holder} for `cli.main`
      workdir    the --workdir help
      claims     whether its workdir is its run's alone (`protocol.workdir_conflict`: a run of
                 another command or config into it is refused); False where the folder is
                 shared by design: dynamics analyses a training run's workdir, and a
                 report resumes study by study, each refused on its own config
                 (`studies.report.runner`), e.g. parts run on different machines
    """

    summary: str
    study: str = ""
    attribute: str = "STUDY"
    variant: str = ""
    flags: Callable[[], dict[str, Any]] = dict
    workdir: str = "Output folder (created if missing)."
    claims: bool = True


COMMANDS: dict[str, Command] = {
    "sweep": Command(
        "The untrained-block bias sweep, the main job (docs/SWEEP.md): writes config.json, "
        "results.json, results.npz and figures/*.png into the workdir.", flags=_sweep_flags),
    "depth": Command(
        "Untrained stacks against depth and width (docs/DEPTH.md): chunks/ as it goes (a rerun "
        "resumes), then results.npz, figures/*.png and results.json.", flags=_depth_flags),
    "train": Command(
        "Trains a byte-level LM with log-spaced orbax checkpoints (--config=train:mlm for the "
        "masked LM; a rerun resumes), then analyses every checkpoint (docs/TRAIN.md).",
        attribute="TRAINING_STUDY", flags=_progress("Show a progress bar on stderr."),
        workdir="Output folder (resumed if it holds a run)."),
    "seeds": Command(
        "Trains and analyses one training config with several seeds (WORKDIR/seed_<s>), then the "
        "per-checkpoint mean and 95% t-interval over the seeds (docs/TRAIN.md).", study="train",
        attribute="SEEDS_STUDY", variant="small", flags=_seeds_flags,
        workdir="Output folder; seed s goes to WORKDIR/seed_s."),
    "dynamics": Command(
        "Reruns the per-checkpoint query/key analysis of a training run (--config.analysis.*): "
        "results.json, dynamics.npz and figures/ in its workdir (docs/TRAIN.md).", study="train",
        flags=_progress("Print one line per analysed checkpoint."),
        workdir="Workdir of a training run (anisotropy-jax train).", claims=False),
    "pretrained": Command(
        "Layer-wise anisotropy and drift of a pretrained checkpoint of any registered family, "
        "text, image or audio (docs/PRETRAINED.md).",
        flags=_progress("Show a progress bar over batches (stderr).")),
    "cross_modal": Command(
        "The pretrained study on every offline model of every modality, on one plot "
        "(docs/CROSS_MODAL.md)."),
    "extreme": Command(
        "Attention sinks, massive activations and rogue dimensions per layer of every offline "
        "transformer beside its untrained seeds (docs/EXTREME.md)."),
    "normalizations": Command(
        "Causal LMs with each attention normalisation on Shakespeare and Bigram-Backcopy, seeds "
        "as one program, analysed per checkpoint; the summary over seeds per cell "
        "(docs/NORMALIZATIONS.md).", flags=_progress("Show progress on stderr."),
        workdir="Output folder (resumed if it holds the same grid)."),
    "embeddings": Command(
        "Partition isotropy of the embedding matrices of BPE LMs trained here "
        "(docs/EMBEDDINGS.md)."),
    "series": Command(
        "Per-layer and per-head metrics over a series of checkpoints of one model "
        "(--config.series_dir=DIR; docs/SERIES.md)."),
    "report": Command(
        "Every study and a verdict on each claim of docs/SCIENCE.md: WORKDIR/REPORT.md "
        "(docs/REPORT.md).", flags=_report_flags, claims=False),
}


def study_name(name: str) -> str:
    """The study a command runs (its package, config and doc are named after it)."""
    return COMMANDS[name].study or name


def command_name(name: str) -> str:
    """A command's name as typed: '-' and '_' are the same ('cross-modal' is `cross_modal`)."""
    return name.replace("-", "_")


def study(name: str) -> Any:
    """The `Study` value of a command."""
    module = importlib.import_module(f"anisotropy_jax.studies.{study_name(name)}")
    return getattr(module, COMMANDS[name].attribute)


def _claim(name: str) -> str | None:
    """The name its workdir is claimed under (the same for the script and the command), or
    None."""
    return name if COMMANDS[name].claims else None


def _config_path(name: str) -> str:
    variant = COMMANDS[name].variant
    return f"{configs.path(study_name(name))}{':' + variant if variant else ''}"


def run(name: str, argv: list[str]) -> None:
    """`anisotropy-jax NAME ...`: command `name` (`cli.main`) on `argv`, --config optional (the
    command's own config by default)."""
    command = COMMANDS[name]
    cli.main(study(name), config_default=_config_path(name), workdir_help=command.workdir,
             prog=f"{PROG} {name}", usage=command.summary, argv=argv, claim=_claim(name),
             **command.flags())


def script(name: str) -> None:
    """The whole of an experiments/ script: command `name` on sys.argv, with the script's name
    and docstring; --config optional (the command's own config by default)."""
    command = COMMANDS[name]
    try:
        cli.main(study(name), config_default=_config_path(name), workdir_help=command.workdir,
                 claim=_claim(name), **command.flags())
    except KeyboardInterrupt:  # while the study is imported; a running study says more
        cli.fail("interrupted; rerun the same command to resume", status=cli.INTERRUPTED_STATUS)


# --------------------------------------------------------------------------------------------
# show DIR: the table of a finished workdir

def identify(doc: dict[str, Any]) -> str | None:
    """The command whose report reads the results document `doc` (`provenance["study"]`; for a
    file of schema 1, told by its keys: `frames.SCHEMA_1_KEYS`), or None."""
    name = frames.identify(doc)
    return name if name in COMMANDS else None


def show(folder: str) -> str:
    """The summary table of a finished workdir: its study's `format_report` over its
    results.json (a reproduction's workdir: its REPORT.md). One-line errors."""
    workdir = pathlib.Path(folder)
    path = workdir / "results.json"
    if not workdir.is_dir():
        cli.fail(f"{workdir}: no such folder")
    if not path.is_file():
        if (workdir / "REPORT.md").is_file():
            return (workdir / "REPORT.md").read_text()
        runs = frames.parts(workdir)  # a folder of runs (a report's, docs/results/train/)
        if runs:
            return "\n\n".join(f"== {run.relative_to(workdir)} ==\n{show(str(run))}"
                                 for run in runs)
        cli.fail(f"{workdir}: no results.json: not a finished run (a run writes it last)")
    try:
        doc = results.read_results(path)  # older schemas: the current metric names
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as error:
        cli.fail(f"{path}: unreadable ({error})")
    name = identify(doc) if isinstance(doc, dict) else None
    if name is None:
        cli.fail(f"{path}: not the results of a study of this package")
    provenance = doc.get("provenance")
    version = provenance.get("schema_version", 0) if isinstance(provenance, dict) else 0
    if not isinstance(version, int) or version > results.RESULTS_SCHEMA_VERSION:
        cli.fail(f"{path}: results schema {version!r}, newer than this anisotropy_jax "
                 f"{anisotropy_jax.__version__} reads (up to {results.RESULTS_SCHEMA_VERSION}); "
                 "upgrade it")
    try:
        return study(name).format_report(doc, workdir)
    except Exception as error:  # noqa: BLE001 - an older or edited file: one line, not a trace
        cli.fail(f"{path}: cannot show these {name} results ({type(error).__name__}: {error})")


def show_csv(folder: str) -> str:
    """Every number of a finished workdir (or a folder of them) as CSV: `results.load`'s tidy
    table, one row per model, seed, layer or state, and s or step. One-line errors."""
    try:
        return results.load(folder).to_csv(index=False).rstrip("\n")
    except (ImportError, OSError, ValueError) as error:
        cli.fail(str(error))


SHOW_HELP = f"""usage: {PROG} show [--csv] DIR

The summary table of a finished workdir, printed from its results.json (any study's, of any
results schema up to this version's; a reproduction's workdir: its REPORT.md; a folder of
finished runs: each one's). --csv: every number instead, as the tidy table of
anisotropy_jax.results.load(DIR) (a pandas DataFrame: one row per model, seed, layer or state,
and s or step; one column per metric), e.g. anisotropy-jax show --csv DIR > table.csv."""


def overview() -> str:
    """`anisotropy-jax --help`."""
    width = max(map(len, COMMANDS))
    lines = [f"usage: {PROG} COMMAND [--config=CONFIG[:VARIANT]] --workdir=DIR "
             "[--config.FIELD=VALUE ...] [flags]", f"       {PROG} show [--csv] DIR", "",
             "Commands (`anisotropy-jax COMMAND --help`: its flags, variants and config fields):"]
    rows = [(name, command.summary) for name, command in COMMANDS.items()]
    rows.append(("show", "The summary table of a finished workdir (from its results.json); --csv: "
                 "every number as one tidy table (anisotropy_jax.results.load)."))
    for name, text in rows:
        lines += textwrap.wrap(text, 100, initial_indent=f"  {name:<{width}}  ",
                               subsequent_indent=" " * (width + 4))
    lines += ["", *textwrap.wrap(f"Named configs (--config=NAME[:VARIANT]): {configs.known()}; "
                                 "or a config file (PATH[:VARIANT]).", 100)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """The console entry point `anisotropy-jax`."""
    argv = list(sys.argv if argv is None else argv)
    try:
        if len(argv) < 2 or argv[1] in cli.HELP_FLAGS + ("help",):
            print(overview())
            sys.exit(0 if len(argv) >= 2 else 2)
        name, rest = command_name(argv[1]), argv[2:]
        if name == "show":
            if any(arg in cli.HELP_FLAGS for arg in rest):
                print(SHOW_HELP)
                sys.exit(0)
            csv = "--csv" in rest
            rest = [arg for arg in rest if arg != "--csv"]
            if len(rest) != 1 or rest[0].startswith("-"):
                cli.fail(f"usage: {PROG} show [--csv] DIR")
            print(show_csv(rest[0]) if csv else show(rest[0]))
            return
        if name not in COMMANDS:
            cli.fail(f"unknown command {name!r}; choose one of {', '.join(COMMANDS)}, show")
        run(name, [f"{PROG} {name}", *rest])
    except KeyboardInterrupt:  # before a study runs (imports); a running study says more
        cli.fail("interrupted; rerun the same command to resume", status=cli.INTERRUPTED_STATUS)
    except BrokenPipeError:  # `anisotropy-jax show DIR | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
