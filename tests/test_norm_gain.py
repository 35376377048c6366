"""The norms' gain (`model.norm_gain`): 'single' (one scalar γ per norm, shape (1,)) and 'none'
(no γ; a LayerNorm keeps β) against float64 loops, for LayerNorm and RMSNorm; the default
'per_channel' keeps the usual parameters; a tiny model with one gain per norm trains a step."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from anisotropy_jax import configs
from anisotropy_jax.config import BlockConfig, ConfigError, train_config_from_mapping
from anisotropy_jax.models.layers import norm
from anisotropy_jax.models.transformer import embedding_matrices
from anisotropy_jax.studies import training

EPS = 1e-5


def _reference(x, kind, gamma, beta):
    """Row by row in float64: (x − mean) / sqrt(var + eps) (LayerNorm) or x / sqrt(mean(x²) +
    eps) (RMSNorm), times γ (a scalar, or none), plus β (LayerNorm, where it has one)."""
    out = np.empty(x.shape)
    for index in np.ndindex(x.shape[:-1]):
        row = x[index].astype(np.float64)
        if kind == "layer":
            centred = row - row.sum() / len(row)
            y = centred / np.sqrt((centred ** 2).sum() / len(row) + EPS)
        else:
            y = row / np.sqrt((row ** 2).sum() / len(row) + EPS)
        if gamma is not None:
            y = y * gamma
        if beta is not None:
            y = y + beta
        out[index] = y
    return out


@pytest.mark.parametrize("kind", ["layer", "rms"])
@pytest.mark.parametrize("gain", ["single", "none"])
def test_single_and_no_gain_norms_match_a_float64_loop(kind, gain):
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(2, 3, 8)) * 3 + 1.5).astype(np.float32)
    config = BlockConfig(d_model=8, num_heads=2, d_ff=8, norm=kind, norm_gain=gain,
                         layer_norm_eps=EPS)
    module = norm(config, "n")
    params = module.init(jax.random.key(0), x).get("params", {})
    expected_names = {("single", "layer"): {"scale", "bias"}, ("single", "rms"): {"scale"},
                      ("none", "layer"): {"bias"}, ("none", "rms"): set()}[gain, kind]
    assert set(params) == expected_names
    gamma = beta = None
    if "scale" in params:
        assert params["scale"].shape == (1,)
        gamma = np.float32(-1.7)  # not 1, and negative: a sign error shows
        params = {**params, "scale": jnp.array([gamma])}
    if "bias" in params:
        assert params["bias"].shape == (8,)
        beta = rng.normal(size=8).astype(np.float32)
        params = {**params, "bias": jnp.asarray(beta)}
    got = module.apply({"params": params}, x)
    np.testing.assert_allclose(np.asarray(got), _reference(x, kind, gamma, beta), rtol=1e-5,
                               atol=1e-5)


def test_qk_norm_without_bias_and_the_default_keep_their_parameters():
    """The QK norm (use_bias=False) with a single gain holds "scale" (1,) alone; the default is
    Flax's LayerNorm with "scale" and "bias" of shape (D,), as every checkpoint has them."""
    x = jnp.ones((1, 2, 8))
    single = BlockConfig(d_model=8, num_heads=2, d_ff=8, norm_gain="single")
    params = norm(single, "query_norm", use_bias=False).init(jax.random.key(0), x)["params"]
    assert jax.tree.map(jnp.shape, params) == {"scale": (1,)}
    default = norm(BlockConfig(d_model=8, num_heads=2, d_ff=8), "n").init(jax.random.key(0), x)
    assert jax.tree.map(jnp.shape, default["params"]) == {"scale": (8,), "bias": (8,)}
    with pytest.raises(ConfigError) as error:
        BlockConfig(norm_gain="scalar")
    assert str(error.value) == ("model.norm_gain: unknown norm_gain 'scalar'; choose one of "
                                "('per_channel', 'single', 'none')")


def _tiny(gain):
    cfg = configs.module("train").get_config("clm+smoke")
    cfg.model.num_layers, cfg.model.d_model, cfg.model.d_ff, cfg.model.num_heads = 1, 16, 16, 2
    cfg.data.seq_len, cfg.model.norm_gain = 8, gain
    return train_config_from_mapping(cfg)[0]


def test_a_single_gain_model_has_scalar_gains_and_trains_a_step():
    config = _tiny("single")
    _, model, tx = training.abstract_state(config)
    state = training.init_state(model, tx, 0, config.data.seq_len)
    gains = {jax.tree_util.keystr(path): leaf.shape for path, leaf
             in jax.tree_util.tree_flatten_with_path(state["params"])[0]
             if "scale" in jax.tree_util.keystr(path)}
    assert set(gains) == {"['params']['block_0']['attention_norm']['scale']",
                          "['params']['block_0']['mlp_norm']['scale']",
                          "['params']['final_norm']['scale']"}
    assert set(gains.values()) == {(1,)}
    rng = np.random.default_rng(0)
    batch = {"inputs": rng.integers(0, 256, (8, 8), dtype=np.int32),
             "targets": rng.integers(0, 256, (8, 8), dtype=np.int32),
             "weights": np.ones((8, 8), np.float32)}
    step = jax.jit(functools.partial(training.train_step, model=model, tx=tx,
                                     schedule=training.learning_rate_schedule(config.optim,
                                                                              config.steps)))
    new, metrics = step(state, batch)
    assert np.isfinite(float(metrics["loss"])) and bool(metrics["params_finite"])
    final = new["params"]["params"]["final_norm"]["scale"]
    assert final.shape == (1,) and float(final[0]) != 1.0  # the one gain learns
    # the embedding analysis reads the single gain as a (D,) vector
    gain_D = embedding_matrices(new["params"], config.transformer_config())["final_norm_scale"]
    np.testing.assert_array_equal(gain_D, np.full(16, np.asarray(final)[0]))
    assert training.abstract_state(_tiny("none"))[0]["params"]["params"]["final_norm"].keys() \
        == {"bias"}
