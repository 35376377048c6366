"""The bias-sweep machinery at small shapes: vmapped chunks against a float64 Python loop,
one compilation for new bias values, sharded = unsharded, chunked = unchunked, padding dropped,
extreme bias norms, and every bad input named.

Compile budget (XLA on CPU compiles the metric reduction in ~10 s): one metric-reducing chunk
function for the whole module (`COUNTED`, which is also the `chex.assert_max_traces(n=1)` proof),
and cheap bare-forward chunk functions for the grid bookkeeping (sharding, chunking, padding),
which does not depend on what is computed per point.
"""
import functools
import itertools
import math

import chex
import jax
import numpy as np
import pytest
from scipy import special

from anisotropy_jax import inputs
from anisotropy_jax.config import BlockConfig, ConfigError
from anisotropy_jax.configs.sweep import SweepConfig, sweep_configs_from_mapping
from anisotropy_jax.models import block as block_lib, layers
from anisotropy_jax.models.attention import StoredQKV
from anisotropy_jax.protocol import Progress
from anisotropy_jax.studies.sweep import affine, grid, points, report, theory
from tests import reference

BLOCK = BlockConfig(d_model=32, num_heads=4, d_ff=64)
CONFIG = SweepConfig(model=BLOCK, batch_size=3, seq_len=6, bias_norms=(0.0, 0.5, 3.0, 20.0),
                           num_seeds=2, seed=7, chunk_size=0)
MESH = grid.grid_mesh()  # both fake CPU devices (conftest)
# The only metric-reducing compilation of this module; every test below that reduces metrics
# goes through it with chunks of the same shape (2 seeds × 4 bias norms).
COUNTED = grid.jit_chunk(chex.assert_max_traces(grid.chunk_computation(BLOCK), n=1), MESH)


# --------------------------------------------------------------------------------------------
# Float64 reference: block forward and metrics with loops

def _ln(x, p, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * p["scale"] + p["bias"]


def _reference_point(p, z, u, s, cfg):
    """Probes of one grid point in float64, per head and per query with loops."""
    x = z + s * u[None, None, :]
    b, l, d = x.shape
    h, dh = cfg.num_heads, cfg.d_head
    pre = cfg.norm_position == "pre"
    a_in = _ln(x, p["attention_norm"], cfg.layer_norm_eps) if pre else x
    att = p["attention"]
    proj = {n: (a_in @ att[n]["kernel"] + att[n]["bias"]).reshape(b, l, h, dh)
            for n in ("query", "key", "value")}
    logits = np.zeros((b, h, l, l))
    mixed = np.zeros((b, l, h, dh))
    for bi, hi, qi in itertools.product(range(b), range(h), range(l)):
        row = np.array([proj["query"][bi, qi, hi] @ proj["key"][bi, ki, hi] for ki in range(l)])
        logits[bi, hi, qi] = row / math.sqrt(dh) / cfg.logit_temperature
        w = np.exp(logits[bi, hi, qi] - logits[bi, hi, qi].max())
        w /= w.sum()
        mixed[bi, qi, hi] = w @ proj["value"][bi, :, hi]
    attn_out = mixed.reshape(b, l, d) @ att["out"]["kernel"] + att["out"]["bias"]
    mid = x + attn_out
    if cfg.norm_position == "post":
        mid = _ln(mid, p["attention_norm"], cfg.layer_norm_eps)
    m_in = _ln(mid, p["mlp_norm"], cfg.layer_norm_eps) if pre else mid
    hid = m_in @ p["mlp"]["fc_in"]["kernel"] + p["mlp"]["fc_in"]["bias"]
    hid = 0.5 * hid * (1.0 + special.erf(hid / math.sqrt(2.0)))
    y = mid + hid @ p["mlp"]["fc_out"]["kernel"] + p["mlp"]["fc_out"]["bias"]
    if cfg.norm_position == "post":
        y = _ln(y, p["mlp_norm"], cfg.layer_norm_eps)
    return x, attn_out, y, logits, proj["query"], proj["key"]


def _reference_rounding_bound(logits, q, k, cfg):
    """`points.rounding_bound` in float64 from the float64 probes, query by query."""
    b, l, h, dh = q.shape
    eps = float(np.finfo(np.float32).eps)
    bounds = []
    for bi, hi, qi in itertools.product(range(b), range(h), range(l)):
        ent, mx, _ = reference.attention_stats(logits[bi, hi, qi][None])
        key_max = max(np.linalg.norm(k[bi, j, hi]) for j in range(l))
        delta = 2 * eps * np.linalg.norm(q[bi, qi, hi]) * key_max / (math.sqrt(dh)
                                                                       * cfg.logit_temperature)
        soft = max(1 - mx[0], 0.0) + max(ent[0] / math.log(l), 0.0)
        bounds.append(min(1.0, math.expm1(2 * min(delta, 40.0)) * soft))  # in range in float64
    return float(np.mean(bounds))


def _reference_metrics(p, z, u, s, cfg):
    x, a, y, logits, q, k = _reference_point(p, z, u, s, cfg)
    d, seq_len = x.shape[-1], x.shape[1]
    norms = lambda v: np.linalg.norm(v.reshape(-1, d), axis=1)  # noqa: E731
    ent, mx, first = zip(*(reference.attention_stats(logits[bi, hi])
                           for bi in range(logits.shape[0]) for hi in range(logits.shape[1])))
    ent, mx, first = np.array(ent), np.array(mx), np.array(first)  # (B·H, L)
    qk = reference.query_key_geometry(q, k)
    out = {
        "input_cosine": reference.average_cosine(x.reshape(-1, d)),
        "input_cross_sequence_cosine": reference.cross_and_within_cosine(x)[0],
        "input_within_sequence_cosine": reference.cross_and_within_cosine(x)[1],
        "input_norm": norms(x).mean(),
        "input_drift_norm": np.linalg.norm(x.reshape(-1, d).mean(0)),
        "attention_output_cosine": reference.average_cosine(a.reshape(-1, d)),
        "attention_output_cross_sequence_cosine": reference.cross_and_within_cosine(a)[0],
        "attention_output_norm": norms(a).mean(),
        "output_cosine": reference.average_cosine(y.reshape(-1, d)),
        "output_cross_sequence_cosine": reference.cross_and_within_cosine(y)[0],
        "output_within_sequence_cosine": reference.cross_and_within_cosine(y)[1],
        "output_norm": norms(y).mean(),
        "output_isoscore": reference.isoscore_algorithm(y.reshape(-1, d)),
        "output_drift_norm": np.linalg.norm(y.reshape(-1, d).mean(0)),
        "output_relative_drift": np.linalg.norm(y.reshape(-1, d).mean(0)) / norms(y).mean(),
        "attention_entropy": ent.mean(),
        "attention_entropy_normalized": ent.mean() / math.log(seq_len),
        "attention_max": mx.mean(),
        "attention_sink_mass": first.mean(),
        "mean_query_key_abs_cosine": np.abs(qk["mean_query_key_cosine"]).mean(),
        "attention_rounding_bound": _reference_rounding_bound(logits, q, k, cfg),
    }
    categorical = np.array([reference.categorical_attention(logits[bi, hi])
                            for bi in range(logits.shape[0]) for hi in range(logits.shape[1])])
    for name, column in zip(points.CATEGORICAL_METRICS, categorical.T):
        out[name] = column.mean()
    for name, per_head in qk.items():
        out[name] = per_head.mean()
    return out


def _randomised(params, seed):
    """Non-trivial parameters (biases ≠ 0, γ ≠ 1) so that init values cannot hide a bug."""
    leaves, tree = jax.tree_util.tree_flatten_with_path(params)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    new = [(1.0 if "scale" in jax.tree_util.keystr(path) else 0.0)
           + 0.3 * jax.random.normal(key, leaf.shape) for key, (path, leaf) in zip(keys, leaves)]
    return jax.tree.unflatten(tree, new)


# --------------------------------------------------------------------------------------------
# The per-chunk computation against the loop

def test_vmapped_chunk_equals_float64_python_loop_on_random_params():
    state = grid.init_seeds(CONFIG)
    params = _randomised(state.params, seed=11)
    norms = np.array([0.0, 0.7, 4.0, 13.0], np.float32)
    replicated = grid.NamedSharding(MESH, grid.P())
    got = COUNTED(*grid.place((params, state.z, state.u), replicated),
                  grid.place(norms, grid.NamedSharding(MESH, grid.P(grid.GRID_AXIS))))
    p64 = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
    for i, j in itertools.product(range(CONFIG.num_seeds), range(len(norms))):
        p_i = jax.tree.map(lambda a: a[i], p64)["params"]
        want = _reference_metrics(p_i, np.asarray(state.z[i], np.float64),
                                  np.asarray(state.u[i], np.float64), float(norms[j]), BLOCK)
        assert set(want) == set(points.SCALAR_METRICS)
        for name, value in want.items():
            np.testing.assert_allclose(got[name][i, j], value, rtol=5e-4, atol=5e-5,
                                       err_msg=f"{name} at seed {i}, s={norms[j]}")


@pytest.mark.parametrize("norm_position,kind", [
    ("post", "biased"), ("none", "biased"), ("pre", "biased"), ("post", "norm_matched"),
    ("none", "norm_matched"), ("post", "fixed_norm"), ("none", "fixed_norm"),
    ("post", "per_sequence"), ("pre", "per_sequence")])
def test_reused_projections_equal_the_literal_block(norm_position, kind):
    """z·W + s·(u·W) + b (biased), c·(z·W) + b (norm-matched), (z·W + s·(u·W))/c + b
    (fixed-norm) or z_b·W + s·(u_b·W) + b (per-sequence) per point, the default, against the
    block run literally on its inputs, on random parameters with biases, at bias norms up to
    1e4; pre-LN ignores the option."""
    block = BLOCK.replace(norm_position=norm_position)
    config = CONFIG.replace(model=block, inputs=kind)
    state = grid.init_seeds(config)
    params = _randomised(state.params, seed=5)
    norms = np.array([0.0, 0.7, 40.0, 1e4], np.float32)

    def outputs(reuse):
        def point(params, z, u, s, projected):
            assert (projected is not None) == (reuse and norm_position != "pre")
            y, probes = affine.block_at(block, params, z, u, s, projected, kind)
            return {"resid_post": y, "queries": probes["queries"], "keys": probes["keys"]}
        return jax.jit(grid.grid_computation(point, block, reuse))(params, state.z, state.u,
                                                                   norms)

    reused, literal = outputs(True), outputs(False)
    for name in literal:
        scale = np.max(np.abs(literal[name]), axis=(2, 3, 4), keepdims=True)
        np.testing.assert_allclose(reused[name] / scale, literal[name] / scale, atol=2e-5,
                                   err_msg=name)


def test_norm_matched_inputs_have_the_biased_norm_and_no_common_direction():
    state = grid.init_seeds(CONFIG)
    z, u = np.asarray(state.z[0], np.float64), np.asarray(state.u[0], np.float64)
    for s in (0.0, 3.0, 300.0):
        x = np.asarray(affine.sweep_inputs("norm_matched", state.z[0], state.u[0],
                                           np.float32(s)), np.float64)
        np.testing.assert_allclose(x, z * math.sqrt(1 + s * s / 32), rtol=1e-6)
        biased = z + s * u
        # Equal expected norms: Σ‖x‖² = Σ‖z‖²(1 + s²/d) against Σ‖z + s·u‖² (z·u ~ N(0, 1)).
        np.testing.assert_allclose((x ** 2).sum(), (biased ** 2).sum(),
                                   rtol=4 * math.sqrt(2 / z.size) + 2 * s / math.sqrt(z.size * 32))
    with pytest.raises(ValueError, match="inputs"):
        affine.sweep_inputs("sideways", state.z[0], state.u[0], np.float32(1.0))


def test_categorical_metrics_without_logits_are_recomputed_from_queries_and_keys():
    """The fused kernel writes no attn_logits/attn_weights: the reduction recomputes them from
    the queries and keys probes and gets the same metrics."""
    state = grid.init_seeds(CONFIG)
    params = jax.tree.map(lambda a: a[0], _randomised(state.params, seed=2))
    _, probes = affine.block_at(BLOCK, params, state.z[0], state.u[0], np.float32(3.0))
    fused_like = {k: v for k, v in probes.items() if k not in ("attn_logits", "attn_weights")}
    reduce = jax.jit(points.reduce_probes, static_argnums=1)
    full, recomputed = reduce(probes, BLOCK), reduce(fused_like, BLOCK)
    for name in points.CATEGORICAL_METRICS:
        np.testing.assert_allclose(recomputed[name], full[name], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(recomputed[f"per_head/{name}"], full[f"per_head/{name}"],
                                   rtol=1e-5, atol=1e-6)


def test_rounding_bound_bounds_the_float32_error_and_flags_corrupted_points():
    """docs/SWEEP.md "Large bias norms": against the float64 block, the float32 attention
    statistics are off by no more than the rounding bound wherever they are in their range, and
    every point where rounding really corrupts them (error > the tolerance; at s = 1e6 on this
    d = 32 block the float32 entropy leaves its range altogether) is flagged unreliable."""
    state = grid.init_seeds(CONFIG)
    norms = np.array([1e2, 1e4, 1e5, 1e6], np.float32)
    replicated = grid.NamedSharding(MESH, grid.P())
    got = COUNTED(*grid.place((state.params, state.z, state.u), replicated),
                  grid.place(norms, grid.NamedSharding(MESH, grid.P(grid.GRID_AXIS))))
    p64 = jax.tree.map(lambda a: np.asarray(a, np.float64), state.params)
    errors, in_range = np.zeros((2, 4)), np.ones((2, 4), bool)
    for i, j in itertools.product(range(2), range(4)):
        p_i = jax.tree.map(lambda a: a[i], p64)["params"]
        *_, logits, _, _ = _reference_point(p_i, np.asarray(state.z[i], np.float64),
                                            np.asarray(state.u[i], np.float64),
                                            float(norms[j]), BLOCK)
        ent, mx, _ = zip(*(reference.attention_stats(logits[b, h])
                           for b in range(3) for h in range(4)))
        errors[i, j] = max(
            abs(float(got["attention_entropy_normalized"][i, j]) - np.mean(ent) / math.log(6)),
            abs(float(got["attention_max"][i, j]) - np.mean(mx)))
        in_range[i, j] = all(0 <= float(got[name][i, j]) <= 1 for name in
                             ("attention_entropy_normalized", "attention_max"))
    bound = np.asarray(got["attention_rounding_bound"], np.float64)
    assert np.all((errors <= bound + 1e-6) | ~in_range), (errors, bound)
    assert errors.max() > points.RELIABLE_ROUNDING_BOUND  # a real corruption is in this grid ...
    result = grid.SweepResult(CONFIG, norms.astype(np.float64),
                              {"attention_rounding_bound": bound}, {}, None, 2, 0.0, 0.0)
    reliable = report.reliable_points(result)
    bad = errors.max(axis=0) > points.RELIABLE_ROUNDING_BOUND
    assert not any(ok and b for ok, b in zip(reliable, bad)), (reliable, errors)  # ... flagged
    assert reliable[0] and not reliable[-1], reliable
    warning = report.unreliable_warning({"label": "x", "bias_norms": norms.tolist(),
                                         "reliable": reliable})
    assert warning.startswith("warning: [x] float32 rounding") and "1e+06" in warning


def test_points_per_step_changes_nothing_but_the_schedule():
    """All points at once (vmap), one at a time, and groups of 3 of 4 (a remainder) agree."""
    state = grid.init_seeds(CONFIG)
    params = _randomised(state.params, seed=3)
    norms = np.array([0.0, 0.7, 40.0, 900.0], np.float32)
    outs = [jax.jit(grid.chunk_computation(BLOCK, with_metrics=False, points_per_step=k))(
        params, state.z, state.u, norms)["output_checksum"] for k in (0, 1, 3)]
    for out in outs[1:]:
        np.testing.assert_allclose(out, outs[0], rtol=1e-5)
    with pytest.raises(ConfigError, match="points_per_step"):
        grid.chunk_computation(BLOCK, points_per_step=-1)
    assert grid.default_points_per_step("cpu") == 1 and grid.default_points_per_step("gpu") == 0
    with pytest.raises(ConfigError, match="^reuse_projections: must be True or False"):
        CONFIG.replace(reuse_projections="yes")


def test_precomputed_projection_is_refused_for_pre_ln():
    block = BLOCK.replace(norm_position="pre")
    params = block_lib.init_block_params(block, jax.random.split(jax.random.key(0), 1))
    params = jax.tree.map(lambda a: a[0], params)
    x = np.zeros((1, 6, block.d_model), np.float32)
    with pytest.raises(ValueError, match="pre-LN"):
        block_lib.Block(block).apply(params, x, precomputed_qkv=StoredQKV(np.zeros(
            (1, 6, 3 * block.d_model), np.float32)))


def test_run_sweep_assigns_seeds_and_bias_norms_like_a_loop():
    """run_sweep (its keys, grid walk, gathering) against draws made by hand, seed by seed."""
    result = grid.run(CONFIG, mesh=MESH, chunk_fn=COUNTED)
    keys = inputs.seed_keys(CONFIG.seed, CONFIG.num_seeds)
    init = jax.jit(block_lib.Block(BLOCK).init)
    tokens = jax.jit(inputs.gaussian_tokens, static_argnums=(1, 2, 3))
    direction = jax.jit(inputs.random_unit_vector, static_argnums=1)
    drawn = []
    for i in range(CONFIG.num_seeds):
        k = inputs.split_seed_key(keys[i])
        u = direction(k.direction, 32)
        np.testing.assert_allclose(np.linalg.norm(u), 1.0, rtol=1e-6)
        params = init(k.params, np.zeros((1, 2, 32), np.float32))
        drawn.append((params, tokens(k.tokens, 3, 6, 32), u))
    stacked = jax.tree.map(lambda *a: np.stack(a), *drawn)
    replicated = grid.NamedSharding(MESH, grid.P())
    norms = np.asarray(CONFIG.bias_norms, np.float32)
    want = COUNTED(*grid.place(stacked, replicated),
                   grid.place(norms, grid.NamedSharding(MESH, grid.P(grid.GRID_AXIS))))
    for name in points.SCALAR_METRICS:
        np.testing.assert_allclose(result.per_seed[name], want[name], rtol=1e-6, atol=1e-7,
                                   err_msg=name)
    assert set(result.per_seed) == set(points.SCALAR_METRICS)
    assert set(result.per_head) == set(points.PER_HEAD_METRICS)
    assert result.per_head["query_norm"].shape == (2, 4, BLOCK.num_heads)
    np.testing.assert_allclose(result.per_head["query_norm"].mean(-1), result.per_seed["query_norm"],
                               rtol=1e-6)
    # Seeds differ from each other, and s = 0 really is unbiased: F1 at s = 0 is ~0.
    assert not np.allclose(result.per_seed["output_cosine"][0], result.per_seed["output_cosine"][1])
    assert abs(result.per_seed["input_cosine"][:, 0]).max() < 0.2


def test_new_bias_values_of_the_same_count_do_not_recompile():
    a = grid.run(CONFIG.replace(bias_norms=(0.0, 1.0, 2.0, 3.0)), mesh=MESH,
                        chunk_fn=COUNTED)
    b = grid.run(CONFIG.replace(bias_norms=(5.0, 0.1, 9.0, 40.0)), mesh=MESH,
                        chunk_fn=COUNTED)
    # chex's counter (n=1) refuses a second trace; the jit cache holds at most the one entry (it
    # may read 0 when an earlier test in the same worker changed a config flag that flushes it)
    assert COUNTED._cache_size() <= 1
    assert not np.allclose(a.per_seed["input_cosine"], b.per_seed["input_cosine"])  # it ran
    # The counter is live: a chunk of another shape is a second trace, which chex refuses.
    state = grid.init_seeds(CONFIG)
    with pytest.raises(AssertionError, match="trace"):
        COUNTED(state.params, state.z, state.u, np.zeros(6, np.float32))


def test_extreme_bias_norms_give_finite_metrics():
    result = grid.run(CONFIG.replace(bias_norms=(0.0, 1e2, 1e4, 1e6)), mesh=MESH,
                             chunk_fn=COUNTED)
    for name, values in result.per_seed.items():
        assert np.all(np.isfinite(values)), name
    np.testing.assert_allclose(result.per_seed["input_cosine"][:, -1], 1.0, atol=1e-5)
    np.testing.assert_allclose(result.per_seed["output_norm"], math.sqrt(32), rtol=1e-4)


def test_overflowing_bias_norm_raises_a_named_error_not_nan():
    with pytest.raises(FloatingPointError, match=r"overflow.*s=1e\+25"):
        grid.run(CONFIG.replace(bias_norms=(0.0, 1.0, 1e25, 2.0)), mesh=MESH,
                        chunk_fn=COUNTED)


# --------------------------------------------------------------------------------------------
# Grid bookkeeping (bare forward: one scalar per point, cheap to compile)

def _bare(config, mesh):
    return grid.run(config, mesh=mesh, with_metrics=False).per_seed["output_checksum"]


def test_sharded_over_two_devices_equals_one_device():
    assert len(jax.devices()) == 2
    config = CONFIG.replace(bias_norms=(0.0, 0.3, 2.0, 7.0, 50.0), num_seeds=3)
    two = _bare(config, MESH)
    one = _bare(config, grid.grid_mesh(jax.devices()[:1]))
    assert two.shape == (3, 5)
    np.testing.assert_allclose(two, one, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(_bare(config, MESH), two)  # seeded: repeatable bit for bit
    assert not np.allclose(_bare(config.replace(seed=8), MESH), two)


@pytest.mark.parametrize("chunk_size", [1, 3, 4])
def test_chunked_equals_unchunked_and_padding_is_dropped(chunk_size):
    config = CONFIG.replace(bias_norms=(0.0, 0.3, 2.0, 7.0, 50.0), num_seeds=3)
    phases = []
    chunked = grid.run(config.replace(chunk_size=chunk_size), mesh=MESH, with_metrics=False,
                       progress=Progress(lines=False, marker=phases.append))
    layout = chunked.layout
    assert layout.points_per_chunk <= max(chunk_size, 2)
    assert layout.bias_per_chunk % 2 == 0
    assert phases == [f"chunk {i}" for i in range(1, layout.num_chunks + 1)]
    whole = _bare(config, MESH)
    # float32 sums of other shapes
    np.testing.assert_allclose(chunked.per_seed["output_checksum"], whole, rtol=1e-5, atol=1e-6)
    # Each point really depends on its own (seed, s): no two entries coincide.
    assert len(np.unique(np.round(whole, 3))) == whole.size


def test_chunk_layout_bounds_points_in_flight():
    for seeds, norms, chunk, devices in itertools.product([1, 3], [1, 5, 1024], [0, 1, 6, 16],
                                                          [1, 2, 8]):
        lay = grid.chunk_layout(seeds, norms, chunk, devices)
        assert lay.bias_per_chunk % devices == 0
        assert lay.seeds_per_chunk * lay.num_seed_blocks >= seeds
        assert lay.bias_per_chunk * lay.num_bias_blocks >= norms
        if chunk:
            assert lay.points_per_chunk <= max(chunk, devices)
        else:
            assert lay.num_chunks == 1


def test_closed_forms_follow_the_config():
    """Which forms exist for which block, and where F3's expansion is given (v(s) ≤ 1); their
    values are checked against measurements and a Monte Carlo in test_sweep_science.py and
    test_sweep_controls.py."""
    s = np.array([0.0, 3.0, 100.0])
    forms = theory.closed_forms(SweepConfig(bias_norms=(0.0, 3.0, 100.0)), s)
    v = theory.logit_variance(SweepConfig(), s)
    assert np.all(np.isfinite(forms["attention_entropy"]["predicted"]) == (v <= 1.0))
    assert v[2] > 1.0 > v[0]  # s = 100: (σ²d)²(1 + s²/d) ≈ 1.3, beyond the expansion
    causal = theory.closed_forms(SweepConfig(model=BlockConfig(causal=True)), s)
    assert "attention_entropy" not in causal and "query_norm" in causal
    pre = theory.closed_forms(SweepConfig(model=BlockConfig(norm_position="pre")), s)
    assert "output_norm" not in pre and "output_norm" in forms
    one = theory.closed_forms(SweepConfig(batch_size=1), s)
    assert "input_cross_sequence_cosine" not in one and "input_cross_sequence_cosine" in forms


def test_the_main_job_is_unchanged_by_the_controls():
    """The biased run of the `:controls` results (5 seeds, after the controls were added; one
    H100) repeats the committed default run (3 seeds, before them; CPU) seed by seed, and its
    norm-matched run the committed `:control` one: the new inputs leave the draws and the
    default computation as they were (float32 on two devices: relative differences ≤ 1e-3)."""
    import json
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent / "docs" / "results" / "sweep"
    new = json.loads((root / "controls" / "results.json").read_text())["runs"]
    pairs = ((json.loads((root / "default" / "results.json").read_text())["metrics"],
              new["inputs=biased"]["metrics"]),
             (json.loads((root / "control" / "results.json").read_text())["runs"]
              ["inputs=norm_matched"]["metrics"], new["inputs=norm_matched"]["metrics"]))
    for old, now in pairs:
        for name, metric in old.items():
            before = np.asarray(metric["per_seed"], np.float64)
            after = np.asarray(now[name]["per_seed"], np.float64)[: before.shape[0]]
            np.testing.assert_array_less(np.abs(after - before), 1e-3 * (np.abs(before) + 1e-3),
                                         err_msg=name)


# --------------------------------------------------------------------------------------------
# Configuration and bad inputs

def _experiment_config(arg=None):
    from anisotropy_jax import configs

    return configs.module("sweep").get_config(arg)


def test_default_config_is_the_science_protocol_and_variants_validate():
    (label, cfg), = sweep_configs_from_mapping(_experiment_config())
    assert cfg.model == BlockConfig()  # BERT-base post-LN, N(0, 0.02²), eps 1e-12
    assert (cfg.batch_size, cfg.seq_len, cfg.num_seeds) == (16, 128, 3)
    assert cfg.bias_norms[0] == 0.0 and max(cfg.bias_norms) >= 1024
    assert np.all(np.diff(np.log(cfg.bias_norms[1:])) > 0)  # log-spaced, increasing
    expected = {"smoke": 1, "pre_ln": 1, "lecun": 1, "attention_only": 1, "post_vs_pre": 2,
                "init_std": 3, "temperature": 3, "smoke+post_vs_pre": 2, "control": 2,
                "fixed_norm": 2, "per_sequence": 2, "controls": 4, "pre_ln+controls": 4}
    for variant, count in expected.items():
        assert len(sweep_configs_from_mapping(_experiment_config(variant))) == count
    config = _experiment_config()
    config.model.precision = "bfloat16"
    (_, bf16), = sweep_configs_from_mapping(config)
    assert bf16.model.precision == "bfloat16"
    (_, pre), = sweep_configs_from_mapping(_experiment_config("pre_ln"))
    assert pre.model.norm_position == "pre"
    (_, att), = sweep_configs_from_mapping(_experiment_config("attention_only"))
    assert not att.model.use_mlp
    labels = [lbl for lbl, _ in sweep_configs_from_mapping(_experiment_config("post_vs_pre"))]
    assert labels == ["norm_position=post", "norm_position=pre"]
    (lb, biased), (lc, control) = sweep_configs_from_mapping(_experiment_config("control"))
    assert (lb, lc) == ("inputs=biased", "inputs=norm_matched")
    assert (biased.inputs, control.inputs) == ("biased", "norm_matched")
    assert biased.replace(inputs="norm_matched") == control  # same block, seeds and grid
    runs = sweep_configs_from_mapping(_experiment_config("pre_ln+controls"))
    assert [cfg.inputs for _, cfg in runs] == ["biased", "norm_matched", "fixed_norm",
                                               "per_sequence"]
    assert all(cfg.replace(inputs="biased") == runs[0][1] for _, cfg in runs)
    assert runs[0][1].model.norm_position == "pre"
    for variant, kind in (("fixed_norm", "fixed_norm"), ("per_sequence", "per_sequence")):
        assert [cfg.inputs for _, cfg in sweep_configs_from_mapping(
            _experiment_config(variant))] == ["biased", kind]


@pytest.mark.parametrize("field,value", [
    ("bias_norms", (0.0, -1.0)),
    ("bias_norms", (0.0, float("nan"))),
    ("bias_norms", (float("inf"),)),
    ("bias_norms", ()),
    ("model.d_model", 102),           # not divisible by the 4 heads of smoke
    ("model.init", "kaiming"),
    ("model.norm_position", "middle"),
    ("seq_len", 1),
    ("batch_size", 0),
    ("num_seeds", 0),
    ("chunk_size", -1),
    ("points_per_step", -2),
    ("model.precision", "float8"),
    ("compare_fields", ("depth",)),
    ("compare_fields", ("model.depth",)),
    ("inputs", "shuffled"),
])
def test_bad_input_is_one_line_naming_the_field(field, value):
    config = _experiment_config("smoke")
    with config.unlocked():
        if field.startswith("model."):
            config.model[field.split(".")[1]] = value
        else:
            config[field] = value
    with pytest.raises(ConfigError) as err:
        sweep_configs_from_mapping(config)
    message = str(err.value)
    assert "\n" not in message
    name = field.split(".")[-1]
    assert message.startswith(field) or message.startswith(f"model.{name}"), message


def test_compare_values_are_validated_like_model_fields():
    config = _experiment_config("smoke+post_vs_pre")
    config.compare_values = ("post", "sideways")
    with pytest.raises(ConfigError, match="^compare_values: model.norm_position"):
        sweep_configs_from_mapping(config)
    with pytest.raises(ConfigError, match="^compare_fields: must be a tuple of field paths"):
        sweep_configs_from_mapping({"compare_fields": "inputs", "compare_values": ("biased",)})
    config = _experiment_config("smoke+control")
    config.compare_values = ("biased", "sideways")
    with pytest.raises(ConfigError, match="^compare_values: inputs: unknown inputs 'sideways'"):
        sweep_configs_from_mapping(config)


def test_docs_tables_are_generated_from_the_committed_results():
    """Every table that docs/SWEEP.md embeds between `<!-- table: KIND PATH -->` markers is
    exactly what `tables.render` makes of the committed results file (no hand-typed numbers)."""
    import pathlib

    from anisotropy_jax.studies.sweep import tables

    repo = pathlib.Path(__file__).resolve().parent.parent
    embedded = tables.embedded_tables((repo / "docs" / "SWEEP.md").read_text())
    assert {kind for kind, _, _ in embedded} >= {"control", "default", "closed_forms"}
    for kind, path, written in embedded:
        assert (repo / path).exists(), path
        assert written == tables.render(kind, repo / path), (kind, path)
    with pytest.raises(ValueError, match="unknown table"):
        tables.render("sideways", repo / embedded[0][1])


def test_run_with_compiler_options_as_on_gpus(monkeypatch):
    """GPUs jit the seed draws and the chunk with compiler options (no Triton GEMM autotuning),
    which JAX accepts only on top-level jits: the same run on the CPU with an option set, so that
    a nested options-jit (an error on GPUs only) fails here too; the results equal the default's
    up to float32 rounding (another optimisation level fuses differently)."""
    config = SweepConfig(model=BlockConfig(d_model=32, num_heads=2, d_ff=64), batch_size=2,
                         seq_len=16, bias_norms=(0.0, 1.0, 5.0), num_seeds=2)
    want = grid.run(config)
    monkeypatch.setattr(layers, "compiler_options",
                        lambda platform: {"xla_backend_optimization_level": 2})
    monkeypatch.setattr(grid, "_init_seeds_jit", functools.lru_cache(maxsize=4)(
        grid._init_seeds_jit.__wrapped__))
    monkeypatch.setattr(grid, "make_chunk_fn", functools.lru_cache(maxsize=32)(
        grid.make_chunk_fn.__wrapped__))
    got = grid.run(config)
    for name in want.per_seed:
        np.testing.assert_allclose(got.per_seed[name], want.per_seed[name], rtol=1e-4, atol=1e-5,
                                   err_msg=name)


def test_an_overflow_names_the_field_that_caused_it():
    """At s = 0 there is no bias to blame: a huge init_std is named; at s > 0 the bias norms."""
    from anisotropy_jax.studies.sweep import grid as sweep_grid

    values_SxC = np.array([[np.nan, np.nan]], np.float32)
    huge = BlockConfig(init_std=1e20)
    with pytest.raises(FloatingPointError, match=r"at s=0, seed=0 .*: float32 activations "
                       r"overflow with no bias at all: the weights of model.init_std=1e\+20 are "
                       r"too large$"):
        sweep_grid._check_finite({"output_cosine": values_SxC}, np.array([0]),
                                 np.array([0.0, 4.0]), huge)
    values_SxC[0, 0] = 0.5
    with pytest.raises(FloatingPointError, match=r"at s=4, seed=0 .*: float32 activations "
                       r"overflow for bias norms this large \(bias_norms\)$"):
        sweep_grid._check_finite({"output_cosine": values_SxC}, np.array([0]),
                                 np.array([0.0, 4.0]), BlockConfig())
    assert "model.init=lecun" in sweep_grid.overflow_cause(BlockConfig(init="lecun"), 0.0)
