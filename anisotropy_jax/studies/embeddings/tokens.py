"""The study's data: a byte-level BPE vocabulary trained on the training split of the corpus with
the `tokenizers` library, and the token-id streams it makes.

  split      the text (`corpus.shakespeare_text`, optionally its first `corpus_chars`
             characters) is cut into chunks of `chunk_len` characters; `data.split_corpus` sends a
             seeded share `val_fraction` of them to validation. The tokenizer never sees those.
  tokenizer  GPT-2-style byte-level BPE: the 256 byte symbols (`ByteLevel.alphabet()`) plus
             merges learned on the training chunks until the vocabulary has `vocab_size`
             entries; no special tokens. Training is deterministic (same text → the same
             tokenizer.json, tested). The ByteLevel pre-tokenizer splits on GPT-2's regex, so a
             token never crosses a word boundary.
  streams    every chunk is encoded on its own and the chunks of each side are concatenated:
             training windows are drawn from the training stream, validation windows from the
             validation stream (`data.make_batch`, next-token targets).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from anisotropy_jax import corpus, data as data_lib
from anisotropy_jax.config import ConfigError, DataConfig
from anisotropy_jax.configs.embeddings import EmbeddingsConfig

INSTALL_HINT = "pip install tokenizers==0.23.3 (setup.py extras 'pretrained' or 'test')"


@dataclasses.dataclass(frozen=True)
class TokenData:
    """Token streams (int32) of both sides, the tokenizer as tokenizer.json text, and counts."""

    train_ids: np.ndarray
    val_ids: np.ndarray
    tokenizer_json: str
    train_chars: int
    val_chars: int


def _tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise ConfigError(f"vocab_size: the BPE vocabulary needs the `tokenizers` package: "
                          f"{INSTALL_HINT}") from None
    return tokenizers


def corpus_chunks(config: EmbeddingsConfig, text: str | None = None
                  ) -> tuple[list[str], list[str]]:
    """(training chunks, validation chunks) of the corpus text, in text order."""
    text = corpus.shakespeare_text() if text is None else text
    if config.corpus_chars:
        text = text[:config.corpus_chars]
    try:
        split = data_lib.split_corpus(len(text), config.chunk_len, config.val_fraction,
                                      config.data_seed)
    except ValueError as error:
        raise ConfigError(f"corpus_chars: {error}") from None

    def cut(starts):
        return [text[s:s + config.chunk_len] for s in starts]
    return cut(split.train_starts), cut(split.val_starts)


def train_tokenizer(chunks: list[str], vocab_size: int):
    """A byte-level BPE `tokenizers.Tokenizer` with exactly `vocab_size` entries, trained on
    `chunks`; ConfigError when the text holds too few distinct pairs to reach that size."""
    tk = _tokenizers()
    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=vocab_size, show_progress=False, special_tokens=[],
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(chunks, trainer)
    size = tokenizer.get_vocab_size()
    if size != vocab_size:
        raise ConfigError(f"vocab_size: the training text yields only {size} BPE entries, not "
                          f"{vocab_size}; use a smaller vocab_size or more text (corpus_chars)")
    return tokenizer


def encode(tokenizer, chunks: list[str]) -> np.ndarray:
    """The chunks encoded one by one and concatenated, int32."""
    encodings = tokenizer.encode_batch(chunks)
    return np.concatenate([np.asarray(e.ids, np.int32) for e in encodings])


def prepare(config: EmbeddingsConfig, text: str | None = None) -> TokenData:
    """Split, train the tokenizer on the training chunks, encode both sides."""
    train_chunks, val_chunks = corpus_chunks(config, text)
    tokenizer = train_tokenizer(train_chunks, config.vocab_size)
    out = TokenData(train_ids=encode(tokenizer, train_chunks),
                    val_ids=encode(tokenizer, val_chunks), tokenizer_json=tokenizer.to_str(),
                    train_chars=sum(map(len, train_chunks)),
                    val_chars=sum(map(len, val_chunks)))
    for side, ids in (("training", out.train_ids), ("validation", out.val_ids)):
        if len(ids) < config.seq_len + 1:
            raise ConfigError(f"seq_len: the {side} stream has {len(ids)} tokens, fewer than "
                              f"seq_len + 1 = {config.seq_len + 1}; use more text")
    return out


def window_config(config: EmbeddingsConfig, ids: np.ndarray) -> DataConfig:
    """The training study's DataConfig for next-token windows drawn anywhere in `ids`."""
    return DataConfig(objective="clm", seq_len=config.seq_len, batch_size=config.batch_size,
                      chunk_len=len(ids), seed=config.data_seed)


def batch(config: EmbeddingsConfig, ids: np.ndarray, rng: np.random.Generator
          ) -> dict[str, np.ndarray]:
    """{"inputs", "targets", "weights"} (batch_size, seq_len): windows of seq_len + 1 tokens
    drawn uniformly from the stream `ids`, targets shifted by one."""
    return data_lib.make_batch(window_config(config, ids), ids, np.zeros(1, np.int64), len(ids),
                               config.batch_size, rng)


def validation_batches(config: EmbeddingsConfig, val_ids: np.ndarray) -> list[dict]:
    """`eval_batches` fixed validation batches (the same for every model and checkpoint)."""
    return [batch(config, val_ids, np.random.default_rng([config.data_seed, 0x0A11, i]))
            for i in range(config.eval_batches)]


def token_counts(ids: np.ndarray, vocab_size: int) -> np.ndarray:
    """(vocab_size,) occurrences of each id in `ids`."""
    return np.bincount(ids, minlength=vocab_size)
