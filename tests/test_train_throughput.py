"""benchmarks/train_throughput.py :smoke on the CPU (JAX loop async and sync, PyTorch eager), the
PyTorch peer computes the JAX model's loss from the same parameters, and the training attention
core 'dot_product' (jax.nn.dot_product_attention) has the XLA core's gradients."""
import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _bench_config(variant):
    spec = importlib.util.spec_from_file_location(
        "tt_config", ROOT / "benchmarks" / "configs" / "train_throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(variant)


def test_smoke_benchmark_reports_rates_and_ratios():
    from benchmarks import train_throughput
    result = train_throughput.run_benchmark(_bench_config("smoke"), log=lambda *_: None)
    out = result["precisions"]["highest"]
    for name in ("jax_xla_async", "jax_xla_sync", "torch_eager"):
        row = out["variants"][name]
        assert row["tokens_per_s"] > 0 and row["ms_per_step"] > 0 and row["mfu_of_matmul_rate"] > 0
        assert 0 < row["cpu_s_per_step"] and len(row["all_cpu_s_per_step"]) == len(
            row["all_s_per_step"])
    assert out["ratios"]["jax_best"] == "jax_xla_async" and "over_torch_eager" in out["ratios"]
    assert out["ratios"]["over_torch_eager_cpu_time"] > 0
    # What `train` runs here ('auto' on the CPU: the XLA core) is the row timed.
    assert out["auto_attention_core"] == "xla" and out["ratios"]["train_step"] == "jax_xla_async"


def test_each_attention_core_is_timed_once_with_the_configs_own_field():
    from benchmarks import train_throughput
    c = _bench_config("smoke")
    c.jax_attention = ("auto", "xla", "dot_product")
    timed = train_throughput._attention_configs(c, "highest")
    assert [t.model.attention_impl for t in timed] == ["xla", "dot_product"]  # 'auto' is 'xla'
    assert all(t.model.precision == "highest" for t in timed)


def test_torch_peer_computes_the_same_loss():
    torch = pytest.importorskip("torch")
    from anisotropy_jax import data as data_lib
    from anisotropy_jax.studies.training import loop
    from benchmarks import train_throughput, train_torch
    config = train_throughput.train_config(_bench_config("smoke"), "highest")
    fns = loop.compile_run(config)
    state = fns.init()
    batch = data_lib.BatchIterator(config.data).batch_at(0)
    jax_loss = float(fns.eval(state["params"], jax.device_put(batch, fns.batch_sharded)))
    model, _ = train_torch.build(config, "eager", "highest", "cpu")
    train_torch.load_jax_params(model, jax.device_get(state["params"]))
    loss = train_torch.Loss(model, "highest", "cpu")(torch.from_numpy(batch["inputs"]).long(),
                                                       torch.from_numpy(batch["targets"]).long())
    assert float(loss) == pytest.approx(jax_loss, rel=1e-5)


def test_dot_product_core_has_the_xla_cores_gradients():
    from anisotropy_jax.config import BlockConfig
    from anisotropy_jax.models.attention import dot_product_core, xla_core
    cfg = BlockConfig(d_model=32, num_heads=4, d_ff=32, causal=True)
    q, k, v = (jax.random.normal(key, (2, 16, 4, 8)) for key in
               jax.random.split(jax.random.key(0), 3))

    def loss(core, q, k, v):
        out, _ = core(q, k, v, cfg, None)
        return jnp.sum(jnp.sin(out))

    for argnum in range(3):
        g_xla = jax.grad(lambda *a: loss(xla_core, *a), argnum)(q, k, v)
        g_dot = jax.grad(lambda *a: loss(dot_product_core, *a), argnum)(q, k, v)
        np.testing.assert_allclose(g_dot, g_xla, atol=1e-5, rtol=1e-5)


@pytest.mark.default_emitters  # K steps per dispatch against single steps, bit for bit
def test_steps_per_dispatch_equal_single_steps():
    """The benchmark's 'scanK' loop (K steps in one lax.scan) makes the same updates as K calls
    of the loop's step."""
    from anisotropy_jax import data as data_lib
    from anisotropy_jax.studies.training import loop
    from benchmarks import train_throughput
    config = train_throughput.train_config(_bench_config("smoke"), "highest")
    fns = loop.compile_run(config)
    stream = data_lib.BatchIterator(config.data)
    batches = [jax.device_put(stream.batch_at(i), fns.batch_sharded) for i in range(3)]
    state = fns.init()
    losses = []
    for batch in batches:
        state, metrics = fns.step(state, batch)
        losses.append(float(metrics["loss"]))
    scanned, metrics = train_throughput._multi_step(fns.step, 3)(
        fns.init(), jax.tree.map(lambda *xs: jnp.stack(xs), *batches))
    np.testing.assert_allclose(np.asarray(metrics["loss"]), losses, rtol=1e-6)
    for a, b in zip(jax.tree.leaves(scanned["params"]), jax.tree.leaves(state["params"])):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
