"""The Bigram-Backcopy task (Guo et al. 2024, "Active-Dormant Attention Heads: Mechanistically
Demystifying Extreme-Token Phenomena in LLMs"): the synthetic next-token task on which 1–3-layer
Transformers grow attention sinks, massive residual states and small value states at the first
token. The training study's positive control (`data.source = 'bigram_backcopy'`).

The rule, as the paper states it: every sequence starts with a BOS token; after an ordinary
(non-trigger) token the next token follows a fixed bigram (Markov) transition matrix; after a
trigger token the next token copies the token that preceded the trigger. What is implemented here
(the paper's own transition matrix and vocabulary were not checked against its text; these are
this project's choices, all from `DataConfig`):

* tokens: BOS = id 0, ordinary tokens ids 1 … V (V = `task_vocab`, default 64), so the ids sit
  inside the model's byte vocabulary (256) and the model is unchanged;
* triggers: `task_triggers` (default 3) of the V tokens, drawn without replacement;
* the transition matrix P (V × V, over tokens 1 … V, BOS never follows): each row drawn from a
  symmetric Dirichlet(`task_concentration`, default 0.2); triggers can follow any token;
* `task_transition='shakespeare'` and `task_trigger_choice='most_frequent'` give instead the
  setting of Guo et al.'s code (after Bietti et al.'s "Birth of a Transformer"): P is the
  character bigram matrix of Shakespeare's text (here: the byte bigrams of the project's
  Shakespeare over its V most frequent bytes) and the triggers are the most frequent tokens
  (here: of largest stationary probability under P);
* the task (triggers and P) is drawn from `numpy.random.default_rng([task_seed, 0xB16B])`, fixed
  across the training seeds; the sequences from the data stream's own generator (`data.seed`,
  step), so batches are a pure function of (seed, step) as for text;
* a sequence x_0 … x_W: x_0 = BOS, x_1 uniform over the non-trigger tokens (so no copy reaches
  back to BOS), then for t ≥ 1: x_{t+1} = x_{t−1} if x_t is a trigger, else x_{t+1} ~ P[x_t].

The loss floor (`loss_floor`): the cross-entropy of the true conditional distribution, per
predicted token: ln(V − triggers) for the token after BOS, 0 after a trigger (a copy is certain),
and the entropy of row P[x_t] after an ordinary token x_t. Its mean over a batch's targets is the
lowest expected loss any model can reach on that batch.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from anisotropy_jax.config import DataConfig

BOS_ID = 0
TASK_STREAM = 0xB16B  # the task generator's second seed word (data streams use others)


@dataclasses.dataclass(frozen=True)
class Task:
    """One instance of the task.

    Attributes:
      transition: (V + 1, V + 1) float64; row i (i ≥ 1) is P[i] over ids 0 … V (column 0, BOS,
        is 0); row 0 is unused (zeros).
      triggers: sorted trigger ids (in 1 … V).
    """

    transition: np.ndarray
    triggers: np.ndarray

    @property
    def vocab(self) -> int:
        return self.transition.shape[0] - 1

    @property
    def is_trigger(self) -> np.ndarray:
        """(V + 1,) bool."""
        flags = np.zeros(self.vocab + 1, bool)
        flags[self.triggers] = True
        return flags

    @property
    def first_tokens(self) -> np.ndarray:
        """The ids x_1 is drawn from, uniformly: the non-trigger tokens."""
        return np.flatnonzero(~self.is_trigger[1:]) + 1

    def row_entropies(self) -> np.ndarray:
        """(V + 1,) the entropy (nats) of each row of the transition matrix (0 for row 0)."""
        p = self.transition
        with np.errstate(divide="ignore", invalid="ignore"):
            return -np.sum(np.where(p > 0, p * np.log(p), 0.0), axis=1)


def make_task(config: DataConfig, text: bytes | None = None) -> Task:
    """The task of `config` (task_vocab, task_triggers, task_concentration, task_seed,
    task_transition, task_trigger_choice). `text`: the bytes whose bigram counts make the
    'shakespeare' transition matrix (required for it, unused otherwise)."""
    rng = np.random.default_rng([config.task_seed, TASK_STREAM])
    v = config.task_vocab
    # The random triggers are drawn first, whatever is used, so that the Dirichlet rows of a
    # config are the same with either trigger choice.
    triggers = np.sort(rng.choice(np.arange(1, v + 1), size=config.task_triggers,
                                  replace=False))
    transition = np.zeros((v + 1, v + 1))
    if config.task_transition == "shakespeare":
        if text is None:
            raise ValueError("data.task_transition='shakespeare' needs the text's bytes")
        transition[1:, 1:] = byte_bigram_transition(text, v)
    else:
        transition[1:, 1:] = rng.dirichlet(np.full(v, float(config.task_concentration)), size=v)
    if config.task_trigger_choice == "most_frequent":
        order = np.argsort(-stationary_distribution(transition[1:, 1:]), kind="stable")
        triggers = np.sort(order[:config.task_triggers] + 1)
    return Task(transition=transition, triggers=triggers)


def byte_bigram_transition(text: bytes, vocab: int) -> np.ndarray:
    """(vocab, vocab) float64: the bigram transition matrix of `text`'s `vocab` most frequent
    bytes (row/column i: the i-th most frequent, ties by byte value), from the counts of
    consecutive pairs of those bytes; a row without any count is uniform."""
    data = np.frombuffer(text, np.uint8)
    counts = np.bincount(data, minlength=256)
    if np.count_nonzero(counts) < vocab:
        raise ValueError(f"data.task_vocab={vocab}: the text has only "
                         f"{np.count_nonzero(counts)} distinct bytes")
    kept = np.argsort(-counts, kind="stable")[:vocab]
    index = np.full(256, -1)
    index[kept] = np.arange(vocab)
    left, right = index[data[:-1]], index[data[1:]]
    both = (left >= 0) & (right >= 0)
    pairs = np.zeros((vocab, vocab))
    np.add.at(pairs, (left[both], right[both]), 1.0)
    totals = pairs.sum(axis=1, keepdims=True)
    return np.where(totals > 0, pairs / np.maximum(totals, 1.0), 1.0 / vocab)


def stationary_distribution(transition: np.ndarray) -> np.ndarray:
    """(n,) the stationary distribution π = πP of a row-stochastic (n, n) matrix: the left
    eigenvector of eigenvalue 1, normalised to sum to 1."""
    values, vectors = np.linalg.eig(transition.T)
    pi = np.real(vectors[:, np.argmin(np.abs(values - 1.0))])
    return pi / pi.sum()


def sample_sequences(task: Task, batch_size: int, width: int, rng: np.random.Generator
                     ) -> np.ndarray:
    """(batch_size, width) int32 sequences x_0 … x_{width−1} of the task (module docstring),
    vectorised over the batch: one uniform draw per sequence and position."""
    if width < 2:
        raise ValueError(f"a sequence holds BOS and at least one token; width={width}")
    cdf = np.cumsum(task.transition, axis=1)
    cdf[:, -1] = np.where(cdf[:, -1] > 0, 1.0, 0.0)  # rows sum to 1 up to rounding
    is_trigger = task.is_trigger
    first = task.first_tokens
    u = rng.random((batch_size, width))
    x = np.zeros((batch_size, width), np.int64)
    x[:, 0] = BOS_ID
    x[:, 1] = first[np.minimum((u[:, 1] * len(first)).astype(np.int64), len(first) - 1)]
    for t in range(1, width - 1):
        current = x[:, t]
        drawn = np.sum(u[:, t + 1, None] >= cdf[current], axis=1)  # inverse CDF over ids 0 … V
        drawn = np.minimum(drawn, task.vocab)
        x[:, t + 1] = np.where(is_trigger[current], x[:, t - 1], drawn)
    return x.astype(np.int32)


def loss_floor(task: Task, inputs_BxL: np.ndarray) -> np.ndarray:
    """(B, L) float64: the entropy of the true distribution of each target given the inputs
    x_0 … x_t (inputs[:, t] = x_t, target x_{t+1}): ln(#non-trigger tokens) at t = 0 (after BOS),
    0 after a trigger, H(P[x_t]) after an ordinary token."""
    x = np.asarray(inputs_BxL)
    floor = task.row_entropies()[x]
    floor = np.where(task.is_trigger[x], 0.0, floor)
    floor[:, 0] = np.where(x[:, 0] == BOS_ID, np.log(len(task.first_tokens)), floor[:, 0])
    return floor


def used_token_ids(task: Task) -> np.ndarray:
    """BOS and the V tokens: the embedding rows training moves."""
    return np.arange(task.vocab + 1, dtype=np.int32)
