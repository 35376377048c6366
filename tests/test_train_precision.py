"""Mixed precision for training (model.precision='bfloat16'): bf16 matmul inputs with float32
master weights, optimiser state, softmax statistics, residual stream and loss; its `:smoke` loss
curve tracks float32's within a stated tolerance."""
import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from anisotropy_jax.config import train_config_from_mapping
from anisotropy_jax.studies import training

ROOT = pathlib.Path(__file__).resolve().parent.parent
# |Δ loss| in nats per byte between 'bfloat16' and 'highest' at every step of train:smoke,
# and of the validation loss at every checkpoint. Measured on the CPU (2 forced host devices, the
# tests' XLA flags; docs/benchmarks/train_throughput_cpu/agreement.json): at most 2.7e-3 (step 18; mean
# 1.9e-4), val 3.1e-4. The bound is 3.7x the largest step's and 0.4% of the run's 2.3-nat descent:
# bf16 rounds the matmul inputs to 8 significant bits (2^-9 ≈ 2e-3 relative), which moves each
# step's loss by about that fraction and no more, since the master weights stay float32.
LOSS_ATOL = 1e-2


def _config(precision, **overrides):
    spec = importlib.util.spec_from_file_location(
        "cfg", ROOT / "anisotropy_jax" / "configs" / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cfg = module.get_config("smoke")
    cfg.model.precision = precision
    for field, value in overrides.items():
        cfg[field] = value
    return train_config_from_mapping(cfg)[0]


def test_bfloat16_is_bf16_compute_on_float32_weights_and_softmax():
    dtypes = {}
    for precision in ("highest", "bfloat16"):
        abstract, model, _ = training.abstract_state(_config(precision))
        # master weights and AdamW moments stay float32 (the step counters are int32)
        assert {str(x.dtype) for x in jax.tree.leaves(abstract)} == {"float32", "int32"}
        logits, probes = jax.eval_shape(
            lambda p, model=model: model.apply(p, jnp.zeros((2, 32), jnp.int32)),
            abstract["params"])
        block = probes["blocks"][0]
        dtypes[precision] = {name: block[name].dtype for name in block} | {"logits": logits.dtype}
    bf16 = dtypes["bfloat16"]
    # the matmul inputs in bf16 ...
    assert bf16["queries"] == bf16["keys"] == bf16["values"] == jnp.bfloat16
    assert dtypes["highest"]["queries"] == jnp.float32
    # ... the attention logits and softmax weights (its statistics), the residual stream and the
    # output logits (the loss) in float32
    for name in ("attn_logits", "attn_weights", "resid_mid", "resid_post", "logits"):
        assert bf16[name] == jnp.float32, name


@pytest.fixture(scope="module")
def curves(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("precision")
    out = {}
    for precision in ("highest", "bfloat16"):
        training.train(_config(precision), tmp / precision)
        out[precision] = (np.array([r["loss"] for r in training.read_metrics(tmp / precision)]),
                          np.array([e["val_loss"] for e in training.read_evals(tmp / precision)]))
    return out


def test_bfloat16_loss_curve_tracks_float32_on_smoke(curves):
    (loss32, val32), (loss16, val16) = curves["highest"], curves["bfloat16"]
    assert len(loss16) == len(loss32) == 40
    np.testing.assert_allclose(loss16, loss32, rtol=0, atol=LOSS_ATOL)
    np.testing.assert_allclose(val16, val32, rtol=0, atol=LOSS_ATOL)
    assert not np.array_equal(loss16, loss32)  # the bf16 path ran
    assert loss16[-5:].mean() < loss16[:5].mean() - 1.0  # and learns as float32 does
