"""Byte-level corpus, split, batch stream and BERT masking (anisotropy_jax.data)."""
import numpy as np
import pytest

from anisotropy_jax import data
from anisotropy_jax.config import ConfigError


def _corpus(n=20_000, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(32, 127, size=n).astype(np.uint8)


def test_shakespeare_corpus_is_plain_text():
    corpus = data.load_corpus("shakespeare")
    assert corpus.dtype == np.uint8 and 4_900_000 < corpus.size < 5_100_000
    text = corpus[:200_000].tobytes().decode("utf-8", errors="strict")
    assert "HAMLET:" in data.load_corpus("shakespeare").tobytes().decode("utf-8")
    assert "**" not in text and "#" not in text[:1000]


def test_local_file_corpus(tmp_path):
    path = tmp_path / "text.txt"
    path.write_bytes(b"hello world\n" * 10)
    np.testing.assert_array_equal(data.load_corpus(str(path)),
                                  np.frombuffer(b"hello world\n" * 10, np.uint8))
    with pytest.raises(FileNotFoundError, match="data.source"):
        data.load_corpus(str(tmp_path / "missing.txt"))


def test_split_is_seeded_disjoint_and_covers_the_chunks():
    a = data.split_corpus(100_000, 1000, 0.1, seed=3)
    b = data.split_corpus(100_000, 1000, 0.1, seed=3)
    c = data.split_corpus(100_000, 1000, 0.1, seed=4)
    np.testing.assert_array_equal(a.val_starts, b.val_starts)
    assert not np.array_equal(a.val_starts, c.val_starts)
    assert len(a.val_starts) == 10 and len(a.train_starts) == 90
    assert not set(a.val_starts) & set(a.train_starts)
    assert sorted(set(a.val_starts) | set(a.train_starts)) == list(range(0, 100_000, 1000))
    with pytest.raises(ValueError, match="data.chunk_len"):
        data.split_corpus(1500, 1000, 0.1, seed=0)


def test_windows_stay_inside_one_training_chunk():
    corpus = np.arange(50_000)  # each "byte" is its own position, so a window names its start
    cfg = data.DataConfig(objective="clm", seq_len=40, batch_size=64, chunk_len=500,
                          val_fraction=0.2, source="unused")
    stream = data.BatchIterator(cfg, corpus=corpus)
    train_chunks = set((stream.split.train_starts // 500).tolist())
    for step in range(5):
        batch = stream.batch_at(step)
        assert batch["inputs"].shape == (64, 40) and batch["inputs"].dtype == np.int32
        np.testing.assert_array_equal(batch["inputs"][:, 1:], batch["targets"][:, :-1])
        assert np.all(batch["weights"] == 1)
        start, end = batch["inputs"][:, 0], batch["targets"][:, -1]
        np.testing.assert_array_equal(end - start, 40)  # contiguous windows of L + 1
        assert np.all(start // 500 == end // 500)  # inside one chunk
        assert set((start // 500).tolist()) <= train_chunks
    val = stream.validation_batch(64)["inputs"][:, 0] // 500
    assert set(val.tolist()) <= set((stream.split.val_starts // 500).tolist())


def test_stream_is_a_function_of_seed_and_step_and_resumes():
    cfg = data.DataConfig(objective="mlm", seq_len=16, batch_size=4, chunk_len=256,
                          source="unused")
    corpus = _corpus()
    a = data.BatchIterator(cfg, corpus=corpus)
    first = [next(a) for _ in range(5)]
    state = a.state()
    later = [next(a) for _ in range(3)]
    b = data.BatchIterator(cfg, corpus=corpus)
    b.restore(state)
    assert b.position == 5
    for x, y in zip(later, [next(b) for _ in range(3)]):
        for key in x:
            np.testing.assert_array_equal(x[key], y[key])
    assert not np.array_equal(first[0]["inputs"], first[1]["inputs"])
    other = data.BatchIterator(data.DataConfig(**{**cfg.__dict__, "seed": 1}), corpus=corpus)
    with pytest.raises(ValueError, match="data.seed"):
        other.restore(state)
    # The validation batch is fixed and drawn from validation chunks only.
    v1, v2 = a.validation_batch(4), b.validation_batch(4)
    np.testing.assert_array_equal(v1["targets"], v2["targets"])


def _mask_reference(tokens, select_u, action_u, random_tokens, rate):
    """Position-by-position loop of BERT's rule (float64 draws)."""
    inputs = np.array(tokens, copy=True)
    weights = np.zeros(tokens.shape, np.float32)
    for i in range(tokens.shape[0]):
        for j in range(tokens.shape[1]):
            if select_u[i, j] < rate:
                weights[i, j] = 1.0
                if action_u[i, j] < 0.8:
                    inputs[i, j] = data.MASK_ID
                elif action_u[i, j] < 0.9:
                    inputs[i, j] = random_tokens[i, j]
    return inputs, weights


def test_mlm_masking_matches_a_loop_on_the_same_draws():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 256, size=(6, 50))
    select_u, action_u = rng.random(tokens.shape), rng.random(tokens.shape)
    random_tokens = rng.integers(0, 256, size=tokens.shape)
    got = data.mlm_mask_from_draws(tokens, select_u, action_u, random_tokens, 0.15)
    want = _mask_reference(tokens, select_u, action_u, random_tokens, 0.15)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_mlm_masking_statistics_are_15_80_10_10():
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 256, size=(400, 500))  # 200k positions
    inputs, weights = data.mlm_mask(tokens, rng, 0.15)
    n = tokens.size
    selected = weights.astype(bool)
    k = selected.sum()
    # 5-sigma binomial bands.
    assert abs(k / n - 0.15) < 5 * np.sqrt(0.15 * 0.85 / n)
    masked = selected & (inputs == data.MASK_ID)
    changed = selected & (inputs != data.MASK_ID) & (inputs != tokens)
    kept = selected & (inputs == tokens)
    # A "random" replacement equals the original byte with probability 1/256.
    p_masked, p_changed, p_kept = 0.8, 0.1 * 255 / 256, 0.1 + 0.1 / 256
    for count, p in ((masked.sum(), p_masked), (changed.sum(), p_changed), (kept.sum(), p_kept)):
        assert abs(count / k - p) < 5 * np.sqrt(p * (1 - p) / k), (count / k, p)
    assert np.all(inputs[~selected] == tokens[~selected])  # unselected positions untouched
    assert inputs.max() <= data.MASK_ID and weights.dtype == np.float32


def test_vocab_and_used_ids():
    assert data.vocab_size("clm") == 256 and data.vocab_size("mlm") == 257
    cfg = data.DataConfig(objective="mlm", seq_len=8, batch_size=2, chunk_len=64, source="x")
    stream = data.BatchIterator(cfg, corpus=np.frombuffer(b"abcabc" * 100, np.uint8))
    np.testing.assert_array_equal(stream.used_token_ids(), [97, 98, 99, data.MASK_ID])


@pytest.mark.parametrize("field, value", [("seq_len", 1), ("batch_size", 0),
                                          ("val_fraction", 1.0), ("chunk_len", 10),
                                          ("mask_rate", 0.0), ("objective", "seq2seq")])
def test_bad_data_config_names_the_field(field, value):
    with pytest.raises(ConfigError, match=f"data.{field}"):
        data.DataConfig(**{"seq_len": 16, field: value})
