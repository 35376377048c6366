"""Untrained stacks: anisotropy and rank collapse with depth and width (docs/DEPTH.md).

  python experiments/depth_sweep.py --config=experiments/configs/depth_sweep.py[:VARIANT] \
      --workdir=DIR [--config.FIELD=VALUE ...] [--distributed [--coordinator_address=HOST:PORT
      --num_processes=N --process_id=I]]

Writes DIR/chunks/ (each finished chunk, atomically: killed and restarted with the same command,
the run computes only the missing chunks), then results.npz, figures/*.png and, last, results.json.
A bad flag or config exits with status 2 and one line naming the field before anything is
compiled; a non-finite metric exits with status 1.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("depth", "experiments/configs/depth_sweep.py:smoke")
