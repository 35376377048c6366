"""The checkpoint series: a tiny training run of each objective exported as bert (mlm) / gpt2
(clm) directories gives our model's hidden states and head metrics exactly; the series analysis
(library and script) has one entry per checkpoint; bad series directories fail in one line
naming the folder, before anything is compiled."""
import functools
import json
import pathlib
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from anisotropy_jax import checkpointing
from anisotropy_jax.config import train_config_from_mapping
from anisotropy_jax.configs.series import SeriesConfig
from anisotropy_jax.metrics.intervention import DEFICIT_SHARES
from anisotropy_jax.models import registry
from anisotropy_jax.models.transformer import Transformer
from anisotropy_jax.studies import series, training
from anisotropy_jax.studies import train as dynamics
from anisotropy_jax.studies.pretrained import text as text_lib

ROOT = pathlib.Path(__file__).resolve().parent.parent
STEPS = [0, 1, 2, 4]  # log-spaced checkpoints of a 4-step run (checkpoint_every=0)
TEXT = "To be, or not to be: that is the question. Whether 'tis nobler — in the mind?"


def _train(objective, workdir, tie_embeddings=True):
    config = train_config_from_mapping({
        "objective": objective,
        "model": {"d_model": 16, "num_heads": 2, "d_ff": 32, "num_layers": 2,
                  "tie_embeddings": tie_embeddings},
        "data": {"seq_len": 16, "batch_size": 4, "chunk_len": 64}, "steps": 4,
        "checkpoint_every": 0, "optim": {"warmup_steps": 1}, "eval_batch_size": 2})[0]
    training.train(config, workdir)
    return config


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """runs(objective) → (TrainConfig, run workdir, exported series dir), trained on first use
    (so that a pytest-xdist worker trains only the objectives its tests need); "clm_untied" is a
    clm with an untied output projection."""
    cache = {}

    def get(objective):
        if objective not in cache:
            root = tmp_path_factory.mktemp(objective)
            config = _train(objective.split("_")[0], root / "run",
                            tie_embeddings=not objective.endswith("_untied"))
            written = series.export_training_run(root / "run", root / "series")
            assert [p.name for p in written] == [f"step_{s}" for s in STEPS]
            cache[objective] = (config, root / "run", root / "series")
        return cache[objective]

    return get


def _our_params(config, workdir, step):
    with checkpointing.manager(workdir / "checkpoints", read_only=True) as mngr:
        state, _ = checkpointing.restore(mngr, step, training.abstract_state(config)[0],
                                                  with_data=False)
    return jax.device_get(state["params"])


@functools.lru_cache(maxsize=2)
def _our_apply(tcfg):
    return jax.jit(lambda p, t: Transformer(tcfg, with_head=False).apply(p, t)[1])


@pytest.mark.default_emitters  # delta_agreement_key_term counts exact ties
@pytest.mark.parametrize("objective", ["mlm", "clm"])
def test_export_equals_our_model(runs, objective):
    config, workdir, series_dir = runs(objective)
    tokenizer = text_lib.load_tokenizer(series_dir / "step_0", 16)
    ids = tokenizer.encode(TEXT[:40]).ids[:16]
    assert ids == list(TEXT[:40].encode("utf-8"))[:16]  # the byte tokenizer: id = byte
    tokens = np.asarray([ids, ids[::-1]], np.int32)
    tcfg = config.transformer_config()
    per_layer = jax.vmap(functools.partial(dynamics.head_metrics, causal=tcfg.block.causal))
    for step in STEPS:
        loaded = registry.load(series_dir / f"step_{step}")
        assert loaded.hf_config["model_type"] == {"mlm": "bert", "clm": "gpt2"}[objective]
        theirs = np.asarray(loaded.family.hidden_states_fn(loaded.config)(
            loaded.params, tokens, np.zeros_like(tokens), np.ones(tokens.shape, bool)))
        probes = _our_apply(tcfg)(_our_params(config, workdir, step), tokens)
        ours = [probes["embeddings"]] + [b["resid_post"] for b in probes["blocks"]]
        ours = np.stack(ours + ([probes["final_hidden"]] if tcfg.final_norm else []))
        assert theirs.shape == ours.shape and theirs.dtype == np.float32
        np.testing.assert_allclose(theirs, ours, rtol=0, atol=1e-5)
        heads = series.analysis.head_fn(loaded.family, loaded.config)(loaded.params, tokens)
        stack = {n: jnp.stack([b[n] for b in probes["blocks"]])
                 for n in ("queries", "keys", "attn_logits")}
        reference = per_layer(stack["queries"], stack["keys"], stack["attn_logits"])
        reference.update(jax.vmap(functools.partial(
            dynamics.analysis.sink_metrics, causal=tcfg.block.causal))(
            jnp.stack([b["attn_weights"] for b in probes["blocks"]])))
        for name in dynamics.HEAD_METRICS:
            if name == "delta_agreement_matched_control":
                # argmax votes of the matched control flip with float32 rounding where α is
                # ill-conditioned; tests/test_intervention.py checks it against a float64 loop
                continue
            np.testing.assert_allclose(heads[name], reference[name], rtol=1e-4, atol=1e-5,
                                       err_msg=name)


@pytest.mark.parametrize("objective", ["mlm", "clm", "clm_untied"])
def test_exported_head_gives_the_training_logits(runs, objective):
    """The LM head (tied or untied, with its output bias) is exported: the exported checkpoint's
    logits equal our Transformer's (with_head=True) at every step."""
    config, workdir, series_dir = runs(objective)
    tcfg = config.transformer_config()
    assert tcfg.tie_embeddings == (objective != "clm_untied") and tcfg.output_bias
    ids = list(TEXT.encode("utf-8"))[:16]
    tokens = np.asarray([ids, ids[::-1]], np.int32)
    model = Transformer(tcfg, with_head=True)
    for step in STEPS:
        params = _our_params(config, workdir, step)
        bias = (params["params"]["output_bias"] if tcfg.tie_embeddings
                else params["params"]["output"]["bias"])
        if step == STEPS[-1]:  # trained: the bias moved from its zero init (dropping it shows)
            assert np.abs(np.asarray(bias)).max() > 1e-4
        want = np.asarray(model.apply(params, tokens)[0])
        got = series.export.exported_logits(series_dir / f"step_{step}", tokens)
        assert got.shape == want.shape == tokens.shape + (tcfg.vocab_size,)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    hf = json.loads((series_dir / "step_0" / "config.json").read_text())
    assert hf["lm_head"] == {"weight": "lm_head.weight", "bias": "lm_head.bias",
                             "tied": tcfg.tie_embeddings}
    assert hf["tie_word_embeddings"] == tcfg.tie_embeddings


def test_series_analysis_mlm(runs):
    config = SeriesConfig(series_dir=str(runs("mlm")[2]), num_sentences=6, batch_size=3,
                          num_pairs=100, head_batch_size=3, max_words=12)
    result = series.run(config)
    assert result.steps.tolist() == STEPS
    assert result.labels == ["embeddings", "layer_1", "layer_2"]
    assert all(v.shape == (4, 3) and np.isfinite(v).all() for v in result.layers.values())
    assert all(v.shape == (4, 2, 2) for v in result.heads.values())
    # A head's share of its entropy deficit is undefined (NaN, never inf) where attention is
    # nearly uniform (metrics.matched_control); every other head metric is finite.
    shares = set(DEFICIT_SHARES)
    assert all(np.isfinite(v).all() for n, v in result.heads.items() if n not in shares)
    assert all(not np.isinf(result.heads[n]).any() for n in shares)
    assert result.config.head_length == result.data["head_batch_shape"][1] >= 2
    assert set(result.embeddings) and all(v.shape == (4,) for v in result.embeddings.values())


def test_script_on_exported_clm(runs, tmp_path):
    series_dir = runs("clm")[2]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "series.py"),
         "--config=series:smoke",
         f"--config.series_dir={series_dir}", f"--workdir={tmp_path / 'out'}",
         "--config.num_sentences=6", "--config.batch_size=3", "--config.max_words=12"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads((tmp_path / "out" / "results.json").read_text())
    assert out["steps"] == STEPS and len(out["checkpoints"]) == 4
    assert out["state_labels"][-1] == "final_norm"
    assert all(len(v) == 4 for v in out["layers"].values())
    assert all(np.asarray(v).shape == (4, 2, 2) for v in out["heads"].values())
    assert (tmp_path / "out" / "figures" / "heads_vs_step.png").stat().st_size > 0
    bad = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "series.py"),
         "--config=series:smoke",
         f"--config.series_dir={tmp_path / 'missing'}", f"--workdir={tmp_path / 'bad'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1] == (
        f"error: series_dir: {tmp_path / 'missing'}: not a directory")


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_bad_series_dirs(runs, tmp_path):
    mlm, clm = runs("mlm")[2], runs("clm")[2]
    cases = {}
    (tmp_path / "empty").mkdir()
    cases["empty"] = tmp_path / "empty"
    cases["other"] = _copy(clm, tmp_path / "other" / "step_0").parent
    (cases["other"] / "notes").mkdir()
    cases["mixed"] = _copy(mlm / "step_0", tmp_path / "mixed" / "step_0").parent
    _copy(clm / "step_1", cases["mixed"] / "step1")
    cases["twice"] = _copy(clm / "step_1", tmp_path / "twice" / "step_1").parent
    _copy(clm / "step_1", cases["twice"] / "1")
    cases["truncated"] = _copy(clm / "step_2", tmp_path / "truncated" / "checkpoint-2").parent
    weights = cases["truncated"] / "checkpoint-2" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    cases["no_config"] = _copy(clm / "step_4", tmp_path / "no_config" / "4").parent
    (cases["no_config"] / "4" / "config.json").unlink()
    expected = {"empty": "empty: no checkpoint folders", "other": "other/notes: not a checkpoint",
                "mixed": "mixed/step1: model_type 'gpt2'", "twice": "already given by",
                "truncated": "checkpoint-2/model.safetensors: cannot read",
                "no_config": "no_config/4: missing config.json"}
    for name, path in cases.items():
        with pytest.raises(series.SeriesError) as error:
            series.check(path)
        message = str(error.value)
        assert message.startswith("series_dir: ") and "\n" not in message, message
        assert expected[name] in message, message
    assert [series.step_of(n) for n in ("step_3", "step-3", "step3", "checkpoint-3", "3",
                                        "steps_3", "main")] == [3, 3, 3, 3, 3, None, None]
