"""The untrained-block bias sweep, the project's main job (docs/BIAS_SWEEP.md).

  python experiments/bias_sweep.py --config=experiments/configs/bias_sweep.py[:VARIANT] \
      --workdir=DIR [--config.FIELD=VALUE ...] [--distributed]

Writes into DIR: config.json (at the start), results.json and results.npz (at the end, atomically:
an interrupted run leaves no results.json), figures/{cosine,norms,attention,query_key,
categorical}.png, and prints progress per chunk, a compact table and a warning naming any point
where float32 rounding may corrupt the attention statistics. A bad flag or config exits with status 2 and one
line naming the field, before anything is compiled; a float32 overflow exits with status 1.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("sweep", "experiments/configs/bias_sweep.py")
