"""Attention sinks (Gu et al.'s sink rate, a position-free variant), no-op heads, massive
activations, kurtosis and ∞-norm, rogue dimensions (CC_d), the top principal component with and
without the first token, and the sink's logit excess split into the mean-query term and the rest,
per layer of every offline transformer beside its untrained re-initialisations, on natural text,
random ids and one repeated id (docs/EXTREME_TOKENS.md).

  python experiments/extreme_tokens.py \
      --config=experiments/configs/extreme_tokens.py[:smoke] --workdir=DIR

Writes into DIR: config.json, summary.md and results.json last
(anisotropy_jax/studies/extreme/report.py).
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("extreme", "experiments/configs/extreme_tokens.py")
