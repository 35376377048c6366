"""The embedding-isotropy study (anisotropy_jax/studies/embeddings, docs/EMBEDDINGS.md): the BPE
tokenizer, a tiny run checked against direct computations and closed forms, the script end to
end, and one-line config errors."""
import json
import math
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from anisotropy_jax import config, corpus, metrics
from anisotropy_jax.configs.embeddings import EmbeddingsConfig
from anisotropy_jax.metrics import embedding_isotropy as ei
from anisotropy_jax.models import transformer
from anisotropy_jax.studies import embeddings
from anisotropy_jax.studies.embeddings import report, tokens
from anisotropy_jax.studies.report import compression

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "experiments" / "embeddings.py"
CONFIG = ROOT / "anisotropy_jax" / "configs" / "embeddings.py"
# Smaller than :smoke (one width, 6 steps): the in-process run.
TINY = dict(vocab_size=300, corpus_chars=120_000, chunk_len=2048, widths=(16,), head_dim=8,
            num_layers=1, seq_len=16, batch_size=4, steps=6, checkpoint_steps=(0, 6),
            eval_batches=1, seeds=(0, 1),
            optim=config.OptimConfig(learning_rate=1e-2, warmup_steps=2))


@pytest.fixture(scope="module")
def tiny():
    cfg = EmbeddingsConfig(**TINY)
    return cfg, embeddings.run(cfg)


def test_tokenizer_is_deterministic_lossless_and_of_the_requested_size():
    text = corpus.shakespeare_text()[:60_000]
    chunks = [text[i:i + 2048] for i in range(0, len(text), 2048)]
    first, second = (tokens.train_tokenizer(chunks, 300) for _ in range(2))
    assert first.get_vocab_size() == 300
    assert first.to_str() == second.to_str()
    ids = tokens.encode(first, chunks[:3])
    assert ids.dtype == np.int32 and ids.max() < 300
    assert first.decode(ids.tolist()) == "".join(chunks[:3])  # byte-level BPE loses nothing
    assert len(ids) < len("".join(chunks[:3]))  # merges shorten the text
    with pytest.raises(config.ConfigError, match=r"^vocab_size: .* only \d+ BPE entries"):
        tokens.train_tokenizer(chunks[:1], 5000)


def test_validation_text_never_reaches_the_tokenizer():
    cfg = EmbeddingsConfig(**TINY)
    train, val = tokens.corpus_chunks(cfg)
    text = corpus.shakespeare_text()[:cfg.corpus_chars]
    assert len(train) + len(val) == len(text) // cfg.chunk_len and len(val) >= 1
    assert not set(train) & set(val)


def test_run_is_finite_has_the_documented_keys_and_learns(tiny):
    cfg, result = tiny
    conventions = ("one_sign", "sign_free")
    keys = {f"{m}_{v}_{c}" for m in embeddings.MATRICES + embeddings.GAIN_KEYS
            for v in ("raw", "centered") for c in conventions}
    keys |= {f"{m}_unitnorm_{v}_{c}" for m in embeddings.MATRICES for v in ("raw", "centered")
             for c in conventions}
    keys |= {f"{m}_gaussian_raw_{c}" for m in embeddings.MATRICES for c in conventions}
    assert set(result.isotropy) == keys
    shape = (len(cfg.widths), len(cfg.seeds), len(cfg.measured_steps))
    assert set(result.last_block) == {"rankme", "alpha_req"}  # one value per checkpoint
    for name, value in {**result.isotropy, **result.stats, "val": result.val_loss,
                        **result.last_block}.items():
        assert value.shape == shape and np.all(np.isfinite(value)), name
    assert np.all((result.last_block["rankme"] >= 1) & (result.last_block["rankme"] <= 16))
    assert result.projections["input_centered"].shape == (1, 2, cfg.vocab_size, 2)
    assert result.train_loss.shape == (1, 2, cfg.steps)
    # Min and max of the sign-free convention run over a superset of the one-sign directions.
    for m in embeddings.MATRICES + embeddings.GAIN_KEYS:
        for v in ("raw", "centered", "unitnorm_raw", "gaussian_raw"):
            if f"{m}_{v}_one_sign" not in result.isotropy:
                continue
            assert np.all(result.isotropy[f"{m}_{v}_sign_free"]
                          <= result.isotropy[f"{m}_{v}_one_sign"] * (1 + 1e-6))
    # At init the logits are ≈ 0 (N(0, 0.02²) rows): the loss is ln V; training lowers it.
    np.testing.assert_allclose(result.val_loss[..., 0], math.log(cfg.vocab_size), atol=0.05)
    assert np.all(result.val_loss[..., -1] < result.val_loss[..., 0] - 0.05)


def test_step_zero_is_the_metric_of_the_init_params(tiny):
    cfg, result = tiny
    batch = tokens.validation_batches(cfg, tokens.prepare(cfg).val_ids)[0]
    for j, seed in enumerate(cfg.seeds):
        model_cfg = embeddings.transformer_config(cfg, cfg.widths[0])
        params = jax.jit(transformer.Transformer(model_cfg).init)(
            jax.random.key(seed), jnp.zeros((1, cfg.seq_len), jnp.int32))
        mats = transformer.embedding_matrices(params, model_cfg)
        direct = ei.embedding_isotropy(mats["input"], mats["output"], mats["final_norm_scale"])
        for key, value in direct.items():
            np.testing.assert_allclose(result.isotropy[key][0, j, 0], value, rtol=1e-6,
                                       err_msg=key)
        # The final LayerNorm's gain is 1 at init: the scaled output matrix is the output one.
        for v in ("raw_one_sign", "centered_sign_free"):
            for scaled in ("output_scaled",) + embeddings.GAIN_KEYS[:2]:
                assert result.isotropy[f"{scaled}_{v}"][0, j, 0] == \
                    result.isotropy[f"output_{v}"][0, j, 0]
        # The last block's spectrum: of the final LayerNorm's input on the first validation batch
        last = transformer.Transformer(model_cfg).apply(params, batch["inputs"])[1]["final_norm_in"]
        assert result.last_block["rankme"][0, j, 0] == pytest.approx(
            float(metrics.rankme(last)), rel=1e-4)
        assert result.last_block["alpha_req"][0, j, 0] == pytest.approx(
            float(metrics.alpha_req(last)), rel=1e-3, abs=1e-3)
    assert result.isotropy["input_raw_one_sign"][0, 0, 0] != \
        result.isotropy["input_raw_one_sign"][0, 1, 0]  # seeds differ


def test_svd_projection_of_a_rank_two_matrix_keeps_every_pairwise_distance():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((60, 2)) @ rng.standard_normal((2, 9))  # rank 2, not centred
    dist = np.linalg.norm(w[:, None] - w[None], axis=-1)
    with jax.enable_x64(True):
        for center in (False, True):
            proj = np.asarray(ei.svd_projection_2d(jnp.asarray(w), center=center))
            np.testing.assert_allclose(np.linalg.norm(proj[:, None] - proj[None], axis=-1), dist,
                                       rtol=1e-9, atol=1e-9, err_msg=f"center={center}")
            if not center:  # the rows lie in the projection's plane: their norms survive too
                np.testing.assert_allclose(np.linalg.norm(proj, axis=1),
                                           np.linalg.norm(w, axis=1), rtol=1e-9)


def test_unit_norm_control_is_scale_free_and_the_mean_gain_control_is_a_rescaling():
    rng = np.random.default_rng(1)
    w_in, w_out = rng.standard_normal((200, 8)) * 0.3, rng.standard_normal((200, 8)) * 0.3 + 0.2
    gain = rng.uniform(0.5, 2.0, 8).astype(np.float32)
    base = embeddings.train.measure(w_in.astype(np.float32), w_out.astype(np.float32), gain)[0]
    big = embeddings.train.measure((3 * w_in).astype(np.float32), (3 * w_out).astype(np.float32),
                                   gain)[0]
    for m in embeddings.MATRICES:
        np.testing.assert_allclose(big[f"{m}_unitnorm_raw_sign_free"],
                                   base[f"{m}_unitnorm_raw_sign_free"], rtol=1e-5, err_msg=m)
        assert big[f"{m}_raw_sign_free"] < base[f"{m}_raw_sign_free"] - 0.01  # I is not
    mean_gain = ei.partition_isotropy_conventions(w_out.astype(np.float32) * gain.mean())
    np.testing.assert_allclose(base["output_meangain_raw_one_sign"], mean_gain["one_sign"],
                               rtol=1e-6)
    # The gain's controls are metrics.embedding_isotropy.gain_controls of the fixed key.
    controls = ei.gain_controls(w_out.astype(np.float32), gain,
                                jax.random.key(embeddings.train.ROW_KEY), embeddings.train.ROW_DRAWS)
    stats = embeddings.train.measure(w_in.astype(np.float32), w_out.astype(np.float32), gain)[1]
    np.testing.assert_allclose(stats["final_gain_frobenius_ratio"],
                               np.linalg.norm(w_out * gain) / np.linalg.norm(w_out), rtol=1e-5)
    for key in ("output_equalnorm_centered_sign_free", "output_rowdir_raw_sign_free"):
        np.testing.assert_allclose(base[key], controls[key], rtol=1e-6, err_msg=key)


def test_gain_direction_is_the_per_seed_difference_with_a_t_interval():
    from scipy import stats

    rng = np.random.default_rng(2)
    iso = {f"output_{m}_{v}_sign_free": rng.uniform(0.2, 0.9, (2, 5, 3))
           for m in ("scaled", "equalnorm") for v in ("raw", "centered")}
    got = report.gain_direction(iso)
    for v in ("raw", "centered"):
        for w in range(2):
            for c in range(3):
                diff = [iso[f"output_scaled_{v}_sign_free"][w, s, c]
                        - iso[f"output_equalnorm_{v}_sign_free"][w, s, c] for s in range(5)]
                low, high = stats.t.interval(0.95, 4, loc=np.mean(diff), scale=stats.sem(diff))
                np.testing.assert_allclose(got[v]["per_seed"][w, :, c], diff, rtol=1e-12)
                np.testing.assert_allclose([got[v]["low"][w, c], got[v]["high"][w, c]],
                                           [low, high], rtol=1e-10)
                assert got[v]["positive"][w, c] == sum(d > 0 for d in diff)
    one_seed = report.gain_direction({k: v[:, :1] for k, v in iso.items()})
    assert one_seed["raw"]["low"] is None and one_seed["raw"]["n"] == 1


def test_tables_and_report_read_the_document(tiny):
    cfg, result = tiny
    doc = json.loads(json.dumps(report.document(result, {}, None)))
    table = report.format_table(doc)
    assert table.count("\n") == 1 + 4 * 2  # header, rule, 3 matrices + the control × 2 steps
    assert f"| 16 | output × mean γ | {cfg.steps} |" in table
    assert "[" in table  # two seeds: mean [min, max]
    assert doc["train_loss"][0][0][0] is None and doc["train_loss"][0][0][1] > 0
    gain = report.format_gain_table(doc)
    assert gain.count("\n") == 1 + 2 and "| 16 | centered |" in gain and "of 2 |" in gain
    assert "The final gain's controls" in report.format_report(doc)


def _script(*args, tmp_path):
    env = dict(os.environ)  # the run's compilation cache (tests/conftest.py)
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_script_smoke_writes_results_and_figures(tmp_path):
    out = tmp_path / "run"
    proc = _script(f"--config={CONFIG}:smoke", f"--workdir={out}", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((out / "results.json").read_text())
    assert doc["widths"] == [16, 32] and doc["steps"] == [0, 4, 12]
    for name in ("rankme", "alpha_req"):  # (widths, seeds, checkpoints), finite
        assert np.isfinite(np.asarray(doc["last_block"][name], np.float64)).all()
        assert np.shape(doc["last_block"][name]) == (2, 1, 3)
    # Li et al.'s compression verdict reads its control from this folder (the smallest width)
    assert [len(r["series"]["rankme_last"]) for r in compression.bpe_runs(out)] == [3]
    assert "| 32 | output × γ | 12 |" in proc.stdout
    assert "[embeddings] D=32 seed=0 step 12" in proc.stdout
    for name in ("isotropy", "training", "svd_D16", "svd_D32"):
        assert (out / "figures" / f"{name}.png").stat().st_size > 1000, name
    assert json.loads((out / "tokenizer.json").read_text())["model"]["type"] == "BPE"
    with np.load(out / "results.npz") as f:
        assert f["proj__output_scaled_centered"].shape == (2, 3, 300, 2)


@pytest.mark.parametrize("flag, message", [
    ("--config.vocab_size=100", "error: vocab_size: must be an integer >= 257, got 100"),
    ("--config.widths=(20,)", "error: widths: [20] not divisible by head_dim 8"),
    ("--config.checkpoint_steps=(0, 99)", "error: checkpoint_steps: [99] beyond steps=12"),
])
def test_bad_config_is_one_line_before_compiling(tmp_path, flag, message):
    proc = _script(f"--config={CONFIG}:smoke", flag, f"--workdir={tmp_path / 'run'}",
                   tmp_path=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == message
    assert not (tmp_path / "run").exists()


def test_typed_config_names_the_field():
    with pytest.raises(config.ConfigError, match=r"^optim\.learning_rate: must be > 0$"):
        config.from_mapping(EmbeddingsConfig, {"optim": {"learning_rate": 0.0}})
    with pytest.raises(config.ConfigError, match=r"^seeds: has repeated values"):
        EmbeddingsConfig(seeds=(1, 1))
    assert EmbeddingsConfig(steps=7, checkpoint_steps=(3,)).measured_steps == (0, 3, 7)
