"""The inputs of the extreme-token study, one batch per kind (`InputBatch`).

Text models (`text_batches`): the pretrained study's Shakespeare sentences (`studies.pretrained`:
`validate` draws them, the model's tokenizer encodes them), padded into one batch, right-padded so
that key 0 is every sequence's first token ([CLS] / BOS where the tokenizer adds one), and two
controls with the same special tokens, lengths and padding:
  random    every other token an id drawn uniformly from the vocabulary, special ids left out;
  repeated  every other token one id, drawn (with the seed) from the natural batch's tokens;
Gu et al. (ICLR 2025) report sinks on natural text but none on one repeated token for rotary
models. Image and audio models measure their offline defaults (`media_batch`).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from anisotropy_jax.studies.pretrained import analysis
from anisotropy_jax.studies.pretrained import text as text_lib


@dataclasses.dataclass(frozen=True)
class InputBatch:
    """One batch: the family's forward inputs, the measured tokens (B, L) (None: all), and the
    token ids (text only, for the report)."""

    inputs: tuple[Any, ...]
    mask_BxL: np.ndarray | None
    token_ids: np.ndarray | None = None


def _replace_tokens(batch: text_lib.Batch, ids_BxL: np.ndarray) -> InputBatch:
    """The batch with its non-special real tokens replaced by `ids_BxL`."""
    free = batch.mask & ~batch.special
    tokens = np.where(free, ids_BxL, batch.tokens).astype(np.int32)
    return InputBatch((tokens, batch.token_types, batch.mask), batch.mask, tokens)


def text_batches(model: analysis.PretrainedModel, sentences: list[str], kinds: tuple[str, ...],
                 seed: int) -> dict[str, InputBatch]:
    """{kind: InputBatch} for the text kinds of `kinds` (module docstring), all of one shape."""
    encoded = text_lib.encode(model.tokenizer, sentences)
    batch, = text_lib.make_batches(encoded, len(sentences), 1, model.pad_id,
                                   model.shape["max_len"])
    free = batch.mask & ~batch.special
    if not free.any():
        raise ValueError("the sentences have no token besides the special ones")
    rng = np.random.default_rng(seed)
    special_ids = np.unique(np.append(batch.tokens[batch.special], model.pad_id))
    allowed = np.setdiff1d(np.arange(model.id_limit or model.shape["vocab_size"]), special_ids)
    out = {}
    for kind in kinds:
        if kind == "natural":
            out[kind] = InputBatch((batch.tokens, batch.token_types, batch.mask), batch.mask,
                                   batch.tokens)
        elif kind == "random":
            out[kind] = _replace_tokens(batch, rng.choice(allowed, size=batch.tokens.shape))
        elif kind == "repeated":
            out[kind] = _replace_tokens(batch, np.full(batch.tokens.shape,
                                                       rng.choice(batch.tokens[free])))
    return out


def media_batch(inputs: analysis.Inputs) -> dict[str, InputBatch]:
    """{"natural": the image or audio inputs in one batch} (the pretrained study's offline
    defaults, `media_inputs`; Whisper: the frames that cover speech are measured)."""
    batches = inputs.media.batches
    if len(batches) != 1:
        raise ValueError(f"expected the inputs in one batch, got {len(batches)}")
    return {"natural": InputBatch(batches[0].inputs, batches[0].mask_BxL)}
