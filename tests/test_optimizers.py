"""The training optimisers (`optim.optimizer`) against slow float64 loops written out here: one
Muon step (the quintic Newton–Schulz iteration with optax's coefficients, Nesterov momentum, the
width factor) beside AdamW on the non-hidden parameters; AdamW in a fixed rotated basis equal to
plain AdamW on the rotated parameters; heavy-ball SGD with decoupled weight decay. Each trains the
tiny model through `training.train` with finite losses and a checkpoint that restores; bad values
are one-line ConfigErrors. The default ('adamw') is checked elsewhere to be today's, bit for bit
(tests/test_train_reference.py, tests/test_train.py)."""
import dataclasses
import json
import math
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from anisotropy_jax import checkpointing, configs
from anisotropy_jax.config import ConfigError, OptimConfig, train_config_from_mapping
from anisotropy_jax.studies import training
from anisotropy_jax.studies.training import optimizers

COMMAND = str(pathlib.Path(sys.executable).parent / "anisotropy-jax")
STEPS = 10  # the schedule's length; the loops below take 2 or 3 of them
NS_COEFFS = (3.4445, -4.7750, 2.0315)  # optax's (and Keller Jordan's) quintic


def _tree(rng):
    """A tiny parameter tree with every kind of leaf: 3-D query and output kernels (the matrices
    (4, 6) and (6, 4)), a 2-D kernel, norm gain, biases, an embedding and an untied head."""
    shapes = {"block_0": {"attention": {"query": {"kernel": (4, 2, 3), "bias": (6,)},
                                        "out": {"kernel": (2, 3, 4), "bias": (4,)}},
                          "mlp": {"fc_in": {"kernel": (4, 5), "bias": (5,)}},
                          "attention_norm": {"scale": (4,)}},
              "token_embedding": {"embedding": (7, 4)}, "output": {"kernel": (4, 7)}}
    return {"params": jax.tree.map(lambda s: rng.normal(size=s).astype(np.float32), shapes,
                                   is_leaf=lambda s: isinstance(s, tuple))}


def _leaves(tree):
    return [(jax.tree_util.keystr(p), np.asarray(x, np.float64))
            for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]]


def _cosine(peak, t, ratio):
    """The schedule with warmup_steps = 0 at update t (0-based) of STEPS."""
    return peak * (ratio + (1 - ratio) * 0.5 * (1 + math.cos(math.pi * min(t, STEPS) / STEPS)))


def _run(tx, params, grads_per_step):
    state = tx.init(params)
    for grads in grads_per_step:
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    return params, state


def _adamw_reference(w, grads, optim, t, moments):
    """One float64 AdamW update of leaf w (t counts from 1); moments updated in place."""
    m, v = moments
    m[:] = optim.b1 * m + (1 - optim.b1) * grads
    v[:] = optim.b2 * v + (1 - optim.b2) * grads ** 2
    step = (m / (1 - optim.b1 ** t)) / (np.sqrt(v / (1 - optim.b2 ** t)) + optim.eps)
    decay = optim.weight_decay * w if w.ndim >= 2 else 0.0
    return w - _cosine(optim.learning_rate, t - 1, optim.end_lr_ratio) * (step + decay)


def _newton_schulz(x):
    """The quintic iteration on a float64 matrix, written as loops over its 5 steps."""
    transposed = x.shape[0] > x.shape[1]
    x = x.T if transposed else x
    x = x / (np.linalg.norm(x) + 1e-8)
    a, b, c = NS_COEFFS
    for _ in range(5):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if transposed else x


def _muon_matrix(name, shape):
    """(m, n) of a hidden kernel as its matrix: output kernels map all axes but the last."""
    if "'out'" in name:
        return math.prod(shape[:-1]), shape[-1]
    return shape[0], math.prod(shape[1:])


def test_muon_steps_match_a_float64_newton_schulz_loop():
    rng = np.random.default_rng(0)
    optim = OptimConfig(optimizer="muon", warmup_steps=0, grad_clip=0, weight_decay=0.1,
                        learning_rate=3e-3, muon_learning_rate=0.05, muon_momentum=0.9)
    params = _tree(rng)
    grads = [_tree(rng) for _ in range(2)]
    got, _ = _run(optimizers.optimizer(optim, STEPS), params, grads)
    beta = optim.muon_momentum
    hidden = {"['params']['block_0']['attention']['query']['kernel']",
              "['params']['block_0']['attention']['out']['kernel']",
              "['params']['block_0']['mlp']['fc_in']['kernel']"}
    for (name, w), (_, want_leaf) in zip(_leaves(params), _leaves(got)):
        g_steps = [dict(_leaves(g))[name] for g in grads]
        mu, moments = np.zeros_like(w), (np.zeros_like(w), np.zeros_like(w))
        for t, g in enumerate(g_steps, 1):
            if name not in hidden:
                w = _adamw_reference(w, g, optim, t, moments)
                continue
            mu = beta * mu + (1 - beta) * g
            # Nesterov on the bias-corrected momentum and gradient (optax's form)
            nesterov = beta * mu / (1 - beta ** (t + 1)) + (1 - beta) * g / (1 - beta ** t)
            m, n = _muon_matrix(name, w.shape)
            ortho = _newton_schulz(nesterov.reshape(m, n)).reshape(w.shape)
            update = ortho * math.sqrt(max(1.0, n / m)) + optim.weight_decay * w
            w = w - _cosine(optim.muon_learning_rate, t - 1, optim.end_lr_ratio) * update
        np.testing.assert_allclose(want_leaf, w, rtol=2e-5, atol=2e-6, err_msg=name)
    # the hidden kernels moved by Muon's step size, not AdamW's: a sign that the split is right
    delta = np.abs(dict(_leaves(got))[sorted(hidden)[0]] - dict(_leaves(params))[sorted(hidden)[0]])
    assert delta.max() > 5 * optim.learning_rate


def _rotate_np(w, u, v, name, into):
    m, n = _muon_matrix(name, w.shape)
    x = w.reshape(m, n)
    return (u.T @ x @ v if into else u @ x @ v.T).reshape(w.shape)


def test_rotated_adamw_equals_adamw_on_the_rotated_parameters():
    """Three AdamW steps in the fixed random bases (U, V) equal, after rotating back, three plain
    AdamW steps on W' = Uᵀ W V with the gradients G' = Uᵀ ∇f(U W' Vᵀ) V of the same loss."""
    rng = np.random.default_rng(1)
    kwargs = dict(warmup_steps=0, grad_clip=0, weight_decay=0.1, learning_rate=1e-2)
    rotated_tx = optimizers.optimizer(OptimConfig(optimizer="adamw_rotated", rotation_seed=3,
                                                  **kwargs), STEPS)
    plain_tx = optimizers.optimizer(OptimConfig(optimizer="adamw", **kwargs), STEPS)
    params, weights = _tree(rng), _tree(rng)
    loss = lambda p: sum(jnp.sum(jnp.sin(x) * c)  # noqa: E731
                         for x, c in zip(jax.tree.leaves(p), jax.tree.leaves(weights)))
    state = rotated_tx.init(params)
    bases = state[0].bases  # chain(in_rotated_basis(adam), decay, learning rate)
    names = [name for name, _ in _leaves(params)]

    def basis(name):
        node = bases
        for key in name[2:-2].split("']['"):
            node = node[key]
        return np.asarray(node["left"], np.float64), np.asarray(node["right"], np.float64)

    def to_rotated(tree, into):
        out = [_rotate_np(x, *basis(n), n, into) if x.ndim >= 2 else x
               for n, (_, x) in zip(names, _leaves(tree))]
        return jax.tree.unflatten(jax.tree.structure(params), [x.astype(np.float32) for x in out])

    rotated_params, plain_state = to_rotated(params, True), plain_tx.init(params)
    for _ in range(3):
        updates, state = rotated_tx.update(jax.grad(loss)(params), state, params)
        params = optax.apply_updates(params, updates)
        grads = to_rotated(jax.grad(loss)(to_rotated(rotated_params, False)), True)
        updates, plain_state = plain_tx.update(grads, plain_state, rotated_params)
        rotated_params = optax.apply_updates(rotated_params, updates)
    for (name, got), (_, want) in zip(_leaves(params), _leaves(to_rotated(rotated_params, False))):
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-5, err_msg=name)
    for name in names:
        u, v = basis(name) if "bias" not in name and "scale" not in name else (None, None)
        if u is not None:  # orthogonal, and not the identity
            np.testing.assert_allclose(u.T @ u, np.eye(len(u)), atol=1e-5)
            np.testing.assert_allclose(v @ v.T, np.eye(len(v)), atol=1e-5)
            assert np.abs(u - np.eye(len(u))).max() > 0.1
    # the bases are a function of the seed alone (a resumed run regenerates or restores them)
    again = optimizers.random_bases(params, 3)
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(again),
                                                     jax.tree.leaves(bases)))
    other = optimizers.random_bases(params, 4)
    assert not np.array_equal(jax.tree.leaves(other)[0], jax.tree.leaves(bases)[0])


def test_sgd_momentum_steps_match_a_numpy_loop():
    rng = np.random.default_rng(2)
    optim = OptimConfig(optimizer="sgd", warmup_steps=0, grad_clip=0, weight_decay=0.1,
                        sgd_learning_rate=0.3, momentum=0.8)
    params = _tree(rng)
    grads = [_tree(rng) for _ in range(3)]
    got, _ = _run(optimizers.optimizer(optim, STEPS), params, grads)
    for (name, w), (_, want_leaf) in zip(_leaves(params), _leaves(got)):
        trace = np.zeros_like(w)
        for t, g in enumerate(dict(_leaves(step))[name] for step in grads):
            trace = optim.momentum * trace + g  # heavy ball
            decay = optim.weight_decay * w if w.ndim >= 2 else 0.0
            w = w - _cosine(optim.sgd_learning_rate, t, optim.end_lr_ratio) * (trace + decay)
        np.testing.assert_allclose(want_leaf, w, rtol=1e-6, atol=1e-6, err_msg=name)


def test_gradient_clipping_comes_first_for_every_optimizer():
    """Clipping by global norm before the optimiser: a gradient scaled 1000× past the threshold
    gives the same update as the gradient itself clipped to it."""
    rng = np.random.default_rng(3)
    params, grads = _tree(rng), _tree(rng)
    norm = float(optax.tree.norm(grads))
    big = jax.tree.map(lambda g: g * 1000.0, grads)
    for name in ("muon", "sgd", "adamw_rotated"):
        clipped = optimizers.optimizer(OptimConfig(optimizer=name, grad_clip=norm), STEPS)
        unclipped = optimizers.optimizer(OptimConfig(optimizer=name, grad_clip=0), STEPS)
        a, _ = _run(clipped, params, [big])
        b, _ = _run(unclipped, params, [grads])
        for (key, x), (_, y) in zip(_leaves(a), _leaves(b)):
            np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6, err_msg=f"{name} {key}")


def _tiny_config(optimizer, **model):
    cfg = configs.module("train").get_config("clm+smoke")
    cfg.model.num_layers, cfg.model.d_model, cfg.model.d_ff, cfg.model.num_heads = 1, 16, 16, 2
    cfg.data.seq_len, cfg.steps, cfg.optim.warmup_steps, cfg.checkpoint_every = 8, 3, 1, 0
    cfg.optim.optimizer = optimizer
    for name, value in model.items():
        cfg.model[name] = value
    return train_config_from_mapping(cfg)[0]


@pytest.mark.parametrize("name", ["muon", "sgd", "adamw_rotated"])
def test_each_optimizer_trains_the_tiny_model_and_its_state_restores(name, tmp_path):
    config = _tiny_config(name)
    training.train(config, tmp_path)
    records = training.read_metrics(tmp_path)
    assert [r["step"] for r in records] == [0, 1, 2]
    assert all(np.isfinite(r["loss"]) and r["loss"] > 0 for r in records)
    assert records[0]["learning_rate"] == pytest.approx(
        optimizers.main_learning_rate(config.optim), rel=1e-6)  # warmup of 1 step
    abstract, model, tx = training.abstract_state(config)
    with checkpointing.manager(tmp_path / "checkpoints", read_only=True) as mngr:
        state, _ = checkpointing.restore(mngr, config.steps, abstract)
    fresh = training.init_state(model, tx, config.seed, config.data.seq_len)
    assert jax.tree.structure(state) == jax.tree.structure(fresh)
    if name == "adamw_rotated":  # the restored bases are those of the initialisation
        for a, b in zip(jax.tree.leaves(state["opt_state"][1][0].bases),
                        jax.tree.leaves(fresh["opt_state"][1][0].bases)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("field, value, message", [
    ("optimizer", "adam", "optim.optimizer: unknown optimizer 'adam'; choose one of ('adamw', "
                          "'muon', 'sgd', 'adamw_rotated')"),
    ("momentum", 1.0, "optim.momentum: must be < 1"),
    ("muon_momentum", -0.5, "optim.muon_momentum: must be a finite number >= 0, got -0.5"),
    ("sgd_learning_rate", 0.0, "optim.sgd_learning_rate: must be finite and > 0, got 0.0"),
    ("muon_learning_rate", float("inf"),
     "optim.muon_learning_rate: must be finite and > 0, got inf"),
    ("rotation_seed", -1, "optim.rotation_seed: must be an integer >= 0, got -1")])
def test_bad_optimizer_settings_are_one_line_config_errors(field, value, message):
    with pytest.raises(ConfigError) as error:
        OptimConfig(**{field: value})
    assert str(error.value) == message


def test_the_command_line_refuses_an_unknown_optimizer_before_compiling(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run([COMMAND, "train", "--config=train:smoke", f"--workdir={tmp_path}/run",
                           "--config.optim.optimizer=adam"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "error: optim.optimizer: unknown optimizer 'adam'; choose one of ('adamw', 'muon', "
        "'sgd', 'adamw_rotated')"), proc.stderr[-2000:]
    assert not (tmp_path / "run").exists()


NEW_FIELDS = ("norm_gain", "optimizer", "momentum", "sgd_learning_rate", "muon_learning_rate",
              "muon_momentum", "rotation_seed")


def _without_new_fields(value):
    """A recorded config as it was written before the two switches existed."""
    if isinstance(value, dict):
        return {k: _without_new_fields(v) for k, v in value.items() if k not in NEW_FIELDS}
    if isinstance(value, list):
        return [_without_new_fields(v) for v in value]
    return value


def test_records_made_before_the_switches_existed_are_still_this_config(tmp_path):
    """A report's stamps (sweep, depth, training, embeddings), a depth chunk store and an
    analysed seed recorded before model.norm_gain and the optimiser fields existed are read as
    the same config (the missing fields at their defaults); one with another value is not."""
    from anisotropy_jax import results
    from anisotropy_jax.config import AnalysisConfig
    from anisotropy_jax.configs.depth import DepthConfig
    from anisotropy_jax.studies.depth.report import ChunkStore
    from anisotropy_jax.studies.report import runner
    from anisotropy_jax.studies.train import analysed
    report = configs.module("report")
    config = report.reproduce_config_from_mapping(report.get_config("smoke"))
    run = runner.StudyRun("x", {"x": 1})
    for name in ("sweep", "depth", "training", "embeddings"):
        stamp = runner._stamp(config, name)
        old = _without_new_fields(stamp)
        assert old != stamp, name
        (tmp_path / name).mkdir()
        (tmp_path / name / runner.STUDY_RUN_FILE).write_text(
            json.dumps({"config": old, "run": dataclasses.asdict(run)}))
        assert runner._finished(name, tmp_path / name, stamp) == run, name
    depth = DepthConfig()
    ChunkStore(tmp_path / "depth_chunks", depth)
    path = tmp_path / "depth_chunks" / "chunks" / "config.json"
    path.write_text(json.dumps(_without_new_fields(json.loads(path.read_text()))))
    ChunkStore(tmp_path / "depth_chunks", depth)  # not refused
    train = _tiny_config("adamw")
    recorded = {"config": {"train": _without_new_fields(results.to_jsonable(train)),
                           "analysis": {"batch_size": 16, "seed": 0}}}
    (tmp_path / "seed").mkdir()
    (tmp_path / "seed" / "results.json").write_text(json.dumps(recorded))
    assert analysed(tmp_path / "seed", train, AnalysisConfig()) == recorded
    muon = _tiny_config("muon")
    assert analysed(tmp_path / "seed", muon, AnalysisConfig()) is None
