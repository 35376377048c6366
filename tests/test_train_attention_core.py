"""The training run's attention core (`model.attention_impl`): 'auto' resolves to cuDNN's fused
attention ('dot_product') only on a GPU at bf16 for softmax attention without the gate and a head
width cuDNN takes, to the Pallas flash core ('flash') on a GPU for the other normalisations it
computes, to 'xla' everywhere else (every CPU run); 'dot_product' trains as 'xla' does on the CPU
('flash': tests/test_flash_attention.py); 'pallas' and unknown cores are refused in one line
before anything compiles; a run
records the value asked for, and a run recorded before the field existed still resumes (the
default fills it: config.json, workdir.json, a report's stamp). Also the train step's one global
finite check."""
import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from anisotropy_jax import configs
from anisotropy_jax.config import (ATTENTION_IMPLS, PRECISIONS, AnalysisConfig, ConfigError,
                                   ModelSpec, TrainConfig, attention_core_note,
                                   resolve_attention_impl, train_config_from_mapping)
from anisotropy_jax.config.model import ATTENTION_NORMALIZATIONS, FLASH_NORMALIZATIONS
from anisotropy_jax.protocol import WORKDIR_FILE, workdir_record
from anisotropy_jax.studies import training
from anisotropy_jax.studies.training import logs, loop
from anisotropy_jax.studies.training.step import all_finite
from tests import processes

COMMAND = str(pathlib.Path(sys.executable).parent / "anisotropy-jax")


def _expected_core(backend, normalization, gate, precision, d_head):
    """The rule written out: cuDNN runs on GPUs, bf16/fp16 inputs only, softmax without the gate
    (BlockConfig's restrictions for 'dot_product'), head widths multiples of 8 up to 128; else
    on a GPU the flash kernels for every normalisation but the clipped softmax, heads up to 256
    wide, softmax at bf16 (where cuDNN does not take it) and at TF32 ('default', where flash was
    timed faster than XLA) but not at 'highest'; never a GPU core off GPU."""
    cudnn = (backend == "gpu" and precision == "bfloat16" and normalization == "softmax"
             and not gate and d_head % 8 == 0 and d_head <= 128)
    flash = (backend == "gpu" and normalization != "clipped_softmax" and d_head <= 256
             and (normalization != "softmax" or precision in ("bfloat16", "default")))
    return "dot_product" if cudnn else "flash" if flash else "xla"


def test_auto_resolves_to_cudnn_only_where_it_runs_and_an_explicit_core_stays():
    counts = {}
    for backend in ("cpu", "gpu", "tpu"):
        for normalization in ATTENTION_NORMALIZATIONS:
            for gate in (False, True):
                for precision in PRECISIONS:
                    for d_model, heads in ((64, 4), (48, 4), (256, 1), (512, 4)):  # Dh 16 12 256 128
                        spec = ModelSpec(d_model=d_model, num_heads=heads, d_ff=32,
                                         attention_normalization=normalization,
                                         attention_output_gate=gate, precision=precision)
                        want = _expected_core(backend, normalization, gate, precision,
                                              d_model // heads)
                        assert resolve_attention_impl(spec, backend) == want, spec
                        note = attention_core_note(spec, backend)
                        assert note.startswith(f"attention core: {want} (auto: ") and "\n" not in note
                        xla = dataclasses.replace(spec, attention_impl="xla")
                        assert resolve_attention_impl(xla, backend) == "xla"
                        if normalization == "softmax" and not gate:
                            dot = dataclasses.replace(spec, attention_impl="dot_product")
                            assert resolve_attention_impl(dot, backend) == "dot_product"
                        if normalization in FLASH_NORMALIZATIONS and d_model // heads <= 256:
                            flash = dataclasses.replace(spec, attention_impl="flash")
                            assert resolve_attention_impl(flash, backend) == "flash"
                        counts[want] = counts.get(want, 0) + 1
    assert sum(counts.values()) == 3 * len(ATTENTION_NORMALIZATIONS) * 2 * len(PRECISIONS) * 4
    assert counts["flash"] and counts["dot_product"] and counts["xla"]
    gpu_bf16 = ModelSpec(precision="bfloat16")
    assert attention_core_note(gpu_bf16, "gpu") == (
        "attention core: dot_product (auto: cuDNN fused attention on gpu)")
    assert attention_core_note(gpu_bf16, "cpu") == (
        "attention core: xla (auto: cuDNN's fused attention runs on GPUs only, not on cpu)")
    assert attention_core_note(ModelSpec(attention_impl="xla"), "gpu") == (
        "attention core: xla (model.attention_impl)")
    off_by_one = ModelSpec(attention_normalization="off_by_one", precision="default")
    assert attention_core_note(off_by_one, "gpu") == (
        "attention core: flash (auto: Pallas flash attention on gpu; not cuDNN's: the fused "
        "core is softmax "
        "without the output gate; attention_normalization='off_by_one', "
        "attention_output_gate=False)")
    assert resolve_attention_impl(off_by_one, "cpu") == "xla"
    assert attention_core_note(ModelSpec(precision="default"), "gpu").startswith(
        "attention core: flash (auto: Pallas flash attention on gpu; not cuDNN's: cuDNN's fused "
        "attention takes bfloat16 only; precision='default'")
    assert attention_core_note(ModelSpec(precision="highest"), "gpu") == (
        "attention core: xla (auto: cuDNN's fused attention takes bfloat16 only; "
        "precision='highest'; XLA's core for softmax at precision='highest': flash is untimed "
        "there)")
    assert ModelSpec().attention_impl == "auto"  # the default of every study that trains


def test_pallas_an_unknown_core_and_a_fused_core_with_another_normalisation_are_refused():
    assert "pallas" in ATTENTION_IMPLS  # a BlockConfig core, forward only
    with pytest.raises(ConfigError, match=r"^model.attention_impl: 'pallas' \(the fused Pallas "
                                          r"kernel\) computes no gradient; training takes one of "
                                          r"\('auto', 'xla', 'dot_product', 'flash'\)$"):
        ModelSpec(attention_impl="pallas")
    with pytest.raises(ConfigError, match="^model.attention_impl: unknown attention core 'cudnn'"):
        train_config_from_mapping({"model": {"attention_impl": "cudnn"}})
    for fused in ({"attention_normalization": "sigmoid"}, {"attention_output_gate": True}):
        with pytest.raises(ConfigError, match="^model.attention_impl: 'dot_product' computes "
                                              "softmax attention only"):
            ModelSpec(attention_impl="dot_product", **fused)
        # the GPU's other fused core (softmax with the gate at 'highest': XLA's)
        assert resolve_attention_impl(ModelSpec(precision="default", **fused), "gpu") == "flash"
        gpu_core = "xla" if "attention_output_gate" in fused else "flash"
        assert resolve_attention_impl(ModelSpec(precision="highest", **fused), "gpu") == gpu_core
        assert resolve_attention_impl(ModelSpec(precision="bfloat16", **fused), "gpu") == "flash"
        assert resolve_attention_impl(ModelSpec(**fused), "cpu") == "xla"
    clipped = ModelSpec(attention_normalization="clipped_softmax")
    assert resolve_attention_impl(clipped, "gpu") == "xla"
    with pytest.raises(ConfigError, match="^model.attention_impl: 'flash' computes"):
        dataclasses.replace(clipped, attention_impl="flash")


def _tiny(attention_impl):
    cfg = configs.module("train").get_config("smoke")
    cfg.model.d_model, cfg.model.num_heads, cfg.model.d_ff, cfg.model.num_layers = 32, 2, 32, 1
    cfg.data.seq_len, cfg.data.batch_size, cfg.steps, cfg.optim.warmup_steps = 16, 4, 3, 1
    cfg.model.attention_impl = attention_impl  # as --config.model.attention_impl=...
    return train_config_from_mapping(cfg)[0]


def test_dot_product_trains_as_the_xla_core_on_cpu_and_auto_is_xla_there():
    """`jax.nn.dot_product_attention` is XLA's own implementation on the CPU: a few steps from
    the same init give the same losses as the 'xla' core within float32 rounding."""
    from anisotropy_jax import data as data_lib

    assert jax.default_backend() == "cpu"
    assert training.abstract_state(_tiny("auto"))[1].config.block.attention_impl == "xla"
    init = loop.compile_run(_tiny("xla")).init  # the same parameters for either core
    losses = {}
    for impl in ("xla", "dot_product"):
        config = _tiny(impl)
        fns = loop.compile_run(config)
        assert training.abstract_state(config)[1].config.block.attention_impl == impl
        stream, state = data_lib.BatchIterator(config.data), init()
        losses[impl] = []
        for step in range(config.steps):
            state, metrics = fns.step(state, jax.device_put(stream.batch_at(step),
                                                            fns.batch_sharded))
            assert bool(metrics["params_finite"])
            losses[impl].append(float(metrics["loss"]))
    np.testing.assert_allclose(losses["dot_product"], losses["xla"], rtol=2e-6)
    assert losses["xla"][-1] < losses["xla"][0]
    # The analysis rebuilds the model with the 'xla' core, whatever the training core.
    assert _tiny("dot_product").transformer_config().block.attention_impl == "xla"


def test_a_run_records_what_was_asked_and_a_run_recorded_before_the_field_resumes(tmp_path):
    config = TrainConfig()
    logs.write_config(tmp_path, config, AnalysisConfig())
    saved = json.loads((tmp_path / logs.CONFIG_FILE).read_text())
    assert saved["train"]["model"]["attention_impl"] == "auto"
    del saved["train"]["model"]["attention_impl"]  # a run recorded before the field existed
    (tmp_path / logs.CONFIG_FILE).write_text(json.dumps(saved))
    logs.check_same_config(tmp_path, config)  # the default fills it: accepted
    explicit = dataclasses.replace(config, model=ModelSpec(attention_impl="xla"))
    with pytest.raises(ConfigError, match="^model.attention_impl: the workdir .* holds a run "
                                          "with model.attention_impl='auto'"):
        logs.check_same_config(tmp_path, explicit)


def test_a_report_resumes_a_training_study_recorded_before_the_field(tmp_path):
    from anisotropy_jax.configs.report import ReproduceConfig
    from anisotropy_jax.studies.report import runner

    config = ReproduceConfig(studies=("training",), training=((TrainConfig(), AnalysisConfig()),))
    stamp = runner._stamp(config, "training")
    old = json.loads(json.dumps(stamp))
    for train, _ in old[0]:
        del train["model"]["attention_impl"]
    run = runner.StudyRun("training", {"x": 1})
    (tmp_path / runner.STUDY_RUN_FILE).write_text(json.dumps(
        {"config": old, "run": dataclasses.asdict(run)}))
    assert runner._finished("training", tmp_path, stamp) == run


def test_the_workdir_guard_fills_a_field_the_record_lacks_with_its_default(tmp_path):
    """The command line end to end: a train workdir recorded before model.attention_impl
    existed is not refused (the config's own bad steps=0 is what stops it, after the guard);
    one recorded with another core is."""
    cfg = configs.module("train").get_config("smoke")
    cfg.steps = 0
    record = workdir_record("train", cfg)
    del record["config"]["model"]["attention_impl"]
    env = processes.one_device(dict(os.environ))
    args = [COMMAND, "train", "--config=train:smoke", "--config.steps=0"]
    for folder, recorded_core, error in (
            ("old", None, "error: steps: must be an integer >= 1, got 0"),
            ("other", "dot_product", f"error: --workdir: {tmp_path / 'other'} holds a `train` "
             'run of another config (model.attention_impl="dot_product" there, "auto" here); '
             f"use another --workdir, or delete {tmp_path / 'other'} to start again")):
        (tmp_path / folder).mkdir()
        if recorded_core:
            record["config"]["model"]["attention_impl"] = recorded_core
        (tmp_path / folder / WORKDIR_FILE).write_text(json.dumps(record))
        proc = subprocess.run([*args, f"--workdir={tmp_path / folder}"], env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and proc.stderr.strip() == error, proc.stderr[-2000:]


def test_script_refuses_a_bad_core_in_one_line_before_compiling(tmp_path):
    env = processes.one_device(dict(os.environ))
    proc = subprocess.run([COMMAND, "train", "--config=train:smoke", f"--workdir={tmp_path}/run",
                           "--config.model.attention_impl=pallas"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "error: model.attention_impl: 'pallas' (the fused Pallas kernel) computes no gradient; "
        "training takes one of ('auto', 'xla', 'dot_product', 'flash')"), proc.stderr[-2000:]
    assert not (tmp_path / "run").exists()  # nothing written, nothing compiled


def test_the_global_finite_check_matches_a_per_element_loop():
    rng = np.random.default_rng(0)
    check = jax.jit(all_finite)
    for trial in range(12):
        tree = {"a": rng.normal(size=(3, 5)).astype(np.float32),
                "b": [rng.normal(size=(7,)).astype(np.float32) * 1e37,  # finite, Σx² overflows
                      np.array(rng.normal(), np.float32)],
                "c": {"d": rng.normal(size=(2, 2, 2)).astype(np.float32)}}
        leaves = jax.tree.leaves(tree)
        if trial % 4:  # one non-finite element somewhere
            leaf = leaves[trial % len(leaves)]
            leaf.reshape(-1)[trial % leaf.size] = [np.inf, -np.inf, np.nan][trial % 3]
        want = all(bool(np.isfinite(x)) for leaf in leaves for x in np.asarray(leaf).reshape(-1))
        assert bool(check(jax.tree.map(jnp.asarray, tree))) is want, trial
