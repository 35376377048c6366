"""The normalisation grid (anisotropy_jax/studies/normalizations): its :smoke run end to end (the
attention statistics of the weights each model used, one shared analysis program), the summary
over seeds against scipy, resume, its refusals, and the extreme-token metrics the dynamics
analysis adds, against float64 loops."""
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from anisotropy_jax import data, metrics, results
from anisotropy_jax.config import ConfigError
from anisotropy_jax.configs import normalizations as normalization_settings
from anisotropy_jax.models.attention import NORMALIZATIONS, attention_mask
from anisotropy_jax.protocol import SILENT
from anisotropy_jax.results import Provenance
from anisotropy_jax.metrics.used_attention import used_weight_statistics
from anisotropy_jax.models.transformer import Transformer
from anisotropy_jax.studies import training
from anisotropy_jax.studies.train import analysis
from anisotropy_jax.studies.train.analysis import _hidden_metrics, sink_metrics
from anisotropy_jax.studies.normalizations import STUDY, grid as grid_lib
from anisotropy_jax.studies.report import compression

# The grid's own list restricted to what models/attention.py has (softmax always).
NAMES = tuple(n for n in ("softmax", "sigmoid") if n in NORMALIZATIONS)


def _smoke(workdir):
    config = normalization_settings.get_config("smoke")
    config.normalizations = NAMES
    return STUDY.validate(config, workdir)


@pytest.fixture(scope="module")
def smoke_grid(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("grid")
    plan = _smoke(workdir)
    programs = analysis._probe_metrics._cache_size()
    result = STUDY.run(plan, SILENT)
    programs = analysis._probe_metrics._cache_size() - programs  # analysis programs compiled
    doc = STUDY.write(result, workdir, Provenance())
    return plan, workdir, doc, programs


def test_smoke_grid_writes_every_run_and_the_summary_over_seeds(smoke_grid):
    plan, workdir, doc, _ = smoke_grid
    on_disk = json.loads((workdir / "results.json").read_text())
    assert on_disk["cells"].keys() == {"shakespeare", "bigram_backcopy"}
    assert (workdir / "results.md").is_file() and (workdir / "figures/normalizations.png").is_file()
    t = stats.t.ppf(0.975, 1)
    for dataset, by_norm in on_disk["cells"].items():
        assert tuple(by_norm) == NAMES
        for norm, cell in by_norm.items():
            for seed in plan.grid.seeds:
                run = json.loads((grid_lib.run_dir(workdir, dataset, norm, seed)
                                  / grid_lib.RUN_FILE).read_text())
                assert run["steps"] == [0, 1, 2, 4, 8]
                assert all(len(v) == len(run["steps"]) for v in run["series"].values())
                # the last block's spectrum (Li et al.'s compression verdict reads it): finite,
                # RankMe within [1, min(N, D)] = [1, 32] (4 × 16 tokens of width 32)
                assert np.all(np.isfinite(run["series"]["alpha_req_last"]))
                assert all(1 <= v <= 32 for v in run["series"]["rankme_last"])
                evals = [r["val_loss"] for r in map(json.loads, (grid_lib.run_dir(
                    workdir, dataset, norm, seed) / "eval.jsonl").read_text().splitlines())]
                assert run["series"]["val_loss"] == pytest.approx(evals)
            for name in grid_lib.METRICS:
                values = np.array(cell[name]["per_seed"])
                half = t * values.std(ddof=1) / math.sqrt(len(values))
                assert cell[name]["mean"] == pytest.approx(values.mean())
                assert cell[name]["low"] == pytest.approx(values.mean() - half)
            assert 0 <= cell["sink_rate"]["mean"] <= 1 and cell["massive_top_ratio"]["mean"] >= 1
            mass = cell["attention_mass"]["per_seed"]
            if norm == "softmax":
                assert mass == pytest.approx([1.0, 1.0])
            else:
                assert max(mass) < 0.99  # sigmoid: rows need not sum to one
            assert cell["attention_zero_mass_share"]["per_seed"] == [0.0, 0.0]
    floor = on_disk["cells"]["bigram_backcopy"]["softmax"]["loss_floor"]
    configs = [plan.grid.train_config("bigram_backcopy", "softmax", s) for s in plan.grid.seeds]
    streams = [data.BatchIterator(c.data) for c in configs]
    expected = np.mean([s.loss_floor(s.validation_batch(c.eval_batch_size))
                        for s, c in zip(streams, configs)])
    assert floor == pytest.approx(expected) and 0 < floor < math.log(64)
    assert on_disk["cells"]["shakespeare"]["softmax"]["loss_floor"] is None
    assert "bigram_backcopy" in STUDY.format_report(on_disk, workdir)
    # Li et al.'s compression verdict reads the softmax runs of both datasets from this folder
    byte = compression.byte_runs(workdir)
    assert len(byte) == 2 * len(plan.grid.seeds)
    assert all(len(r["series"]["rankme_last"]) == len(r["steps"]) for r in byte)


def test_the_grid_measures_the_weights_the_model_used(smoke_grid):
    """A sigmoid model's entropy, max, agreement and mass in the analysis are those of its
    attention weights (metrics.used_attention), not of the softmax of its logits; the four cells
    shared one analysis program per attention kind (softmax, the others)."""
    plan = smoke_grid[0]
    config = plan.grid.train_config("bigram_backcopy", "sigmoid", 0)
    tcfg, stream = config.transformer_config(), data.BatchIterator(config.data)
    tokens = analysis.analysis_tokens(stream, plan.grid.analysis.batch_size,
                                      plan.grid.analysis.seed)
    analyse = analysis._cached_analysis_fn(tcfg, tuple(int(i) for i in stream.used_token_ids()))
    # Random weights (any will do), placed as the analysis places a checkpoint's: the grid's
    # compiled program runs them.
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    rng = np.random.default_rng(5)
    variables = jax.tree.map(lambda s: jax.device_put(rng.normal(0, 0.3, s.shape).astype(s.dtype),
                                                      device),
                             training.abstract_state(config)[0]["params"])
    out = jax.device_get(analyse(variables, tokens))
    heads = out["heads"]
    _, probes = Transformer(tcfg, with_head=False).apply(variables, tokens)
    # the last block's spectrum: of its output's B·L tokens, as metrics.rankme / alpha_req define
    last = jnp.asarray(probes["blocks"][-1]["resid_post"])
    assert out["last_block"]["rankme"] == pytest.approx(float(metrics.rankme(last)), rel=1e-4)
    assert out["last_block"]["alpha_req"] == pytest.approx(float(metrics.alpha_req(last)),
                                                           rel=1e-3, abs=1e-3)
    mask = attention_mask(tokens.shape[1], True, None)
    for layer, block in enumerate(probes["blocks"]):
        used = used_weight_statistics(block["attn_weights"], mask)
        for name, key in (("attention_entropy_normalized", "entropy_normalized"),
                          ("attention_max", "max"), ("attention_mass", "mass"),
                          ("attention_query_agreement", "query_agreement")):
            np.testing.assert_allclose(heads[name][layer], used[key], rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name}, layer {layer}")
        assert np.all(np.asarray(used["mass"]) < 0.99)  # not softmax: its rows sum to one
    assert smoke_grid[3] <= 2  # four cells, two programs: softmax, sigmoid


def test_a_workdir_of_the_older_sigmoid_is_refused(smoke_grid, tmp_path):
    """A finished run that an older version wrote under sigmoid/ (the per-query bias, as its
    grid_run.json says under today's name) is not taken for the paper's sigmoid."""
    plan, workdir, _, _ = smoke_grid
    path = grid_lib.run_dir(tmp_path, "shakespeare", "sigmoid", 0)
    path.mkdir(parents=True)
    doc = json.loads((grid_lib.run_dir(workdir, "shakespeare", "sigmoid", 0)
                      / grid_lib.RUN_FILE).read_text())
    del doc["provenance"]  # as an older version wrote it
    (path / grid_lib.RUN_FILE).write_text(json.dumps(doc))
    assert results.read_results(path / grid_lib.RUN_FILE)["normalization"] == \
        "sigmoid_per_query_bias"
    with pytest.raises(ConfigError, match="sigmoid_per_query_bias.*another --workdir"):
        _smoke(tmp_path)


def test_a_finished_grid_is_not_trained_again(smoke_grid):
    """…and a finished run written before a metric of METRICS existed (here the last block's
    spectrum) is analysed again from its checkpoints, not trained again."""
    plan, workdir, doc, _ = smoke_grid
    run_file = grid_lib.run_dir(workdir, "shakespeare", "softmax", 0) / grid_lib.RUN_FILE
    older = grid_lib.run_dir(workdir, "shakespeare", "softmax", 1)
    saved = json.loads((older / grid_lib.RUN_FILE).read_text())
    stale = {**saved, "series": {k: v for k, v in saved["series"].items()
                                 if k not in ("rankme_last", "alpha_req_last")}}
    (older / grid_lib.RUN_FILE).write_text(json.dumps(stale))
    before, log = run_file.stat().st_mtime_ns, (older / "metrics.jsonl").read_text()
    again = STUDY.run(plan, SILENT)
    assert run_file.stat().st_mtime_ns == before
    assert (older / "metrics.jsonl").read_text() == log  # not trained
    assert json.loads((older / grid_lib.RUN_FILE).read_text())["series"] == saved["series"]
    assert again["cells"]["shakespeare"]["softmax"] == doc["cells"]["shakespeare"]["softmax"]


def test_validate_refuses_unknown_normalisations_and_datasets(tmp_path):
    config = normalization_settings.get_config("smoke")
    config.normalizations = ("softmax", "no_such_normalisation")
    with pytest.raises(ConfigError, match="normalizations"):
        STUDY.validate(config, tmp_path)
    config = normalization_settings.get_config("smoke")
    config.datasets = ("wikipedia",)
    with pytest.raises(ConfigError, match="datasets"):
        STUDY.validate(config, tmp_path)
    for variant in normalization_settings.VARIANTS:  # every variant is a valid grid config
        normalization_settings.get_config(variant)


def test_sink_metrics_match_a_float64_loop():
    rng = np.random.default_rng(0)
    b, h, length = 5, 3, 7
    logits = rng.normal(size=(b, h, length, length)) * 3
    logits[:, 0, :, 0] += 4.0  # head 0 sinks on key 0
    mask = np.tril(np.ones((length, length), bool))
    weights = np.where(mask, np.exp(logits), 0.0)
    weights /= weights.sum(-1, keepdims=True)
    got = sink_metrics(jnp.asarray(weights, jnp.float32), causal=True)
    alpha0 = np.zeros((b, h))
    for i in range(b):
        for j in range(h):
            alpha0[i, j] = np.mean([weights[i, j, q, 0] for q in range(length)])  # key 0: all
    np.testing.assert_allclose(got["sink_score"], alpha0.mean(0), rtol=1e-5)
    np.testing.assert_allclose(got["sink_rate"], (alpha0 > 0.3).mean(0), rtol=1e-6)
    assert got["sink_rate"][0] == 1.0 and attention_mask(length, True, None) is not None


def test_hidden_state_extremes_match_a_float64_loop():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 6, 8))
    x[1, 0, 2] = 500.0  # one massive activation on the first token
    got = _hidden_metrics(jnp.asarray(x, jnp.float32))
    medians = [np.median(np.abs(x[i])) for i in range(3)]
    assert float(got["massive_top_ratio"]) == pytest.approx(500.0 / medians[1], rel=1e-5)
    kurt = [np.mean((s - s.mean()) ** 4) / np.mean((s - s.mean()) ** 2) ** 2
            for s in (x[i].ravel() for i in range(3))]
    assert float(got["kurtosis"]) == pytest.approx(np.mean(kurt), rel=1e-4)
    flat = x.reshape(-1, 8) - x.reshape(-1, 8).mean(0)
    unit = flat / np.linalg.norm(flat, axis=1, keepdims=True)
    n = len(unit)
    centred = (np.sum(unit @ unit.T) - n) / (n * (n - 1))
    assert float(got["centered_average_cosine"]) == pytest.approx(centred, abs=1e-5)
