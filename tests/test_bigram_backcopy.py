"""The Bigram-Backcopy data source (anisotropy_jax/bigram_backcopy.py) against float64 loops over
its definition, its place in the training data path, and the training model's normalisation."""
import dataclasses
import json
import math

import numpy as np
import pytest

from anisotropy_jax import bigram_backcopy as bb, data
from anisotropy_jax.config import ConfigError, DataConfig, train_config_from_mapping
from anisotropy_jax.models import attention

CONFIG = DataConfig(source="bigram_backcopy", seq_len=32, batch_size=8, task_vocab=12,
                    task_triggers=2, task_concentration=0.5, seed=3)


def _reference_floor(task, x):
    """Entropy of the true next-token distribution, one loop per token, float64."""
    out = np.zeros(x.shape)
    first = [i for i in range(1, task.vocab + 1) if i not in set(task.triggers.tolist())]
    for b in range(x.shape[0]):
        for t in range(x.shape[1]):
            token = int(x[b, t])
            if t == 0:
                out[b, t] = math.log(len(first))
            elif token in set(task.triggers.tolist()):
                out[b, t] = 0.0
            else:
                out[b, t] = -sum(p * math.log(p) for p in task.transition[token] if p > 0)
    return out


def _true_log_prob(task, seq, t):
    """log P(x_{t+1} | x_0 … x_t) under the rules, looped."""
    triggers = set(task.triggers.tolist())
    nxt = int(seq[t + 1])
    if t == 0:
        return math.log(1.0 / (task.vocab - len(triggers))) if nxt not in triggers else -math.inf
    if int(seq[t]) in triggers:
        return 0.0 if nxt == int(seq[t - 1]) else -math.inf
    p = task.transition[int(seq[t]), nxt]
    return math.log(p) if p > 0 else -math.inf


def test_sequences_obey_the_rules_and_follow_the_transition_matrix():
    task = bb.make_task(CONFIG)
    assert np.allclose(task.transition[1:].sum(axis=1), 1.0) and task.transition[:, 0].sum() == 0
    assert len(task.triggers) == 2 and set(task.triggers) <= set(range(1, 13))
    x = bb.sample_sequences(task, 400, 64, np.random.default_rng(0))
    triggers = set(task.triggers.tolist())
    counts = np.zeros_like(task.transition)
    for seq in x:
        assert seq[0] == bb.BOS_ID and seq[1] not in triggers and bb.BOS_ID not in seq[1:]
        for t in range(1, len(seq) - 1):
            assert math.isfinite(_true_log_prob(task, seq, t))
            if int(seq[t]) in triggers:
                assert seq[t + 1] == seq[t - 1]
            else:
                counts[seq[t], seq[t + 1]] += 1
    # The empirical bigram rows of the non-trigger transitions match P (many draws per row).
    rows = counts.sum(axis=1) > 2000
    assert rows.sum() >= 5
    empirical = counts[rows] / counts[rows].sum(axis=1, keepdims=True)
    assert np.max(np.abs(empirical - task.transition[rows])) < 0.05


def test_loss_floor_matches_a_loop_and_the_mean_true_log_loss():
    stream = data.BatchIterator(CONFIG)
    batch = stream.validation_batch(64)
    floor = bb.loss_floor(stream.task, batch["inputs"])
    np.testing.assert_allclose(floor, _reference_floor(stream.task, batch["inputs"]), rtol=1e-12)
    assert stream.loss_floor(batch) == pytest.approx(float(floor.mean()), rel=1e-12)
    # The floor is the expected true log loss: its mean over many draws approaches the sampled
    # −log P(target | past) (law of large numbers; 512 × 32 targets).
    big = bb.sample_sequences(stream.task, 512, 33, np.random.default_rng(1))
    nll = -np.mean([[_true_log_prob(stream.task, s, t) for t in range(32)] for s in big])
    assert bb.loss_floor(stream.task, big[:, :-1]).mean() == pytest.approx(nll, abs=0.03)
    # After a trigger the floor is 0; the mean floor lies below the uniform loss ln V.
    assert np.all(floor[np.isin(batch["inputs"], stream.task.triggers)] == 0)
    assert 0 < stream.loss_floor(batch) < math.log(12)


def test_the_stream_is_a_pure_function_of_seed_and_step_and_the_task_of_task_seed():
    a, b = data.BatchIterator(CONFIG), data.BatchIterator(CONFIG)
    for key in ("inputs", "targets", "weights"):
        np.testing.assert_array_equal(a.batch_at(5)[key], b.batch_at(5)[key])
    np.testing.assert_array_equal(a.batch_at(5)["inputs"][:, 1:], a.batch_at(5)["targets"][:, :-1])
    assert not np.array_equal(a.batch_at(5)["inputs"], a.batch_at(6)["inputs"])
    other = data.BatchIterator(dataclasses.replace(CONFIG, seed=4))
    assert not np.array_equal(a.batch_at(5)["inputs"], other.batch_at(5)["inputs"])
    np.testing.assert_array_equal(a.task.transition, other.task.transition)
    moved = data.BatchIterator(dataclasses.replace(CONFIG, task_seed=1))
    assert not np.array_equal(a.task.transition, moved.task.transition)
    np.testing.assert_array_equal(a.used_token_ids(), np.arange(13))
    a.position = 7
    b.restore(a.state())
    assert b.position == 7 and data.BatchIterator(DataConfig()).loss_floor(a.batch_at(0)) is None


def test_config_refuses_mlm_and_bad_task_fields():
    with pytest.raises(ConfigError, match="data.source"):
        train_config_from_mapping({"objective": "mlm", "data": {"source": "bigram_backcopy"}})
    with pytest.raises(ConfigError, match="data.task_triggers"):
        DataConfig(source="bigram_backcopy", task_vocab=4, task_triggers=4)
    with pytest.raises(ConfigError, match="data.task_vocab"):
        DataConfig(task_vocab=256)


@pytest.mark.parametrize("name", sorted(attention.NORMALIZATIONS))
def test_the_training_block_takes_the_normalisation_and_refuses_fused_cores_for_others(name):
    train, _ = train_config_from_mapping({"model": {"attention_normalization": name}})
    block = train.transformer_config().block
    assert block.attention_normalization == name and block.attention_impl == "xla"
    if name != "softmax":
        with pytest.raises(ConfigError, match="model.attention_impl"):
            train_config_from_mapping({"model": {"attention_normalization": name,
                                                 "attention_impl": "dot_product"}})
    with pytest.raises(ConfigError, match="model.attention_normalization"):
        train_config_from_mapping({"model": {"attention_normalization": name + "_unknown"}})


def test_every_block_field_of_the_model_spec_reaches_the_block():
    model = {"attention_normalization": "clipped_softmax", "clip_zeta": 1.1, "clip_gamma": -0.05,
             "attention_output_gate": True, "d_model": 32, "num_heads": 2}
    train, _ = train_config_from_mapping({"model": model})
    block = train.transformer_config().block
    for name, value in model.items():
        assert getattr(block, name) == value, name
    shared = {f.name for f in dataclasses.fields(type(train.model))} & {
        f.name for f in dataclasses.fields(type(block))}
    assert {"attention_normalization", "clip_zeta", "clip_gamma", "attention_output_gate",
            "precision", "init"} <= shared


def test_a_run_saved_before_a_field_existed_resumes_with_its_default(tmp_path):
    from anisotropy_jax.studies.training import logs

    train, _ = train_config_from_mapping({"data": {"source": "bigram_backcopy"}})
    logs.write_config(tmp_path, train, None)
    path = tmp_path / logs.CONFIG_FILE
    saved = json.loads(path.read_text())
    del saved["train"]["model"]["attention_output_gate"]  # as written before the field existed
    path.write_text(json.dumps(saved))
    logs.check_same_config(tmp_path, train)
    gated = dataclasses.replace(train, model=dataclasses.replace(train.model,
                                                                 attention_output_gate=True))
    with pytest.raises(ConfigError, match="model.attention_output_gate"):
        logs.check_same_config(tmp_path, gated)


def test_shakespeare_transition_equals_counted_byte_bigrams():
    """The 'shakespeare' matrix against a dict-and-loop count of the same text's bigrams."""
    text = b"the cat sat on the mat; the rat ate the hat.\nthat is that." * 3
    vocab = 8
    frequency = {}
    for byte in text:
        frequency[byte] = frequency.get(byte, 0) + 1
    kept = sorted(frequency, key=lambda b: (-frequency[b], b))[:vocab]
    expected = np.zeros((vocab, vocab))
    for a, b in zip(text[:-1], text[1:]):
        if a in kept and b in kept:
            expected[kept.index(a), kept.index(b)] += 1
    for row in expected:
        row[:] = row / row.sum() if row.sum() else 1.0 / vocab
    np.testing.assert_allclose(bb.byte_bigram_transition(text, vocab), expected, rtol=0,
                               atol=1e-15)
    with pytest.raises(ValueError, match="distinct bytes"):
        bb.byte_bigram_transition(b"abab", 3)


def test_most_frequent_triggers_are_the_stationary_modes():
    """Guo et al.'s trigger choice: the tokens a long chain visits most (stationary π by power
    iteration, float64), on a Dirichlet task and on Shakespeare's bigrams."""
    config = dataclasses.replace(CONFIG, task_trigger_choice="most_frequent", task_triggers=3)
    task = bb.make_task(config)
    p = task.transition[1:, 1:]
    pi = np.full(len(p), 1.0 / len(p))
    for _ in range(5000):
        pi = pi @ p
    assert set(task.triggers.tolist()) == set((np.argsort(-pi)[:3] + 1).tolist())
    # The Dirichlet rows do not depend on the trigger choice.
    random = dataclasses.replace(config, task_trigger_choice="random")
    np.testing.assert_array_equal(task.transition, bb.make_task(random).transition)
    guo = dataclasses.replace(CONFIG, task_transition="shakespeare", task_vocab=32, task_triggers=3,
                              task_trigger_choice="most_frequent")
    text = data.load_corpus("shakespeare").tobytes()
    task = bb.make_task(guo, text)
    counts = np.bincount(np.frombuffer(text, np.uint8), minlength=256)
    top = np.argsort(-counts, kind="stable")[:3]
    # Shakespeare's three most frequent bytes (space, 'e', 't') are ids 1-3 and the triggers.
    assert bytes(top.tolist()) == b" et" and task.triggers.tolist() == [1, 2, 3]
    assert np.allclose(task.transition[1:].sum(axis=1), 1.0)
    with pytest.raises(ValueError, match="needs the text"):
        bb.make_task(guo)
    # The training stream builds the same task from the installed Shakespeare.
    stream = data.BatchIterator(dataclasses.replace(guo, seed=1))
    np.testing.assert_array_equal(stream.task.transition, task.transition)
    assert stream.task.triggers.tolist() == [1, 2, 3]


def test_unknown_task_options_are_one_line_errors():
    with pytest.raises(ConfigError, match="data.task_transition"):
        dataclasses.replace(CONFIG, task_transition="zipf")
    with pytest.raises(ConfigError, match="data.task_trigger_choice"):
        dataclasses.replace(CONFIG, task_trigger_choice="rare")
