"""Config of the embedding-isotropy study (docs/EMBEDDINGS.md): Machina & Mercer's partition
isotropy of the input, output and gain-scaled output embeddings of GPT-NeoX-style causal LMs
trained on a byte-level BPE vocabulary, per checkpoint and width.

Run (default: widths 32/64/128, 2 layers, vocabulary 4,096, 400 steps, 5 seeds; 418 s on the 16
CPU cores of a device machine, docs/results/embeddings/README.md):

  anisotropy-jax embeddings --workdir=runs/embeddings
  python experiments/embeddings.py --config=embeddings --workdir=runs/embeddings

Variants (`--config=embeddings:VARIANT` or `anisotropy_jax/configs/embeddings.py:VARIANT`; smoke
applies last and sets every size, so `:gpu+smoke` is smoke with gpu's TF32 matmuls and learning
rate):
  smoke  vocabulary 300 on the first 200,000 characters, widths 16/32, 1 layer, 12 steps, 1 seed
         (CI)
  gpu    widths 128/256/512, 4 layers, vocabulary 8,192, L = 256, batch 32, 1,500 steps,
         5 seeds, TF32 matmuls (sized for one H100: 370 s there)
Any field can be overridden, e.g. `--config.widths='(64, 128)' --config.steps=800
--config.checkpoint_steps='(0, 100, 800)' --config.optim.learning_rate=1e-3`.
Fields, defaults and their meaning: EmbeddingsConfig in anisotropy_jax/configs/embeddings.py
(`anisotropy-jax embeddings --help` lists them).
"""
from __future__ import annotations

import dataclasses

import ml_collections

from anisotropy_jax.config import config_dict, with_variants
from anisotropy_jax.config.base import require, require_choice, require_int, require_positive_float
from anisotropy_jax.config.model import PRECISIONS, canonical_precision
from anisotropy_jax.config.training import OptimConfig


# The settings: each field, its meaning and its check.
def _require_int_tuple(value, field: str, minimum: int) -> None:
    require(isinstance(value, tuple) and len(value) >= 1, field,
            f"must be a non-empty list of integers, got {value!r}")
    for item in value:
        require_int(item, field, minimum)
    require(len(set(value)) == len(value), field, f"has repeated values: {value!r}")


@dataclasses.dataclass(frozen=True)
class EmbeddingsConfig:
    """Tokenizer, models, training and measurement of the study.

    Attributes:
      vocab_size: size of the byte-level BPE vocabulary (256 byte tokens + merges; ≥ 257),
        much larger than the widths (N ≫ D).
      corpus_chars: use only the first N characters of the Shakespeare text (0 = all of it,
        about 5 MB).
      chunk_len: the text is cut into chunks of this many characters; a seeded share
        `val_fraction` of the chunks is held out (the tokenizer never sees it).
      val_fraction: share of the chunks held out for the validation loss.
      data_seed: seed of the train/validation split (the tokenizer is deterministic given it).
      widths: residual widths D of the models (one model per width and seed).
      head_dim: width of a head; heads = D / head_dim.
      num_layers: blocks per model.
      ff_ratio: d_ff = ff_ratio · D.
      rotary_pct: share of each head's dims that are rotated (GPT-NeoX/Pythia: 0.25); rounded
        down to an even number of dims.
      init_std: σ of the N(0, σ²) init of kernels and embeddings (Hugging Face's GPT-NeoX init).
      seq_len, batch_size: training windows of tokens.
      steps: AdamW updates per model.
      checkpoint_steps: steps at which the embeddings are measured; step 0 (the init) and `steps`
        are always measured too.
      eval_batches: validation batches (of batch_size windows, fixed) for the validation loss.
      seeds: model seeds (init and batch order); intervals are over these (independent units;
        5 by default: a Student-t interval over 3 is wide).
      precision: matmul precision of the model, 'highest' | 'default' | 'bfloat16'.
      optim: AdamW, warmup + cosine decay, clipping (the training study's OptimConfig).
    """

    vocab_size: int = 4096
    corpus_chars: int = 0
    chunk_len: int = 4096
    val_fraction: float = 0.05
    data_seed: int = 0
    widths: tuple[int, ...] = (32, 64, 128)
    head_dim: int = 16
    num_layers: int = 2
    ff_ratio: int = 4
    rotary_pct: float = 0.25
    init_std: float = 0.02
    seq_len: int = 64
    batch_size: int = 16
    steps: int = 400
    checkpoint_steps: tuple[int, ...] = (0, 25, 50, 100, 200, 400)
    eval_batches: int = 4
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    precision: str = "highest"
    optim: OptimConfig = OptimConfig(learning_rate=3e-3, warmup_steps=50, weight_decay=0.01)

    def __post_init__(self):
        require_int(self.vocab_size, "vocab_size", 257)
        require_int(self.corpus_chars, "corpus_chars", 0)
        require_int(self.chunk_len, "chunk_len", 16)
        require(isinstance(self.val_fraction, float) and 0 < self.val_fraction < 0.5,
                "val_fraction", f"must be in (0, 0.5), got {self.val_fraction!r}")
        require_int(self.data_seed, "data_seed", 0)
        require_int(self.head_dim, "head_dim", 2)
        _require_int_tuple(self.widths, "widths", 2)
        bad = [w for w in self.widths if w % self.head_dim]
        require(not bad, "widths", f"{bad} not divisible by head_dim {self.head_dim}")
        require_int(self.num_layers, "num_layers", 1)
        require_int(self.ff_ratio, "ff_ratio", 1)
        require(isinstance(self.rotary_pct, (int, float)) and not isinstance(self.rotary_pct, bool)
                and 0 <= self.rotary_pct <= 1, "rotary_pct",
                f"must be in [0, 1], got {self.rotary_pct!r}")
        require_positive_float(self.init_std, "init_std")
        require_int(self.seq_len, "seq_len", 2)
        require_int(self.batch_size, "batch_size", 1)
        require_int(self.steps, "steps", 1)
        _require_int_tuple(self.checkpoint_steps, "checkpoint_steps", 0)
        late = [s for s in self.checkpoint_steps if s > self.steps]
        require(not late, "checkpoint_steps", f"{late} beyond steps={self.steps}")
        require_int(self.eval_batches, "eval_batches", 1)
        _require_int_tuple(self.seeds, "seeds", 0)
        canonical_precision(self)
        require_choice(self.precision, "precision", PRECISIONS, "precision")
        require(isinstance(self.optim, OptimConfig), "optim",
                f"must be an OptimConfig mapping, got {self.optim!r}")

    @property
    def measured_steps(self) -> tuple[int, ...]:
        """The checkpoint steps, with 0 and `steps`, sorted."""
        return tuple(sorted({0, self.steps, *self.checkpoint_steps}))

    def rotary_dims(self) -> int:
        """int(head_dim · rotary_pct), rounded down to even (rotary pairs dims)."""
        return int(self.head_dim * self.rotary_pct) // 2 * 2


# The named variants (`--config=embeddings:VARIANT`).
VARIANTS = ("default", "smoke", "gpu")
SETTINGS = {
    "smoke": {"vocab_size": 300, "corpus_chars": 200_000, "chunk_len": 2048, "widths": (16, 32),
              "head_dim": 8, "num_layers": 1, "seq_len": 16, "batch_size": 4, "steps": 12,
              "eval_batches": 1, "checkpoint_steps": (0, 4, 12), "optim.warmup_steps": 4,
              "seeds": (0,)},
    "gpu": {"vocab_size": 8192, "widths": (128, 256, 512), "head_dim": 64, "num_layers": 4,
            "seq_len": 256, "batch_size": 32, "steps": 1500, "eval_batches": 8,
            "checkpoint_steps": (0, 10, 30, 100, 300, 1000, 1500), "seeds": (0, 1, 2, 3, 4),
            "precision": "default", "optim.learning_rate": 2e-3, "optim.warmup_steps": 100},
}
# Where each field's meaning is written (anisotropy_jax/config/docs.py; --help lists them).
FIELD_DOCS = {"": EmbeddingsConfig}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """EmbeddingsConfig's defaults, then the variant `arg`."""
    return with_variants(config_dict(EmbeddingsConfig), arg, VARIANTS, SETTINGS)
