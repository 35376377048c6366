"""benchmarks/process_time.py and its PyTorch peer benchmarks/torch_loop_process.py: the phase
bookkeeping on synthetic runs, and the peer's metrics against a float64 numpy BERT layer."""
import json
import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import process_time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _record(side, cache, wall, chunks=(), variant=""):
    phases = [["start_imports_flags", 0.5]] + [[f"chunk {i + 1}", s] for i, s in enumerate(chunks)]
    return {"side": side, "cache": cache, "rc": 0, "wall_s": wall, "variant": variant,
            "phases": phases}


def test_phase_durations_fixed_cost_and_ratios_of_synthetic_runs():
    stamps = [["start_imports_flags", 100.5], ["setup", 100.625], ["chunk 1", 102.625],
              ["chunk 2", 103.625], ["json", 104.0]]
    phases = process_time.phase_durations(stamps, 100.0, 4.25)
    assert [name for name, _ in phases] == ["start_imports_flags", "setup", "chunk 1", "chunk 2",
                                            "json", "exit"]
    assert [s for _, s in phases] == pytest.approx([0.5, 0.125, 2.0, 1.0, 0.375, 0.25], abs=1e-9)
    ours = _record("ours", "warm", 6.0, chunks=(3.0, 1.0, 1.5, 1.0))
    assert process_time.fixed_seconds(ours) == pytest.approx(6.0 - 4 * 1.0)  # median of 2..
    assert process_time.fixed_seconds(_record("ours", "warm", 6.0, chunks=(3.0,))) is None
    runs = [ours, _record("torch", None, 9.0), _record("ours", "warm", 8.0, chunks=(1.0, 1.0)),
            _record("torch", None, 10.0), _record("baseline", "warm", 7.0), _record("torch", None,
                                                                                  14.0)]
    summary = process_time.summarize(runs)
    assert summary["ours/warm"]["wall_s_median"] == 7.0 and summary["torch"]["runs"] == 3
    assert summary["ours/warm"]["phase_s_median"]["start_imports_flags"] == 0.5
    ratios = summary["torch_over_ours_wall"]
    assert ratios["ours/warm"]["pairs"] == [1.5, 1.25] and ratios["baseline/warm"]["pairs"] == [2.0]


def _layer_norm(x):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12)


def _bert_layer_metrics(p, x_BxLxD, num_heads=12):
    """float64 BERT post-LN layer (exact GELU) and the three metrics: mean ‖y‖, the average
    cosine over all pairs of distinct tokens (explicit n×n Gram), attention entropy / ln L."""
    b, length, d = x_BxLxD.shape
    dh = d // num_heads

    def dense(h, name, group="attention"):
        q = p[group][name]
        return h @ q["kernel"].astype(np.float64) + q["bias"]

    def heads(h):
        return h.reshape(b, length, num_heads, dh).transpose(0, 2, 1, 3)

    q, k, v = (heads(dense(x_BxLxD, n)) for n in ("query", "key", "value"))
    logits = q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(b, length, d)
    h = _layer_norm(dense(context, "out") + x_BxLxD)
    pre = dense(h, "fc_in", "mlp")
    gelu = 0.5 * pre * (1 + np.vectorize(math.erf)(pre / math.sqrt(2)))
    y = _layer_norm(dense(gelu, "fc_out", "mlp") + h).reshape(b * length, d)
    norms = np.linalg.norm(y, axis=-1)
    gram = (y / norms[:, None]) @ (y / norms[:, None]).T
    n = len(y)
    cosine = (gram.sum() - np.trace(gram)) / (n * (n - 1))
    entropy = -(probs * np.log(np.where(probs > 0, probs, 1.0))).sum(-1).mean() / math.log(length)
    return [norms.mean(), cosine, entropy]


def test_torch_peer_matches_a_float64_bert_layer(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from benchmarks import torch_loop_process as peer

    assert peer.bias_norms(64).tolist() == pytest.approx(process_time.target4_bias_norms(),
                                                         rel=1e-12)
    out = tmp_path / "peer.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.torch_loop_process", f"--out={out}",
                           "--batch_size=2", "--seq_len=4", "--num_bias=4", "--seed=3"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    rng = np.random.default_rng(3)  # the script's draws, in its order
    params = peer.bert_init_params(rng)["params"]
    assert params["mlp"]["fc_in"]["kernel"].shape == (768, 3072)
    assert abs(params["attention"]["query"]["kernel"].std() - 0.02) < 1e-4
    g = rng.standard_normal(768)
    z = rng.standard_normal((2, 4, 768)).astype(np.float32).astype(np.float64)
    u = (g / np.linalg.norm(g)).astype(np.float32).astype(np.float64)
    assert doc["bias_norms"] == pytest.approx([0.0, 0.25, 32.0, 4096.0], rel=1e-12)
    for s, got in zip(doc["bias_norms"], doc["metrics"]):
        want = _bert_layer_metrics(params, z + np.float32(s) * u)
        # float32 throughout; at s = 4096 the attention logits are ~1e3-1e4 and their float32
        # rounding moves the entropy by ~2e-5 (docs/SWEEP.md, "Large bias norms")
        atol = 1e-4 if s > 1000 else 1e-6
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=atol, err_msg=f"s = {s}")
