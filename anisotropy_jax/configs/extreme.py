"""Config of experiments/extreme.py: attention sinks, massive activations and rogue
dimensions per layer of every offline transformer, beside its untrained re-initialisations, on
natural text, random ids and one repeated id (docs/EXTREME.md).

  anisotropy-jax extreme --workdir=runs/extreme_tokens
  python experiments/extreme.py --config=extreme:smoke --workdir=/tmp/extreme_smoke

Variants (`--config=extreme:VARIANT`; several combine with '+'; smoke applies last and sets
every size, so `:small+smoke` and `:report+smoke` are smoke):
  default  every installed model of EXTREME_MODELS, 32 sentences of 20-60 words (≤ 64 tokens),
           4 images or utterances, 5 untrained seeds (Qwen2.5-Coder-0.5B/1.5B-Instruct only with
           scripts/install.sh's `models` extra; the 1.5B not run: docs/results/extreme/README.md)
  smoke    all-MiniLM-L6-v2 only, 8 sentences, 2 untrained seeds (CI)
  small    MiniLM-L6, MiniLM-L3, SmolLM2-135M and DINOv2-S, 16 sentences, 4 images, 5
           untrained seeds
  report   every installed model, 16 sentences, 4 images or utterances, 5 untrained seeds (the
           default halved in sentences to fit a shared 2-core CPU: the numbers of
           docs/REPORT.md "Extreme tokens")
  intervention  Godey 3 inside trained networks (measure='intervention'): MiniLM-L6,
           SmolLM2-135M and Gemma-3-270M, 16 natural sentences, the common component of each
           block's input removed, replaced, rescaled, against 8 random directions
           (docs/EXTREME.md, "Godey 3 inside trained networks")
Any checkpoint (a Hugging Face folder, or a .gguf file / a folder holding one) instead of the
named models:

  anisotropy-jax extreme --workdir=runs/extreme_mine --config.model_dir=/path/to/model
Every field is an ExtremeConfig field (anisotropy_jax/configs/extreme.py) and can be overridden
with --config.FIELD=VALUE.
"""
from __future__ import annotations

import dataclasses

import ml_collections

from anisotropy_jax.config import config_dict, with_variants
from anisotropy_jax.config.base import require, require_choice, require_int
from anisotropy_jax.config.model import PRECISIONS
from anisotropy_jax.configs.pretrained import CROSS_MODAL_MODELS

# The settings: each field, its meaning and its check.
# The offline transformers of the cross-modal comparison (the CNN, ResNet-50, has no attention
# and no token axis that a sink or a first token could live on, so it is not measured), and
# Gemma-3-270M: QK-norm, beside SmolLM2-135M without it (claim (e)); and Qwen2.5-Coder-Instruct
# at two sizes (Q4_K_M GGUFs of the `models` extra): one family's scale trend.
GEMMA3 = "Gemma-3-270M"
QWEN25_CODER = {"0.5b": "Qwen2.5-Coder-0.5B-Instruct", "1.5b": "Qwen2.5-Coder-1.5B-Instruct"}
EXTREME_MODELS = (tuple(m for m in CROSS_MODAL_MODELS if m != "ResNet-50-untrained") + (GEMMA3,)
                  + tuple(QWEN25_CODER.values()))
# Text inputs: Shakespeare sentences, the same token positions filled with uniformly drawn ids,
# and with one id repeated (Gu et al.'s control). Image and audio models take their offline
# defaults (photographs, spoken Shakespeare) as their one natural input.
# A causal model with a BOS id also takes natural and repeated text with and without a BOS at
# position 0 (studies/extreme/inputs.py FIRST_TOKEN_KINDS): the first-token claim's inputs.
INPUT_KINDS = ("natural", "random", "repeated", "natural_bos", "natural_no_bos", "repeated_bos",
               "repeated_no_bos")
MEASURES = ("statistics", "intervention")
INTERVENTION_MODELS = ("all-MiniLM-L6-v2", "SmolLM2-135M-Instruct", GEMMA3)


@dataclasses.dataclass(frozen=True)
class ExtremeConfig:
    """Which models, which inputs, and how they are measured.

    Attributes:
      model_dir: a local checkpoint of any family of anisotropy_jax/models/registry.py (a Hugging
        Face folder, or a .gguf file / a folder holding one), measured instead of `models` and
        named in results.json by its folder or file name; '' = `models`.
      models: names of EXTREME_MODELS (the cross-modal study's offline transformers); those not
        installed are skipped and listed in results.json "skipped".
      inputs: text input kinds, a subset of INPUT_KINDS ('natural' Shakespeare sentences,
        'random' ids, one 'repeated' id; '*_bos' / '*_no_bos' natural or repeated text with and
        without a BOS at position 0, causal models with a BOS id only); image and audio models
        measure their natural inputs only.
      num_sentences: text sequences per input kind (one padded batch).
      max_length: tokenizer truncation length in tokens (Gu et al. measure 64-token inputs).
      min_words, max_words: sentence lengths kept, in words (long sentences: Gu et al.'s inputs
        are 64 tokens long).
      num_inputs: images or utterances of an image or audio model (one batch).
      untrained_seeds: re-initialisations of every architecture (seeds seed, seed + 1, …).
      seed: the sentence sample, the random and repeated ids, and the untrained weights.
      epsilon: Gu et al.'s sink threshold on α_0.
      top_k: massive activations kept per state, largest first, with their coordinates.
      top_dims: the k of the CC_d top-dimensions share (rogue dimensions).
      precision: matmul precision of the forward, 'highest' | 'default' | 'bfloat16'.
      measure: 'statistics' (the per-layer statistics above) | 'intervention' (Godey 3 inside
        trained networks: each block's input intervened on, its attention measured; text models
        and the natural inputs only; `untrained_seeds` unused).
      num_directions: random directions of the intervention's control.
    """

    model_dir: str = ""
    models: tuple[str, ...] = EXTREME_MODELS
    inputs: tuple[str, ...] = INPUT_KINDS
    num_sentences: int = 32
    max_length: int = 64
    min_words: int = 20
    max_words: int = 60
    num_inputs: int = 4
    untrained_seeds: int = 5
    seed: int = 0
    epsilon: float = 0.3
    top_k: int = 8
    top_dims: int = 3
    precision: str = "highest"
    measure: str = "statistics"
    num_directions: int = 8

    def __post_init__(self):
        require(isinstance(self.model_dir, str), "model_dir",
                f"must be a path, got {self.model_dir!r}")
        require(len(self.models) > 0, "models", "name at least one model")
        for name in self.models:
            require_choice(name, "models", EXTREME_MODELS, "model")
        require(len(self.inputs) > 0, "inputs", "name at least one input kind")
        for name in self.inputs:
            require_choice(name, "inputs", INPUT_KINDS, "input kind")
        for name, minimum in (("num_sentences", 3), ("max_length", 4), ("min_words", 1),
                              ("max_words", 1), ("num_inputs", 2), ("untrained_seeds", 1),
                              ("seed", 0), ("top_k", 1), ("top_dims", 1)):
            require_int(getattr(self, name), name, minimum)
        require(self.max_words >= self.min_words, "max_words",
                f"{self.max_words} < min_words {self.min_words}")
        require(isinstance(self.epsilon, (int, float)) and 0 < self.epsilon < 1, "epsilon",
                f"must be in (0, 1), got {self.epsilon!r}")
        require_choice(self.precision, "precision", PRECISIONS, "precision")
        require_choice(self.measure, "measure", MEASURES, "measurement")
        require_int(self.num_directions, "num_directions", 2)


# The named variants (`--config=extreme:VARIANT`).
VARIANTS = ("default", "smoke", "small", "report", "intervention")
SETTINGS = {"smoke": {"models": ("all-MiniLM-L6-v2",), "num_sentences": 8, "untrained_seeds": 2},
            "small": {"models": ("all-MiniLM-L6-v2", "paraphrase-MiniLM-L3-v2",
                                 "SmolLM2-135M-Instruct", "DINOv2-S"),
                      "num_sentences": 16},
            "report": {"num_sentences": 16},
            "intervention": {"models": INTERVENTION_MODELS, "inputs": ("natural",),
                             "num_sentences": 16, "measure": "intervention"}}
FIELD_DOCS = {"": ExtremeConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """ExtremeConfig's defaults, then the variant `arg`."""
    return with_variants(config_dict(ExtremeConfig), arg, VARIANTS, SETTINGS)
