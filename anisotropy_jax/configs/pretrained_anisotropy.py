"""Config of experiments/pretrained_anisotropy.py: layer-wise anisotropy and drift of a pretrained
checkpoint of any registered family (BERT, GPT-2, GPT-NeoX, Llama, ...; a Hugging Face directory
or a GGUF file) against its untrained re-initialisation (docs/PRETRAINED.md).

Default: the packaged all-MiniLM-L6-v2 on 1000 Shakespeare sentences (about 3 min on 2 CPU cores):

  anisotropy-jax pretrained --workdir=runs/pretrained_minilm
  python experiments/pretrained_anisotropy.py \
      --config=experiments/configs/pretrained_anisotropy.py --workdir=runs/pretrained_minilm

Any local checkpoint (config.json, model.safetensors, tokenizer.json; or a .gguf) and any
UTF-8 text file (paragraphs separated by blank lines, cut into sentences):

  python experiments/pretrained_anisotropy.py \
      --config=experiments/configs/pretrained_anisotropy.py --workdir=runs/my_model \
      --config.model_dir=/path/to/model --config.text_file=corpus.txt \
      --config.num_sentences=2000 --config.save_hidden_states=True

Image and audio models (vit/deit/dinov2/resnet/whisper/wav2vec2/hubert directories, a
CTranslate2 Whisper directory, a DINOv2 .onnx file): a folder of images or WAV files, or the
offline defaults (scikit-image photographs; Shakespeare lines spoken by espeak-ng) without it:

  python experiments/pretrained_anisotropy.py \
      --config=experiments/configs/pretrained_anisotropy.py --workdir=runs/whisper_tiny_en \
      --config.model_dir=/path/to/whisper_ct2_dir [--config.inputs=wav_folder]

Smoke run (seconds; 16 sentences, 8 per batch, 1000 sampled pairs; 4 images or utterances):

  python experiments/pretrained_anisotropy.py \
      --config=experiments/configs/pretrained_anisotropy.py:smoke --workdir=/tmp/pretrained_smoke

Variants (`--config=pretrained:VARIANT`):
  default  1000 sentences, 32 per batch, 10,000 sampled pairs; 16 images or utterances
  smoke    16 sentences, 8 per batch, 1000 sampled pairs; 4 images or utterances; 2 untrained
           seeds (CI)
Every field is a PretrainedConfig field (anisotropy_jax/config/pretrained.py holds their defaults
and meaning, and validates each one; `anisotropy-jax pretrained --help` lists them) and can be
overridden with --config.FIELD=VALUE.
"""
import ml_collections

from anisotropy_jax.config import PretrainedConfig, config_dict, with_variants

VARIANTS = ("default", "smoke")
SETTINGS = {"smoke": {"num_sentences": 16, "batch_size": 8, "num_pairs": 1000, "num_inputs": 4,
                      "untrained_seeds": 2}}
# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": PretrainedConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """PretrainedConfig's defaults, then the variant `arg`."""
    return with_variants(config_dict(PretrainedConfig), arg, VARIANTS, SETTINGS)
