"""Untrained stacks: anisotropy and rank collapse with depth and width (docs/DEPTH.md).

  python experiments/depth_sweep.py --config=experiments/configs/depth_sweep.py[:VARIANT] \
      --workdir=DIR [--config.FIELD=VALUE ...] [--distributed [--coordinator_address=HOST:PORT
      --num_processes=N --process_id=I]]

Writes DIR/chunks/ (each finished chunk, atomically: killed and restarted with the same command,
the run computes only the missing chunks), then results.npz, figures/*.png and, last, results.json.
A bad flag or config exits with status 2 and one line naming the field before anything is
compiled; a non-finite metric exits with status 1.
"""
from absl import flags

from anisotropy_jax import cli
from anisotropy_jax.studies import depth

_DISTRIBUTED = flags.DEFINE_bool("distributed", False, "jax.distributed.initialize() first.")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None, "HOST:PORT (else auto-detected).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes (else auto-detected).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process (else auto-detected).")

if __name__ == "__main__":
    cli.main(depth.STUDY, "experiments/configs/depth_sweep.py:smoke", distributed=_DISTRIBUTED,
             coordinator_address=_COORDINATOR, num_processes=_NUM_PROCESSES,
             process_id=_PROCESS_ID)
