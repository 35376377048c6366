"""Orbax checkpoints: log-spaced steps, exact round trip into an abstract tree, unreadable
checkpoints reported by name with a fallback to the previous one."""
import pathlib
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from anisotropy_jax import checkpointing


def test_checkpoint_steps_are_log_spaced_plus_every_n_plus_last():
    assert checkpointing.checkpoint_steps(40, 0) == [0, 1, 2, 4, 8, 16, 32, 40]
    assert checkpointing.checkpoint_steps(40, 20) == [0, 1, 2, 4, 8, 16, 20, 32, 40]
    assert checkpointing.checkpoint_steps(64, 0) == [0, 1, 2, 4, 8, 16, 32, 64]
    assert checkpointing.checkpoint_steps(1, 5) == [0, 1]


_TX = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))


@jax.jit
def _make_state(seed):
    keys = jax.random.split(jax.random.key(seed), 3)
    params = {"w": jax.random.normal(keys[0], (3, 5)), "b": jax.random.normal(keys[1], (5,)),
              "nested": {"e": jax.random.normal(keys[2], (7, 2))}}
    opt_state = _TX.init(params)
    grads = jax.tree.map(jnp.ones_like, params)
    _, opt_state = _TX.update(grads, opt_state, params)  # non-trivial moments and count
    return {"step": jnp.asarray(seed, jnp.int32), "params": params, "opt_state": opt_state}


def _state(seed):
    """A train state with optax namedtuples (one compilation for every seed)."""
    return _make_state(jnp.asarray(seed, jnp.int32)), _TX


def _assert_trees_equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_round_trip_is_exact_and_keeps_every_step(tmp_path):
    states = {s: _state(s)[0] for s in (0, 1, 2, 4)}
    with checkpointing.manager(tmp_path / "ckpt") as mngr:
        for step, state in states.items():
            checkpointing.save(mngr, step, state, {"position": step})
    abstract = jax.eval_shape(_make_state, jnp.int32(0))
    with checkpointing.manager(tmp_path / "ckpt", read_only=True) as mngr:
        assert checkpointing.saved_steps(mngr) == [0, 1, 2, 4]  # nothing garbage-collected
        for step, state in states.items():
            restored, data_state = checkpointing.restore(mngr, step, abstract)
            _assert_trees_equal(restored, state)  # optax namedtuples included
            assert data_state == {"position": step}
    # The restored optimiser state works with the optimiser.
    _, tx = _state(0)
    params = restored["params"]
    jax.jit(tx.update)(jax.tree.map(jnp.ones_like, params), restored["opt_state"], params)


def test_wrong_shapes_are_refused(tmp_path):
    state = _state(0)[0]
    with checkpointing.manager(tmp_path / "ckpt") as mngr:
        checkpointing.save(mngr, 0, state, {"position": 0})
        abstract = jax.eval_shape(_make_state, jnp.int32(0))
        abstract["params"]["w"] = jax.ShapeDtypeStruct((4, 5), jnp.float32)
        with pytest.raises(Exception):
            checkpointing.restore(mngr, 0, abstract)


def _corrupt(step_dir: pathlib.Path) -> None:
    """Deletes the array data of a saved step (what a disk error or a partial copy leaves)."""
    for path in (step_dir / "state").iterdir():
        if path.is_dir():
            shutil.rmtree(path)


def test_corrupt_and_partial_checkpoints_are_reported_and_skipped(tmp_path):
    states = {s: _state(s)[0] for s in (0, 1, 2)}
    directory = tmp_path / "run" / "checkpoints"
    with checkpointing.manager(directory) as mngr:
        for step, state in states.items():
            checkpointing.save(mngr, step, state, {"position": step})
    _corrupt(directory / "2")
    (directory / "3").mkdir()  # a step folder with nothing in it (partial)
    abstract = jax.eval_shape(_make_state, jnp.int32(0))
    with checkpointing.manager(directory) as mngr:
        with pytest.warns(checkpointing.UnreadableCheckpointWarning) as record:
            step, state, data_state = checkpointing.restore_latest(mngr, abstract)
        messages = [str(w.message) for w in record]
        assert any(str(directory / "3") in m for m in messages), messages
        assert any(str(directory / "2") in m for m in messages), messages
        assert step == 1 and data_state == {"position": 1}
        _assert_trees_equal(state, states[1])
        # Moved aside, so that a resumed run can write steps 2 and 3 again.
        assert checkpointing.saved_steps(mngr) == [0, 1]
        assert (tmp_path / "run" / "checkpoints_unreadable" / "2").exists()
        checkpointing.save(mngr, 2, states[2], {"position": 2})
        assert checkpointing.saved_steps(mngr) == [0, 1, 2]


def test_iterate_readable_skips_unreadable_steps(tmp_path):
    directory = tmp_path / "checkpoints"
    with checkpointing.manager(directory) as mngr:
        for step in (0, 1, 2):
            checkpointing.save(mngr, step, _state(step)[0], {"position": step})
    _corrupt(directory / "1")
    abstract = jax.eval_shape(_make_state, jnp.int32(0))
    with checkpointing.manager(directory, read_only=True) as mngr:
        with pytest.warns(checkpointing.UnreadableCheckpointWarning, match="checkpoints/1"):
            steps = [s for s, _ in checkpointing.iterate_readable(mngr, abstract)]
    assert steps == [0, 2]
    assert (directory / "1").exists()  # the analysis never moves anything


def test_no_checkpoint_gives_none(tmp_path):
    abstract = jax.eval_shape(_make_state, jnp.int32(0))
    with checkpointing.manager(tmp_path / "empty") as mngr:
        assert checkpointing.restore_latest(mngr, abstract) is None
