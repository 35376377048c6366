"""The depth study at small shapes: the stack against a float64 numpy loop over layers, one
compilation whatever the depth, sharded = one device, stacked = per-layer weights, a shallow stack
is a prefix of a deep one, the closed forms at small sizes, and every bad field named.

Compile budget: one module-level run of the three architectures on both fake CPU devices (three
metric-reducing compilations) serves most tests; the rest compile one architecture each.
"""
import dataclasses
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special

from anisotropy_jax.config import BlockConfig, ConfigError
from anisotropy_jax.configs.depth import DepthConfig, depth_config_from_mapping
from anisotropy_jax.studies import depth
from anisotropy_jax.studies.depth import grid, report, stack, theory
from tests import reference

CONFIG = DepthConfig(widths=(16,), head_dim=8, num_layers=3, batch_size=2, seq_len=5,
                     bias_norms=(0.0, 3.0, 20.0), num_seeds=2, seed=3, chunk_size=4,
                     model=BlockConfig(init="lecun"))  # lecun: O(1) logits, non-trivial layers


@pytest.fixture(scope="module")
def result():
    return depth.run(CONFIG)  # both fake devices (conftest)


# --------------------------------------------------------------------------------------------
# Float64 reference: the layers one after another, metrics with loops

def _ln(x, p, eps):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * p["scale"] + p["bias"]


def _layer64(p, x, cfg: BlockConfig, arch, alpha, skip):
    b, seq, d = x.shape
    pre, post = arch == "pre", arch == "post"
    a_in = _ln(x, p["attention_norm"], cfg.layer_norm_eps) if pre else x
    att = p["attention"]
    q, k, v = ((a_in @ att[n]["kernel"] + att[n]["bias"]).reshape(b, seq, cfg.num_heads, -1)
               for n in ("query", "key", "value"))
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(cfg.d_head)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    mixed = np.einsum("bhqk,bkhd->bqhd", w, v).reshape(b, seq, d)
    h = (skip if arch == "attention_only" else 1.0) * x + alpha * (
        mixed @ att["out"]["kernel"] + att["out"]["bias"])
    if post:
        h = _ln(h, p["attention_norm"], cfg.layer_norm_eps)
    if not cfg.use_mlp:
        return h, w
    m_in = _ln(h, p["mlp_norm"], cfg.layer_norm_eps) if pre else h
    hid = m_in @ p["mlp"]["fc_in"]["kernel"] + p["mlp"]["fc_in"]["bias"]
    hid = 0.5 * hid * (1.0 + special.erf(hid / math.sqrt(2.0)))
    y = h + alpha * (hid @ p["mlp"]["fc_out"]["kernel"] + p["mlp"]["fc_out"]["bias"])
    return (_ln(y, p["mlp_norm"], cfg.layer_norm_eps) if post else y), w


def _metrics64(y, w):
    b, seq, d = y.shape
    ent = -(w * np.log(np.where(w > 0, w, 1.0))).sum(-1)
    return {"output_cosine": reference.average_cosine(y.reshape(-1, d)),
            "effective_rank": np.mean([reference.effective_rank(y[i]) for i in range(b)]),
            "rank1_residual": np.mean([np.linalg.norm(y[i] - y[i].mean(0)) / np.linalg.norm(y[i])
                                       for i in range(b)]),
            "residual_rms": math.sqrt(np.mean(np.sum(y * y, -1))),
            "attention_entropy_normalized": ent.mean() / math.log(seq)}


def _reference_stack(config, arch, width, seed_index, s):
    from anisotropy_jax import inputs
    key = inputs.seed_keys(config.seed, config.num_seeds)[seed_index]
    split = inputs.split_seed_key(key)
    z = np.asarray(inputs.gaussian_tokens(split.tokens, config.batch_size, config.seq_len, width),
                   np.float64)
    u = np.asarray(inputs.random_unit_vector(split.direction, width), np.float64)
    layer = grid.stack_layer(config, arch, width)
    x, out = z + s * u, []
    for key_l in stack.layer_keys(split.params, config.num_layers):
        p = jax.tree.map(lambda a: np.asarray(a, np.float64),
                         stack.init_layer(layer, key_l))["params"]
        x, w = _layer64(p, x, layer.config, arch, config.alpha, config.attention_only_skip)
        out.append(_metrics64(x, w))
    return out


@pytest.mark.parametrize("arch", ["post", "pre", "attention_only"])
def test_every_layer_equals_a_float64_numpy_loop(result, arch):
    st = result.stacks[grid.stack_name(arch, 16)]
    for seed_index in range(CONFIG.num_seeds):
        for j, s in enumerate(CONFIG.bias_norms):
            ref = _reference_stack(CONFIG, arch, 16, seed_index, s)
            for layer, ref_l in enumerate(ref):
                for name, value in ref_l.items():
                    got = st.per_layer[name][seed_index, j, layer]
                    # float32 Gram eigenvalues: singular values below ~3e-4·σ_max are noise, so
                    # an effective rank near 1 is resolved to ~5e-3 (docs/DEPTH.md)
                    tol = 5e-3 if name == "effective_rank" else 2e-5
                    assert got == pytest.approx(value, rel=2e-4, abs=tol), (name, s, layer)


def test_scaled_layer_adds_alpha_times_each_branch():
    """The stack's layer is the one Block with residual_scale α (and, attention-only, skip_scale):
    its residual sums are skip·x + α·attn_out and resid_mid + α·mlp_out; α = 1 adds exactly."""
    x = jax.random.normal(jax.random.key(1), (2, 5, 16))
    for arch in ("pre", "attention_only"):
        cfg = CONFIG.replace(branch_scale=0.3, attention_only_skip=0.7)
        layer = grid.stack_layer(cfg, arch, 16)
        params = stack.init_layer(layer, jax.random.key(0))
        y, probes = layer.apply(params, x)
        skip = 0.7 if arch == "attention_only" else 1.0
        np.testing.assert_allclose(probes["resid_mid"], skip * x + 0.3 * probes["attn_out"],
                                   rtol=1e-6, atol=1e-6)
        if arch == "pre":
            np.testing.assert_allclose(y, probes["resid_mid"] + 0.3 * probes["mlp_out"],
                                       rtol=1e-6, atol=1e-6)
        if arch == "pre":  # α = 1: exactly x + attn_out, no multiplication by 1
            _, p_plain = grid.stack_layer(CONFIG.replace(branch_scale=1.0), arch, 16).apply(
                params, x)
            np.testing.assert_array_equal(np.asarray(p_plain["resid_mid"]),
                                          np.asarray(x + p_plain["attn_out"]))


def test_one_device_and_stacked_weights_give_the_same_numbers(result):
    one = CONFIG.replace(architectures=("pre",))
    single = depth.run(one, mesh=grid.grid_mesh(jax.devices()[:1]))
    stacked = depth.run(one.replace(weights="stacked"))
    per_layer = depth.run(one.replace(weights="per_layer"))
    ref = result.stacks["pre_d16"]  # weights 'auto': stacked at this size
    assert grid.weights_mode(CONFIG, "pre", 16) == "stacked"
    for other in (single, stacked, per_layer):
        for name, values in ref.per_layer.items():
            np.testing.assert_allclose(other.stacks["pre_d16"].per_layer[name], values,
                                       rtol=2e-5, atol=2e-6, err_msg=name)
    assert single.num_devices == 1 and result.num_devices == 2


def test_auto_weights_stack_only_what_fits():
    bert_base = DepthConfig(widths=(768,), num_layers=12)  # 12 · 12 · 768² · 4 B = 0.34 GB
    llm = DepthConfig(widths=(8192,), num_layers=48, model=BlockConfig(precision="bfloat16"))
    assert grid.weights_mode(bert_base, "post", 768) == "stacked"
    assert grid.weights_mode(llm, "post", 8192) == "per_layer"  # 155 GB
    assert grid.weights_mode(llm.replace(weights="stacked"), "post", 8192) == "stacked"


def test_depth_does_not_change_compilation_and_a_shallow_stack_is_a_prefix():
    """A 2- and a 48-layer stack: the layer is traced once each, each compiles once for new bias
    values, in comparable time; the 2-layer values are the first 2 layers of the 48-layer ones."""
    traces, seconds, values = {}, {}, {}
    original = stack.depth_metrics
    for n in (2, 48):
        cfg = CONFIG.replace(architectures=("attention_only",), num_layers=n, num_seeds=1)
        count = [0]

        def counting(x, count=count):
            count[0] += 1
            return original(x)
        stack.depth_metrics = counting
        try:
            fn = grid.make_chunk_fn(cfg, "attention_only", 16, grid.grid_mesh())
            keys = np.asarray(jax.random.key_data(jax.random.key(0)[None]))
            t0 = time.perf_counter()
            out = fn(keys, np.array([0.0, 3.0], np.float32))
            jax.block_until_ready(out)
            seconds[n] = time.perf_counter() - t0
            fn(keys, np.array([1.0, 7.0], np.float32))
        finally:
            stack.depth_metrics = original
        traces[n] = count[0]
        assert fn._cache_size() == 1
        values[n] = np.asarray(out["output_cosine"])
    assert traces[2] == traces[48] == 2  # the input's, and the scan body's (once for all layers)
    assert seconds[48] < 3.0 * seconds[2] + 5.0, seconds
    np.testing.assert_array_equal(values[48][:, :, :2], values[2])


# --------------------------------------------------------------------------------------------
# Theory at small sizes

def test_gelu_second_moment_matches_monte_carlo():
    g = np.random.default_rng(0).normal(0.0, math.sqrt(0.7), 2_000_000)
    mc = np.mean((0.5 * g * (1 + special.erf(g / math.sqrt(2)))) ** 2)
    assert theory.gelu_second_moment(0.7) == pytest.approx(mc, rel=3e-3)
    assert theory.gelu_second_moment(1e-6) == pytest.approx(1e-6 / 4, rel=1e-3)


@pytest.mark.parametrize("init", ["bert", "lecun"])
def test_pre_ln_branch_norms_match_the_closed_form_over_weight_draws(init):
    """Identical tokens (c = 1): E‖attn_out‖² = A and E‖mlp_out‖² = M over 400 weight draws."""
    cfg = CONFIG.replace(widths=(32,), model=BlockConfig(init=init, init_std=0.05))
    layer = grid.stack_layer(cfg, "pre", 32)
    x = jnp.broadcast_to(jax.random.normal(jax.random.key(5), (32,)), (1, 4, 32))

    def branch_norms(key):
        _, probes = layer.apply(stack.init_layer(layer, key), x)
        return (jnp.mean(jnp.sum(probes["attn_out"] ** 2, -1)),
                jnp.mean(jnp.sum(probes["mlp_out"] ** 2, -1)))
    attn, mlp = jax.vmap(branch_norms)(jax.random.split(jax.random.key(9), 400))
    terms = theory.pre_ln_branch_terms(cfg, 32)
    assert float(attn.mean()) == pytest.approx(terms["attention_per_c"], rel=0.15)
    assert float(mlp.mean()) == pytest.approx(terms["mlp"], rel=0.15)


def test_pure_attention_residual_is_cubic_in_the_input_residual():
    """X = 1·m + ε·R through one pure-attention layer: rank-1 residual ∝ ε³ (Dong et al. 2021)."""
    cfg = CONFIG.replace(widths=(32,))
    layer = grid.stack_layer(cfg, "attention_only", 32)
    params = stack.init_layer(layer, jax.random.key(2))
    m = 3.0 * jax.random.normal(jax.random.key(3), (32,))
    r = jax.random.normal(jax.random.key(4), (1, 6, 32))
    res = [float(stack.rank1_residual(layer.apply(params, m[None, None, :] + eps * r)[0]))
           for eps in (0.2, 0.1)]
    assert math.log(res[0] / res[1], 2) == pytest.approx(3.0, abs=0.25)


def test_cubic_recursion_and_threshold_depth():
    rec = theory.cubic_recursion(0.1, 0.002, 3)
    assert rec["kappa"] == pytest.approx(2.0)
    np.testing.assert_allclose(rec["predicted"], [0.1, 0.002, 2.0 * 0.002 ** 3])
    assert theory.depth_to_threshold([0.1, 0.5, 0.95, 0.99]) == 2
    assert theory.depth_to_threshold([0.1, 0.5]) is None


def test_report_summaries_and_pre_ln_band(result, tmp_path):
    from anisotropy_jax import results
    doc = report.write(result, tmp_path, results.Provenance(), {"test": True})
    pre = doc["stacks"]["pre_d16"]
    assert len(pre["curves"]["average_cosine"]["mean"][0]) == CONFIG.num_layers + 1
    assert pre["theory"]["pre_ln_norm_growth"]["per_bias_norm"][0]["lower"][0] == pytest.approx(
        pre["curves"]["residual_rms"]["mean"][0][0] ** 2, rel=0.2)
    assert "pure_attention_collapse" in doc["stacks"]["attention_only_d16"]["theory"]
    assert (tmp_path / "results.json").exists() and (tmp_path / "figures" / "theory.png").exists()
    assert "d(cos>=.9)" in report.format_table(doc)


@pytest.mark.default_emitters  # a deep stack against its shallow prefix, bit for bit
def test_a_stack_past_float32_range_keeps_its_earlier_layers_and_warns(tmp_path):
    from anisotropy_jax import results
    # σ_w = 3 at width 16: each attention-only layer multiplies the norm by ~(3·√16)² = 144, so
    # the logits leave float32's range within a dozen layers.
    cfg = dataclasses.replace(CONFIG, architectures=("attention_only",), num_layers=12,
                              model=BlockConfig(init="bert", init_std=3.0))
    with pytest.warns(RuntimeWarning, match="leaves float32's range at layer"):
        res = depth.run(cfg)
    st = res.stacks["attention_only_d16"]
    first = st.inputs["range_exceeded_layer"]  # (seeds, s)
    assert first.shape == (cfg.num_seeds, len(cfg.bias_norms)) and (first > 1).all()
    for key in ("output_cosine", "effective_rank", "residual_rms"):
        for i, j in np.ndindex(first.shape):
            values = st.per_layer[key][i, j]
            assert np.isfinite(values[: first[i, j] - 1]).all()
            assert np.isnan(values[first[i, j] - 1:]).all()
    doc = report.write(res, tmp_path, results.Provenance(), {"test": True})
    assert "nan" in report.format_table(results.to_jsonable(doc))
    # the layers before the cut are the untouched prefix: a 3-layer run gives the same numbers
    short = depth.run(dataclasses.replace(cfg, num_layers=3)).stacks["attention_only_d16"]
    np.testing.assert_array_equal(short.per_layer["output_cosine"],
                                  st.per_layer["output_cosine"][:, :, :3])


# --------------------------------------------------------------------------------------------
# Configuration

@pytest.mark.parametrize("field, value, message", [
    ("widths", (20,), "widths: 20 is not a positive multiple of head_dim=8"),
    ("architectures", ("post", "sideways"), "architectures: must be distinct values"),
    ("num_layers", 0, "num_layers: must be an integer >= 1"),
    ("weights", "lazy", "weights: unknown mode"),
    ("branch_scale", -1.0, "branch_scale: must be a finite number >= 0"),
    ("bias_norms", (1.0, -2.0), "bias_norms: -2.0 is negative"),
])
def test_bad_fields_are_named(field, value, message):
    with pytest.raises(ConfigError, match=message):
        CONFIG.replace(**{field: value})


def test_mapping_refuses_per_stack_block_fields_and_unknown_keys():
    with pytest.raises(ConfigError, match="model.d_model: set per stack"):
        depth_config_from_mapping({"model": {"d_model": 64}})
    with pytest.raises(ConfigError, match="depthh: unknown field"):
        depth_config_from_mapping({"depthh": 3})
    with pytest.raises(ConfigError, match="^model.residual_scale: set per stack by branch_scale"):
        DepthConfig(model=BlockConfig(residual_scale=0.5))
    cfg = depth_config_from_mapping({"widths": [64], "model": {"precision": "bfloat16"},
                                     "scale_with_depth": True, "num_layers": 8})
    assert cfg.model.precision == "bfloat16" and cfg.alpha == pytest.approx(0.25)


def test_chunk_store_refuses_another_config(tmp_path):
    store = report.ChunkStore(tmp_path, CONFIG)
    store.save("pre_d16/x", {"input/a": np.ones(2)})
    assert store.has("pre_d16/x") and list(store.load("pre_d16/x")) == ["input/a"]
    report.ChunkStore(tmp_path, CONFIG)  # same config: fine
    with pytest.raises(ConfigError, match="workdir: .* another depth config"):
        report.ChunkStore(tmp_path, CONFIG.replace(num_layers=4))



def test_a_bias_that_overflows_the_first_block_stops_the_run_as_in_the_sweep():
    """A metric that is not finite after the first block (s = 1e30 overflows one block, as in
    the bias sweep) stops the run, naming the metric, stack, s and seed, instead of NaN rows; a
    stack that leaves float32's range deeper down keeps its earlier layers (a warning)."""
    from anisotropy_jax.studies.depth import grid

    def chunk(bad_layer):
        cosine_SxCxN = np.full((2, 2, 3), 0.5, np.float32)
        cosine_SxCxN[1, 1, bad_layer] = np.inf
        return {"input/residual_rms": np.ones((2, 2), np.float32), "output_cosine": cosine_SxCxN}

    with pytest.raises(FloatingPointError, match=r"^depth sweep overflow: metric 'output_cosine' "
                       r"is not finite after the first block of stack post_d16 at s=1e\+30, "
                       r"seed=5: float32"):
        grid._mask_out_of_range(chunk(0), "post_d16/seeds0004-0005", np.array([4, 5]),
                                np.array([0.0, 1e30], np.float32))
    # At s = 0 no bias is to blame: the message names the weights' field, as the sweep's does.
    with pytest.raises(FloatingPointError, match=r"at s=0, seed=5: float32 activations overflow "
                       r"with no bias at all: the weights of model.init_std=1e\+20 are too "
                       r"large$"):
        grid._mask_out_of_range(chunk(0), "post_d16/seeds0004-0005", np.array([4, 5]),
                                np.array([1.0, 0.0], np.float32), BlockConfig(init_std=1e20))
    with pytest.warns(RuntimeWarning, match="leaves float32's range at layer 2"):
        kept = grid._mask_out_of_range(chunk(1), "post_d16/seeds0004-0005", np.array([4, 5]),
                                       np.array([0.0, 4.0], np.float32))
    assert kept["output_cosine"][1, 1, 0] == 0.5 and np.isnan(kept["output_cosine"][1, 1, 1:]).all()
