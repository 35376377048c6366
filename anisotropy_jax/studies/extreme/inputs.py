"""The inputs of the extreme-token study, one batch per kind (`InputBatch`).

Text models (`text_batches`): the pretrained study's Shakespeare sentences (`studies.pretrained`:
`validate` draws them, the model's tokenizer encodes them), padded into one batch, right-padded so
that key 0 is every sequence's first token ([CLS] / BOS where the tokenizer adds one), and two
controls with the same special tokens, lengths and padding:
  random    every other token an id drawn uniformly from the vocabulary, special ids left out;
  repeated  every other token one id, drawn (with the seed) from the natural batch's tokens;
Gu et al. (ICLR 2025) report sinks on natural text but none on one repeated token for rotary
models. A causal model with a BOS id (its config's bos_token_id) also takes natural and repeated
with and without a BOS at position 0 (FIRST_TOKEN_KINDS: `natural_bos`, `natural_no_bos`,
`repeated_bos`, `repeated_no_bos`), whatever its tokenizer adds: with one repeated id and no BOS,
key 0 equals every other key, and only the BOS makes it distinct. Every kind of a model is
padded to one width (one compilation). Image and audio models measure their offline defaults
(`media_batch`). Every batch carries a control key per sequence (`control_keys`).

Degenerate inputs get a warning line (`input_warnings`): identical or constant images and clips,
and natural sentences that are identical or one repeated token. The repeated kinds are one
repeated token because they were asked for: they never warn.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from anisotropy_jax.studies.pretrained import analysis
from anisotropy_jax.studies.pretrained import text as text_lib


# kind → (the kind it is built from, a BOS at position 0 or not)
FIRST_TOKEN_KINDS = {"natural_bos": ("natural", True), "natural_no_bos": ("natural", False),
                     "repeated_bos": ("repeated", True), "repeated_no_bos": ("repeated", False)}


@dataclasses.dataclass(frozen=True)
class InputBatch:
    """One batch: the family's forward inputs, the measured tokens (B, L) (None: all), the
    token ids (text only, for the report), and the control key of every sequence (B,)."""

    inputs: tuple[Any, ...]
    mask_BxL: np.ndarray | None
    token_ids: np.ndarray | None = None
    control_key_B: np.ndarray | None = None


def control_keys(mask_BxL: np.ndarray, fractions_B: np.ndarray) -> np.ndarray:
    """(B,) int32: per sequence with n measured tokens (all at the front), key 1 + ⌊u (n − 1)⌋
    for its fraction u ∈ [0, 1): a key other than key 0, at the same relative place in every kind
    (0 for a sequence of one token)."""
    n_B = mask_BxL.sum(axis=1)
    return np.where(n_B > 1, 1 + np.floor(fractions_B * (n_B - 1)), 0).astype(np.int32)


def first_token_id(model: analysis.PretrainedModel) -> int | None:
    """The BOS id of a causal text model (its config's bos_token_id), None otherwise."""
    bos = model.hf_config.get("bos_token_id")
    if model.modality != "text" or not model.family.causal or not isinstance(bos, int):
        return None
    return bos


def with_first_token(batch: text_lib.Batch, bos: int, present: bool) -> text_lib.Batch:
    """The batch with the BOS id as every sequence's first token (`present`, prepended where the
    tokenizer did not add it: one column wider) or without it (removed where every sequence
    starts with it, the rest shifted left and padded at the end)."""
    rows = batch.mask.any(axis=1)
    has = bool(np.all((batch.tokens[rows, 0] == bos) & batch.mask[rows, 0]))
    if has == present:
        return batch
    if present:
        def prepend(a, value):
            return np.concatenate([np.full((a.shape[0], 1), value, a.dtype), a], axis=1)
        return text_lib.Batch(prepend(batch.tokens, bos), prepend(batch.token_types, 0),
                              np.concatenate([rows[:, None], batch.mask], axis=1),
                              np.concatenate([rows[:, None], batch.special], axis=1),
                              batch.sentence_index)
    return text_lib.Batch(batch.tokens[:, 1:], batch.token_types[:, 1:], batch.mask[:, 1:],
                          batch.special[:, 1:], batch.sentence_index)


def _padded(batch: text_lib.Batch, width: int, pad_id: int) -> text_lib.Batch:
    extra = width - batch.tokens.shape[1]

    def pad(a, value):
        return np.pad(a, ((0, 0), (0, extra)), constant_values=value)

    return text_lib.Batch(pad(batch.tokens, pad_id).astype(np.int32), pad(batch.token_types, 0),
                          pad(batch.mask, False), pad(batch.special, False),
                          batch.sentence_index)


def _replaced(batch: text_lib.Batch, ids_BxL: np.ndarray) -> text_lib.Batch:
    """The batch with its non-special real tokens replaced by `ids_BxL`."""
    free = batch.mask & ~batch.special
    return dataclasses.replace(batch, tokens=np.where(free, ids_BxL, batch.tokens).astype(
        np.int32))


def text_batches(model: analysis.PretrainedModel, sentences: list[str], kinds: tuple[str, ...],
                 seed: int) -> dict[str, InputBatch]:
    """{kind: InputBatch} for the text kinds of `kinds` (module docstring), all of one shape;
    the first-token kinds only for a causal model with a BOS id (`first_token_id`)."""
    encoded = text_lib.encode(model.tokenizer, sentences)
    batch, = text_lib.make_batches(encoded, len(sentences), 1, model.pad_id,
                                   model.shape["max_len"])
    free = batch.mask & ~batch.special
    if not free.any():
        raise ValueError("the sentences have no token besides the special ones")
    rng = np.random.default_rng(seed)
    special_ids = np.unique(np.append(batch.tokens[batch.special], model.pad_id))
    allowed = np.setdiff1d(np.arange(model.id_limit or model.shape["vocab_size"]), special_ids)
    bos = first_token_id(model)
    repeated_id = None
    built: dict[str, text_lib.Batch] = {}
    for kind in kinds:
        base, first = FIRST_TOKEN_KINDS.get(kind, (kind, None))
        if first is not None and bos is None:
            continue
        source = batch if first is None else with_first_token(batch, bos, first)
        if base == "natural":
            built[kind] = source
        elif base == "random":
            built[kind] = _replaced(source, rng.choice(allowed, size=source.tokens.shape))
        else:
            if repeated_id is None:  # drawn after the random ids, as before the first-token kinds
                repeated_id = rng.choice(batch.tokens[free])
            built[kind] = _replaced(source, np.full(source.tokens.shape, repeated_id))
    width = max(b.tokens.shape[1] for b in built.values())
    fractions_B = np.random.default_rng([seed, 1]).uniform(size=batch.tokens.shape[0])
    out = {}
    for kind, b in built.items():
        b = _padded(b, width, model.pad_id)
        out[kind] = InputBatch((b.tokens, b.token_types, b.mask), b.mask, b.tokens,
                               control_keys(b.mask, fractions_B))
    return out


def media_batch(inputs: analysis.Inputs) -> dict[str, InputBatch]:
    """{"natural": the image or audio inputs in one batch} (the pretrained study's offline
    defaults, `media_inputs`; Whisper: the frames that cover speech are measured). The control
    key is the stats function's default, the middle of the measured tokens."""
    batches = inputs.media.batches
    if len(batches) != 1:
        raise ValueError(f"expected the inputs in one batch, got {len(batches)}")
    return {"natural": InputBatch(batches[0].inputs, batches[0].mask_BxL)}


def input_warnings(loaded: analysis.Inputs, kinds: tuple[str, ...]) -> list[str]:
    """The warning lines of the inputs a model measures: its media's (`media_inputs`: identical
    or constant images and clips), or, where a kind built from the natural sentences is measured,
    theirs (`text.degenerate_warnings`: identical, or one repeated token). The random and
    repeated kinds are not checked: a repeated-token input asked for is no accident."""
    if loaded.media is not None:
        return list(loaded.media.warnings)
    natural = [k for k in kinds if FIRST_TOKEN_KINDS.get(k, (k, None))[0] == "natural"]
    if not natural:
        return []
    return text_lib.degenerate_warnings(loaded.model.tokenizer, loaded.sentences,
                                        f"{loaded.text_source} (input {', '.join(natural)})")
