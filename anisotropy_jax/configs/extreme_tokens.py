"""Config of experiments/extreme_tokens.py: attention sinks, massive activations and rogue
dimensions per layer of every offline transformer, beside its untrained re-initialisations, on
natural text, random ids and one repeated id (docs/EXTREME_TOKENS.md).

  anisotropy-jax extreme --workdir=runs/extreme_tokens
  python experiments/extreme_tokens.py --config=experiments/configs/extreme_tokens.py:smoke \
      --workdir=/tmp/extreme_smoke

Variants (`--config=extreme:VARIANT`):
  default  every installed model of EXTREME_MODELS, 32 sentences of 20-60 words (≤ 64 tokens),
           4 images or utterances, 5 untrained seeds
  smoke    all-MiniLM-L6-v2 only, 8 sentences, 2 untrained seeds (CI)
  small    MiniLM-L6, MiniLM-L3, SmolLM2-135M and DINOv2-S, 16 sentences, 4 images, 5
           untrained seeds
  report   every installed model, 16 sentences, 4 images or utterances, 5 untrained seeds (the
           default halved in sentences to fit a shared 2-core CPU: the numbers of
           docs/REPORT.md "Extreme tokens (issue 22)")
Every field is an ExtremeConfig field (anisotropy_jax/config/extreme.py) and can be overridden
with --config.FIELD=VALUE.
"""
import ml_collections

from anisotropy_jax.config import config_dict, with_variants
from anisotropy_jax.config.extreme import ExtremeConfig

VARIANTS = ("default", "smoke", "small", "report")
SETTINGS = {"smoke": {"models": ("all-MiniLM-L6-v2",), "num_sentences": 8, "untrained_seeds": 2},
            "small": {"models": ("all-MiniLM-L6-v2", "paraphrase-MiniLM-L3-v2",
                                 "SmolLM2-135M-Instruct", "DINOv2-S"),
                      "num_sentences": 16},
            "report": {"num_sentences": 16}}
FIELD_DOCS = {"": ExtremeConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """ExtremeConfig's defaults, then the variant `arg`."""
    return with_variants(config_dict(ExtremeConfig), arg, VARIANTS, SETTINGS)
