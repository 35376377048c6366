"""The Pallas flash attention core (`models/flash_attention.py`, interpret mode on the CPU) against
the XLA core at float32 'highest': outputs and gradients of every normalisation it computes, with
tiles small enough that the online statistics cross key blocks, and a short training run."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from anisotropy_jax import configs
from anisotropy_jax.config import BlockConfig, ConfigError, ModelSpec, train_config_from_mapping
from anisotropy_jax.models import attention, flash_attention

HIGHEST = jax.lax.Precision.HIGHEST
# Absolute, relative to the largest |value| of each array: the cores round float32 sums in other
# orders (measured here: at most 7e-7; softpick at logits twice as large 2e-6, where its
# e^{ℓ−m} − e^{−m} cancels).
TOLERANCE = 1e-5


def _output_and_grads(core, q, k, v, cotangent):
    """(out, dq, dk, dv): the gradients of the random linear functional Σ out·cotangent."""
    out, vjp = jax.vjp(core, q, k, v)
    return (out, *vjp(cotangent))


def _compare(normalization, causal, shape, blocks, scale_inputs=1.5):
    batch, seq_len, heads, d_head = shape
    keys = jax.random.split(jax.random.key(len(normalization) + 10 * causal), 4)
    q, k, v, cotangent = (jax.random.normal(key, shape) for key in keys)
    q, k = q * scale_inputs, k * scale_inputs  # logits of a few units: all regimes of softpick
    scale = 1.0 / np.sqrt(d_head)

    def xla(q, k, v):
        return attention.attention_core(q, k, v, scale=scale, precision=HIGHEST, causal=causal,
                                        normalization=normalization)[0]

    def flash(q, k, v):
        return flash_attention.flash_attention(
            q, k, v, normalization=normalization, logit_scale=scale, causal=causal,
            precision=HIGHEST, interpret=True, block_q=blocks, block_k=blocks,
            block_backward=blocks)

    want = jax.jit(_output_and_grads, static_argnums=0)(xla, q, k, v, cotangent)
    got = jax.jit(_output_and_grads, static_argnums=0)(flash, q, k, v, cotangent)
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        np.testing.assert_allclose(g, w, rtol=0, atol=TOLERANCE * float(jnp.max(jnp.abs(w))),
                                   err_msg=f"{normalization} {name}")


@pytest.mark.parametrize("normalization", flash_attention.FLASH_NORMALIZATIONS)
def test_causal_forward_and_gradients_match_the_xla_core(normalization):
    """L = 32 in tiles of 16: the running max and sums cross two key blocks, the causal loop
    bounds skip the masked tile, the backward's two passes each run over two blocks."""
    _compare(normalization, True, (2, 32, 2, 16), blocks=16)


def test_unmasked_attention_with_padded_length_and_width_matches():
    """No mask (the MLM), L = 24 and Dh = 12: padded to 32 and 16, the padded keys masked (each
    would otherwise get σ(0 − ln 24)) and the bias the real length's; larger logits. (The other
    normalisations share the masking, `_tile_logits`; one case keeps the CPU suite short.)"""
    _compare("sigmoid_per_query_bias", False, (1, 24, 2, 12), blocks=16, scale_inputs=3.0)


def test_refusals():
    q = jnp.zeros((1, 16, 1, 16))
    with pytest.raises(ValueError, match="clipped_softmax"):
        flash_attention.flash_attention(q, q, q, normalization="clipped_softmax",
                                        logit_scale=1.0, causal=True)
    assert not flash_attention.supported("softmax", 512) and flash_attention.supported("softmax",
                                                                                       12)
    cfg = BlockConfig(d_model=32, num_heads=2, d_ff=32, causal=True, attention_impl="flash")
    with pytest.raises(ValueError, match="'flash' takes no padding mask"):
        flash_attention.core(q, q, q, cfg, 0.25, jnp.ones((1, 16), bool), None)
    for bad in ({"attention_normalization": "clipped_softmax"}, {"local_chunk": 4},
                {"head_dim": 512}):
        with pytest.raises(ConfigError, match="^model.attention_impl: 'flash' computes"):
            cfg.replace(**bad)
    with pytest.raises(ConfigError, match="^model.attention_impl: 'flash' computes"):
        ModelSpec(attention_impl="flash", attention_normalization="clipped_softmax")
    # what cuDNN's core refuses, the flash core takes: the gate, GQA, QK norm
    cfg.replace(attention_output_gate=True, num_kv_heads=1, attention="qk_layernorm",
                attention_normalization="softpick")


def _tiny(attention_impl: str):
    cfg = configs.module("train").get_config("smoke")
    cfg.model.d_model, cfg.model.num_heads, cfg.model.d_ff, cfg.model.num_layers = 32, 2, 32, 1
    cfg.data.seq_len, cfg.data.batch_size, cfg.steps, cfg.optim.warmup_steps = 16, 2, 20, 2
    cfg.model.attention_normalization = "softpick"
    cfg.model.attention_impl = attention_impl
    return train_config_from_mapping(cfg)[0]


def test_twenty_training_steps_match_the_xla_core():
    """A one-layer causal softpick LM from the same init: the losses of 20 AdamW steps with the
    flash core stay within float32 rounding of the XLA core's (measured: 2e-7 relative)."""
    from anisotropy_jax import data as data_lib
    from anisotropy_jax.studies import training
    from anisotropy_jax.studies.training import loop

    assert training.abstract_state(_tiny("flash"))[1].config.block.attention_impl == "flash"
    init = loop.compile_run(_tiny("xla")).init  # `init` takes the plain path: same parameters
    losses = {}
    for impl in ("xla", "flash"):
        config = _tiny(impl)
        fns, stream, state = loop.compile_run(config), data_lib.BatchIterator(config.data), init()
        losses[impl] = []
        for step in range(config.steps):
            state, metrics = fns.step(state, jax.device_put(stream.batch_at(step),
                                                            fns.batch_sharded))
            losses[impl].append(float(metrics["loss"]))
    np.testing.assert_allclose(losses["flash"], losses["xla"], rtol=1e-5)
    assert losses["xla"][-1] < losses["xla"][0]


def test_every_block_of_every_program_lies_inside_its_array(monkeypatch):
    """Each BlockSpec's index map, at every grid point, addresses a block inside its array.
    Interpret mode clamps an out-of-bounds block to the array's end, so the comparisons above
    cannot see one (a whole-sequence block at block index i > 0 read past the end on a GPU)."""
    calls = []
    real = flash_attention.pl.pallas_call

    def recording(kernel, *, grid, in_specs, out_specs, out_shape, **kwargs):
        calls.append((grid, in_specs, out_specs, out_shape))
        return real(kernel, grid=grid, in_specs=in_specs, out_specs=out_specs,
                    out_shape=out_shape, **kwargs)

    monkeypatch.setattr(flash_attention.pl, "pallas_call", recording)
    q = jnp.ones((2, 64, 2, 16))
    jax.grad(lambda q: flash_attention.flash_attention(
        q, q, q, normalization="softmax", logit_scale=0.25, causal=True, precision=HIGHEST,
        interpret=True, block_q=16, block_k=16, block_backward=16).sum())(q)
    assert len(calls) == 2  # the forward and the backward
    for grid, in_specs, out_specs, out_shape in calls:
        shapes = [x.shape for x in (q,) * 3] if len(in_specs) == 3 else [q.shape] * 4 + [
            (2, 2, 64)] * 2
        for specs, arrays in ((in_specs, shapes), (out_specs, [s.shape for s in out_shape])):
            for spec, shape in zip(specs, arrays):
                block = [1 if b is None else b for b in spec.block_shape]
                for point in np.ndindex(*grid):
                    index = spec.index_map(*point)
                    for i, b, n in zip(index, block, shape):
                        assert 0 <= int(i) * b and (int(i) + 1) * b <= n, (spec, point, shape)
