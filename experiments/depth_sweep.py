"""Untrained stacks: anisotropy and rank collapse with depth and width (docs/DEPTH.md).

  python experiments/depth_sweep.py --config=experiments/configs/depth_sweep.py[:VARIANT] \
      --workdir=DIR [--config.FIELD=VALUE ...] [--distributed [--coordinator_address=HOST:PORT
      --num_processes=N --process_id=I]]

Writes DIR/chunks/ (each finished chunk, atomically: killed and restarted with the same command,
the run computes only the missing chunks), then results.npz, figures/*.png and, last, results.json.
A bad flag or config exits with status 2 and one line naming the field before anything is
compiled; a non-finite metric exits with status 1.
"""
import jax
from absl import app, flags
from ml_collections import config_flags

from anisotropy_jax import cli, config, results
from anisotropy_jax.studies import depth
from anisotropy_jax.studies.depth import report

_CONFIG = config_flags.DEFINE_config_file("config", None, "experiments/configs/depth_sweep.py[:v]",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output folder (created if missing).")
_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "jax.distributed.initialize() first.")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None, "HOST:PORT (else auto-detected).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes (else auto-detected).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process (else auto-detected).")


def main(argv: list[str]) -> None:
    del argv
    workdir = cli.workdir(_WORKDIR.value)
    cli.require_flag(_CONFIG.value, "config", "experiments/configs/depth_sweep.py:smoke")
    with cli.user_errors():
        cfg = config.depth_config_from_mapping(_CONFIG.value)  # validated: nothing compiled
        if _DISTRIBUTED.value:
            jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU processes
            jax.distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
        writer, provenance = jax.process_index() == 0, results.Provenance()
        store = report.ChunkStore(workdir, cfg) if writer else None
        print(f"depth sweep: {len(cfg.architectures)} architecture(s) × {len(cfg.widths)} "
              f"width(s), {cfg.num_layers} layers, on {jax.device_count()} device(s) in "
              f"{jax.process_count()} process(es); workdir {workdir}", flush=True)
        result = depth.run(cfg, store=store, progress=report.progress_printer())
        if not writer:
            return
        doc = report.write(result, workdir, provenance, _CONFIG.value)
    print(report.format_table(doc))
    print(f"\nwrote {workdir}/results.json, results.npz, figures/ in {result.seconds:.1f} s "
          f"({result.chunks_computed} chunks computed, {result.chunks_loaded} loaded)")


if __name__ == "__main__":
    app.run(main, flags_parser=cli.parse_flags_or_exit)
