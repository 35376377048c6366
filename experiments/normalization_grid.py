"""Causal LMs trained with each attention normalisation on Shakespeare and on the Bigram-Backcopy
task, several seeds each as one vmapped program, analysed at every checkpoint: anisotropy,
attention sinks, massive activations, kurtosis, |cos(mean q, mean k)| (docs/NORMALIZATIONS.md).

  python experiments/normalization_grid.py \
      --config=experiments/configs/normalization_grid.py[:VARIANT] --workdir=DIR

Writes DIR/<dataset>/<normalization>/seed_<s>/ (training runs: killed and restarted with the same
command, the grid resumes), then results.md, figures/normalizations.png and, last, results.json.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("normalizations", "experiments/configs/normalization_grid.py")
