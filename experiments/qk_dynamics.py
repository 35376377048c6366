"""Per-checkpoint query/key analysis of a training run made by experiments/train.py.

  python experiments/qk_dynamics.py --workdir=runs/clm
  python experiments/qk_dynamics.py --workdir=runs/clm \
      --config=experiments/configs/qk_dynamics.py:smoke

Reads DIR/config.json and DIR/checkpoints/, writes DIR/results.json (provenance, config, the
per-checkpoint metrics, the Spearman correlation of entropy with |mean q·mean k|, and the expected
trends of docs/SCIENCE.md with their numbers), DIR/dynamics.npz and DIR/figures/*.png.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("dynamics")  # --config optional: the package's qk_dynamics
