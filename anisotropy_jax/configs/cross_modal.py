"""Config of experiments/cross_modal.py: per-layer average cosine of every offline model of every
modality (MiniLM-L6/L3, MPNet, SmolLM2; DINOv2-S; Whisper tiny.en and base; an untrained
ResNet-50) beside its untrained baseline, on one plot, and a table (docs/CROSS_MODAL.md).

  anisotropy-jax cross_modal --workdir=docs/results/cross_modal/cross_modal
  python experiments/cross_modal.py --config=cross_modal \\
      --workdir=docs/results/cross_modal/cross_modal

Smoke run (MiniLM-L6 and Whisper tiny.en on 8 sentences / 2 utterances; seconds):

  python experiments/cross_modal.py --config=cross_modal:smoke --workdir=/tmp/cross_modal_smoke

Variants (`--config=cross_modal:VARIANT`; names combine with '+', smoke last):
  default  every offline model; 200 sentences, 16 images or utterances
  smoke    MiniLM-L6 and Whisper tiny.en on 8 sentences / 2 utterances, 2 untrained seeds (CI)
Fields, defaults and their meaning are CrossModalConfig's (anisotropy_jax/configs/pretrained.py;
`anisotropy-jax cross_modal --help` lists them); `pretrained.*` are the PretrainedConfig fields
of every per-model run (CROSS_MODAL_PRETRAINED_FIELDS).
"""
import ml_collections

from anisotropy_jax.config import with_variants
from anisotropy_jax.configs.pretrained import CrossModalConfig, cross_modal_config_dict

VARIANTS = ("default", "smoke")
SETTINGS = {"smoke": {"models": ("all-MiniLM-L6-v2", "Whisper-tiny.en"),
                      "pretrained.num_sentences": 8, "pretrained.num_inputs": 2,
                      "pretrained.num_pairs": 500, "pretrained.batch_size": 8,
                      "pretrained.untrained_seeds": 2}}
# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": CrossModalConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """CrossModalConfig's defaults, then the variant `arg`."""
    return with_variants(cross_modal_config_dict(), arg, VARIANTS, SETTINGS)
