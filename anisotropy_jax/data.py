"""Offline text → byte-level token batches for training from scratch (the training study's data).

* Corpus: Shakespeare (`corpus.shakespeare_text`: 38 plays, ~5 MB, speaker names kept), or any
  local text file by path.
* Tokens: the 256 byte values, plus the special tokens of the objective: `mlm` adds MASK = 256
  (vocabulary 257), `clm` needs none (vocabulary 256).
* Split: the corpus is cut into contiguous chunks of `chunk_len` bytes; a seeded permutation sends
  a fraction `val_fraction` of the chunks to validation. Windows are drawn inside one chunk, so no
  training window overlaps a validation chunk.
* Batches are a pure function of (seed, step): `batch_at(step)` draws from
  `numpy.random.default_rng([seed, step])`. The iterator's position is therefore one integer; it is
  saved with every checkpoint (`BatchIterator.state()`), and a resumed run continues the very same
  data stream.
* MLM masking (BERT): each position is selected with probability `mask_rate` (15%); a selected
  position becomes MASK with probability 80%, a uniformly random byte with 10%, and stays unchanged
  with 10%. The loss is taken on the selected positions only.
* Synthetic: `source = 'bigram_backcopy'` draws sequences of the Bigram-Backcopy task instead
  (`anisotropy_jax.bigram_backcopy`; no corpus and no split: training and validation batches are
  independent draws from separate generators), with the same (seed, step) contract.
"""
from __future__ import annotations

import dataclasses
import functools
import pathlib
from typing import Any

import numpy as np

from anisotropy_jax import bigram_backcopy, corpus
from anisotropy_jax.config import (MASK_ID, NUM_BYTES, OBJECTIVES, SHAKESPEARE, ConfigError,
                                   DataConfig, vocab_size)
from anisotropy_jax.config.training import BIGRAM_BACKCOPY

# The data-side constants and DataConfig live in anisotropy_jax.config; re-exported for callers
# that think of them as properties of the data.
__all__ = ["MASK_ID", "NUM_BYTES", "OBJECTIVES", "SHAKESPEARE", "DataConfig", "vocab_size",
           "load_corpus", "split_corpus", "BatchIterator"]


@functools.lru_cache(maxsize=4)
def _load_bytes_cached(source: str) -> bytes:
    if source == SHAKESPEARE:
        try:
            return corpus.shakespeare_text().encode("utf-8")
        except FileNotFoundError as error:
            raise FileNotFoundError(f"data.source: {error}, or give a text file") from None
    path = pathlib.Path(source).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"data.source: {source!r} is neither 'shakespeare' nor a file")
    text = path.read_bytes()
    if not text:
        raise ConfigError(f"data.source: {source} is empty; give a text file to train on")
    return text


def load_corpus(source: str = SHAKESPEARE) -> np.ndarray:
    """The corpus as a uint8 array of bytes: 'shakespeare' or the path of any local file."""
    return np.frombuffer(_load_bytes_cached(str(source)), dtype=np.uint8)


@dataclasses.dataclass(frozen=True)
class Split:
    """Chunk start offsets (in bytes) of the training and validation parts of a corpus."""

    train_starts: np.ndarray
    val_starts: np.ndarray
    chunk_len: int


def split_corpus(num_bytes: int, chunk_len: int, val_fraction: float, seed: int) -> Split:
    """Seeded chunk-level train/validation split; the last partial chunk is dropped.

    At least one chunk goes to each side; raises ConfigError (a ValueError) naming
    `data.chunk_len` when the corpus has < 2 chunks.
    """
    num_chunks = num_bytes // chunk_len
    if num_chunks < 2:
        raise ConfigError(f"data.chunk_len: the corpus ({num_bytes} bytes) holds fewer than 2 "
                         f"chunks of {chunk_len} bytes; use a larger corpus or a smaller chunk_len")
    num_val = min(max(1, int(round(val_fraction * num_chunks))), num_chunks - 1)
    order = np.random.default_rng([seed, 0x5917]).permutation(num_chunks)
    starts = np.arange(num_chunks, dtype=np.int64) * chunk_len
    return Split(train_starts=np.sort(starts[order[num_val:]]),
                 val_starts=np.sort(starts[order[:num_val]]), chunk_len=chunk_len)


def sample_windows(corpus: np.ndarray, starts: np.ndarray, chunk_len: int, width: int,
                   batch_size: int, rng: np.random.Generator) -> np.ndarray:
    """(batch_size, width) int32 windows, each inside one uniformly drawn chunk."""
    chunk_B = rng.integers(0, len(starts), size=batch_size)
    offset_B = rng.integers(0, chunk_len - width + 1, size=batch_size)
    begin_B = starts[chunk_B] + offset_B
    index_BxW = begin_B[:, None] + np.arange(width)[None, :]
    return corpus[index_BxW].astype(np.int32)


def mlm_mask_from_draws(tokens_BxL: np.ndarray, select_u: np.ndarray, action_u: np.ndarray,
                        random_tokens: np.ndarray, mask_rate: float
                        ) -> tuple[np.ndarray, np.ndarray]:
    """BERT masking given the uniform draws: (inputs, weights), weights 1 on selected positions.

    selected = select_u < mask_rate; of those, action_u < 0.8 → MASK, 0.8 ≤ action_u < 0.9 →
    random_tokens, else unchanged.
    """
    selected = select_u < mask_rate
    to_mask = selected & (action_u < 0.8)
    to_random = selected & (action_u >= 0.8) & (action_u < 0.9)
    inputs = np.where(to_mask, MASK_ID, np.where(to_random, random_tokens, tokens_BxL))
    return inputs.astype(np.int32), selected.astype(np.float32)


def mlm_mask(tokens_BxL: np.ndarray, rng: np.random.Generator, mask_rate: float = 0.15
             ) -> tuple[np.ndarray, np.ndarray]:
    """Draws the BERT 80/10/10 masking of `tokens_BxL`: (inputs, weights)."""
    shape = tokens_BxL.shape
    select_u = rng.random(shape)
    action_u = rng.random(shape)
    random_tokens = rng.integers(0, NUM_BYTES, size=shape)
    return mlm_mask_from_draws(tokens_BxL, select_u, action_u, random_tokens, mask_rate)


def make_batch(config: DataConfig, corpus: np.ndarray, starts: np.ndarray, chunk_len: int,
               batch_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One batch {"inputs", "targets", "weights"} of shape (batch_size, seq_len).

    clm: inputs = bytes[t], targets = bytes[t + 1], weights 1.
    mlm: inputs = masked bytes, targets = original bytes, weights 1 on the selected positions.
    """
    if config.objective == "clm":
        window_BxW = sample_windows(corpus, starts, chunk_len, config.seq_len + 1, batch_size, rng)
        return {"inputs": window_BxW[:, :-1], "targets": window_BxW[:, 1:],
                "weights": np.ones((batch_size, config.seq_len), np.float32)}
    tokens_BxL = sample_windows(corpus, starts, chunk_len, config.seq_len, batch_size, rng)
    inputs, weights = mlm_mask(tokens_BxL, rng, config.mask_rate)
    return {"inputs": inputs, "targets": tokens_BxL, "weights": weights}


class BatchIterator:
    """The seeded training stream. `batch_at(step)` is a pure function of (seed, step); the
    iterator's position is the next step, saved and restored with `state()` / `restore()`."""

    def __init__(self, config: DataConfig, corpus: np.ndarray | None = None):
        self.config = config
        self.position = 0
        self.task = None
        if config.source == BIGRAM_BACKCOPY:
            text = (_load_bytes_cached(SHAKESPEARE) if config.task_transition == SHAKESPEARE
                    else None)
            self.task = bigram_backcopy.make_task(config, text)
            self.corpus, self.split = np.zeros(0, np.uint8), None
            return
        self.corpus = load_corpus(config.source) if corpus is None else corpus
        self.split = split_corpus(len(self.corpus), config.chunk_len, config.val_fraction,
                                  config.seed)

    def _synthetic(self, batch_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        window = bigram_backcopy.sample_sequences(self.task, batch_size, self.config.seq_len + 1,
                                                  rng)
        return {"inputs": window[:, :-1], "targets": window[:, 1:],
                "weights": np.ones((batch_size, self.config.seq_len), np.float32)}

    def batch_at(self, step: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([self.config.seed, 0x7EA1, int(step)])
        if self.task is not None:
            return self._synthetic(self.config.batch_size, rng)
        return make_batch(self.config, self.corpus, self.split.train_starts,
                          self.split.chunk_len, self.config.batch_size, rng)

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        batch = self.batch_at(self.position)
        self.position += 1
        return batch

    def state(self) -> dict[str, Any]:
        """JSON-able position of the stream (saved with each checkpoint)."""
        return {"position": int(self.position), "seed": int(self.config.seed),
                "source": str(self.config.source), "num_bytes": int(len(self.corpus))}

    def restore(self, state: dict[str, Any]) -> None:
        """Continues the stream from a saved `state()`; refuses a different seed or corpus."""
        mine = self.state()
        for key in ("seed", "source", "num_bytes"):
            if key in state and state[key] != mine[key]:
                raise ValueError(f"data.{key}: the checkpoint's data stream has {key}="
                                 f"{state[key]!r}, this run has {mine[key]!r}")
        self.position = int(state["position"])

    def validation_batch(self, batch_size: int, seed: int = 0) -> dict[str, np.ndarray]:
        """A fixed batch from the validation chunks (the same for the same seeds)."""
        rng = np.random.default_rng([self.config.seed, 0x0A11, int(seed)])
        if self.task is not None:
            return self._synthetic(batch_size, rng)
        return make_batch(self.config, self.corpus, self.split.val_starts, self.split.chunk_len,
                          batch_size, rng)

    def used_token_ids(self) -> np.ndarray:
        """Sorted ids that occur in the corpus (plus MASK for mlm): the rows of the embedding
        matrix that training actually moves."""
        if self.task is not None:
            return bigram_backcopy.used_token_ids(self.task)
        ids = np.flatnonzero(np.bincount(self.corpus, minlength=NUM_BYTES) > 0)
        if self.config.objective == "mlm":
            ids = np.append(ids, MASK_ID)
        return ids.astype(np.int32)

    def loss_floor(self, batch: dict[str, np.ndarray]) -> float | None:
        """The mean over `batch`'s weighted targets of the lowest expected loss (nats per token)
        for a synthetic source (`bigram_backcopy.loss_floor`); None for text."""
        if self.task is None:
            return None
        floor = bigram_backcopy.loss_floor(self.task, batch["inputs"])
        weights = np.asarray(batch["weights"], np.float64)
        return float(np.sum(floor * weights) / max(np.sum(weights), 1.0))
