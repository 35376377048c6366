"""The untrained-block bias sweep, the project's main job (docs/BIAS_SWEEP.md).

  python experiments/bias_sweep.py --config=experiments/configs/bias_sweep.py[:VARIANT] \
      --workdir=DIR [--config.FIELD=VALUE ...] [--distributed]

Writes into DIR: config.json (at the start), results.json and results.npz (at the end, atomically:
an interrupted run leaves no results.json), figures/{cosine,norms,attention,query_key,
categorical}.png, and prints progress per chunk, a compact table and a warning naming any point
where float32 rounding may corrupt the attention statistics. A bad flag or config exits with status 2 and one
line naming the field, before anything is compiled; a float32 overflow exits with status 1.
"""
from absl import flags

from anisotropy_jax import cli
from anisotropy_jax.studies import sweep

_DISTRIBUTED = flags.DEFINE_bool(
    "distributed", False, "Call jax.distributed.initialize() first (one process per host).")
_FIGURE_PROCESSES = flags.DEFINE_integer(
    "figure_processes", -1, "Processes drawing the figures, started with the run (-1: one per "
    "CPU core, at most 5; 0: none, this process draws them).")
_PHASE_TIMES = flags.DEFINE_string(
    "phase_times", None, "Write each phase's end time as JSON here (benchmarks/process_time.py).")

if __name__ == "__main__":
    cli.main(sweep.STUDY, "experiments/configs/bias_sweep.py", distributed=_DISTRIBUTED,
             figure_processes=_FIGURE_PROCESSES, phase_times=_PHASE_TIMES)
