"""The untrained-block bias sweep, the project's main job (docs/BIAS_SWEEP.md).

  python experiments/bias_sweep.py --config=experiments/configs/bias_sweep.py[:VARIANT] \
      --workdir=DIR [--config.FIELD=VALUE ...] [--distributed]

Writes into DIR: config.json (at the start), results.json and results.npz (at the end, atomically:
an interrupted run leaves no results.json), figures/{cosine,norms,attention,query_key,
categorical}.png, and prints progress per chunk, a compact table and a warning naming any point
where float32 rounding may corrupt the attention statistics. A bad flag or config exits with status 2 and one
line naming the field, before anything is compiled; a float32 overflow exits with status 1.
"""
import jax
from absl import app, flags
from ml_collections import config_flags

from anisotropy_jax import cli, config
from anisotropy_jax.studies.sweep import report

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Sweep config file, e.g. experiments/configs/bias_sweep.py[:variant].",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder (created if missing).")
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed", False, "Call jax.distributed.initialize() first (one process per host).")
_FIGURE_PROCESSES = flags.DEFINE_integer(
    "figure_processes", -1, "Processes drawing the figures, started with the run (-1: one per "
    "CPU core, at most 5; 0: none, this process draws them).")
_PHASE_TIMES = flags.DEFINE_string(
    "phase_times", None, "Write each phase's end time as JSON here (benchmarks/process_time.py).")


def main(argv: list[str]) -> None:
    del argv
    cli.allocate_device_memory_on_demand()  # a small job: no 75% reservation of the GPU
    phases = cli.PhaseTimes(_PHASE_TIMES.value)
    phases.mark("start_imports_flags")
    workdir = cli.workdir(_WORKDIR.value)
    cli.require_flag(_CONFIG.value, "config", "experiments/configs/bias_sweep.py")
    with cli.user_errors():
        sweeps = config.sweep_configs_from_mapping(_CONFIG.value)  # validated: nothing compiled
        if _DISTRIBUTED.value:
            jax.distributed.initialize()
        doc = report.run_and_write(sweeps, workdir, _CONFIG.value, mark=phases.mark,
                                   figure_processes_requested=_FIGURE_PROCESSES.value)
    if doc is None:  # not the writing process
        return
    for label in doc["runs"]:
        print(report.format_table(doc["runs"][label]))
    print(f"\nwrote {workdir}/results.json, results.npz, config.json, figures/"
          f"{{cosine,norms,attention,query_key,categorical}}.png in "
          f"{doc['provenance']['wall_seconds']:.0f} s", flush=True)
    phases.mark("table")
    phases.write()
    if not _DISTRIBUTED.value:  # jax.distributed shuts down at interpreter exit: keep that
        cli.exit_without_teardown()


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags_or_exit)
