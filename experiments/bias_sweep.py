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

from anisotropy_jax import cli, config, results
from anisotropy_jax.studies import sweep
from anisotropy_jax.studies.sweep import report

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Sweep config file, e.g. experiments/configs/bias_sweep.py[:variant].",
    lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder (created if missing).")
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed", False, "Call jax.distributed.initialize() first (one process per host).")


def main(argv: list[str]) -> None:
    del argv
    workdir = cli.workdir(_WORKDIR.value)
    cli.require_flag(_CONFIG.value, "config", "experiments/configs/bias_sweep.py")
    with cli.user_errors():
        sweeps = config.sweep_configs_from_mapping(_CONFIG.value)  # validated: nothing compiled
        if _DISTRIBUTED.value:
            jax.distributed.initialize()
        writer = jax.process_index() == 0
        provenance = results.Provenance()
        if writer:
            report.write_config(workdir, _CONFIG.value, sweeps)
        print(f"bias sweep: {len(sweeps)} run(s) on {jax.device_count()} device(s) "
              f"({jax.devices()[0].device_kind}); workdir {workdir}", flush=True)
        runs = {label: sweep.run(cfg, progress=report.progress_printer(label))
                for label, cfg in sweeps}
        if not writer:
            return
        doc = report.write(runs, workdir, provenance, _CONFIG.value)
    for label in runs:
        print(report.format_table(doc["runs"][label]))
    print(f"\nwrote {workdir}/results.json, results.npz, config.json, figures/"
          f"{{cosine,norms,attention,query_key,categorical}}.png in "
          f"{doc['provenance']['wall_seconds']:.0f} s")


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags_or_exit)
