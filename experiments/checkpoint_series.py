"""Per-layer anisotropy and per-head query/key geometry of a series of checkpoints of one model,
against the training step (docs/PRETRAINED.md, "Checkpoint series").

  python experiments/checkpoint_series.py --config=experiments/configs/checkpoint_series.py \
      --config.series_dir=DIR --workdir=OUT

DIR holds one sub-folder per step (step_N, step-N, stepN, checkpoint-N, checkpoint_N or N), each a
Hugging Face directory of a registered family; our training runs are exported to that layout by
`anisotropy_jax.studies.series.export_training_run`. Writes into OUT: config.json, sentences.txt,
report.txt, series.npz, figures/layers_vs_step.png, figures/heads_vs_step.png and results.json
last. A bad flag, text file or series folder exits with status 2 and one line naming it, before
anything is compiled; a non-finite metric exits with status 1.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("series", "experiments/configs/checkpoint_series.py")
