"""Config of experiments/cross_modal.py: per-layer average cosine of every offline model of every
modality (MiniLM-L6/L3, MPNet, SmolLM2; DINOv2-S; Whisper tiny.en and base; an untrained
ResNet-50) beside its untrained baseline, on one plot, and a table (docs/MODALITIES.md).

  python experiments/cross_modal.py --config=experiments/configs/cross_modal.py \
      --workdir=docs/results/modalities/cross_modal

Smoke run (MiniLM-L6 and Whisper tiny.en on 8 sentences / 2 utterances; seconds):

  python experiments/cross_modal.py --config=experiments/configs/cross_modal.py:smoke \
      --workdir=/tmp/cross_modal_smoke

Variants: default, smoke. Fields are CrossModalConfig's (anisotropy_jax/config/pretrained.py);
`pretrained.*` are the PretrainedConfig fields of every per-model run.
"""
import ml_collections

from anisotropy_jax.config.pretrained import CROSS_MODAL_MODELS

VARIANTS = ("default", "smoke")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = arg or "default"
    if variant not in VARIANTS:
        raise ValueError(f"config variant: unknown variant {variant!r}; choose one of {VARIANTS}")
    c = ml_collections.ConfigDict()
    c.models = tuple(CROSS_MODAL_MODELS)  # those not installed are skipped (and listed)
    c.reuse = True                       # keep workdir/<name>/results.json when it exists
    c.pretrained = ml_collections.ConfigDict()
    c.pretrained.num_sentences = 200     # text models: the sentences of docs/results/pretrained
    c.pretrained.max_length = 64
    c.pretrained.length_multiple = 32
    c.pretrained.inputs = ""             # image/audio models: folder; "" = offline defaults
    c.pretrained.num_inputs = 16         # images / utterances (offline defaults)
    c.pretrained.batch_size = 32
    c.pretrained.num_pairs = 10_000
    c.pretrained.seed = 0
    if variant == "smoke":
        c.models = ("all-MiniLM-L6-v2", "Whisper-tiny.en")
        c.pretrained.num_sentences = 8
        c.pretrained.num_inputs = 2
        c.pretrained.num_pairs = 500
        c.pretrained.batch_size = 8
    return c
