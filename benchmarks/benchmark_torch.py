"""PyTorch peers of the bias sweep, for benchmarks/benchmark.py (torch is never imported by the
library). A researcher's version of the sweep: a Hugging Face `BertLayer` at BERT initialisation
(N(0, init_std²) weights, zero biases, LayerNorm 1/0, exact GELU, eager attention so that the
attention probabilities exist), evaluated on x = z + s·u, reducing on the device to the same three
metrics as the JAX side: mean output norm, output average cosine, normalised attention entropy.

Variants:
  loop            a Python loop over s, one forward per bias norm (eager)
  folded          `fold` bias norms stacked into the batch axis per forward (eager)
  folded_compiled the folded function under torch.compile
Precisions (the library's names): 'highest' (true float32: TF32 off), 'default' (TF32 matmuls, as
JAX's default precision on NVIDIA GPUs; 'tf32' is accepted for it), 'bfloat16' (autocast: bfloat16
matmuls, softmax and LayerNorm in float32, as on the JAX side).
"""
from __future__ import annotations

import contextlib
import math
import time
from typing import Any, Callable

import numpy as np


def _torch():
    import torch  # noqa: PLC0415  (optional dependency)

    return torch


def build_bert_layer(params: Any, d_model: int, num_heads: int, d_ff: int,
                     layer_norm_eps: float, device: str):
    """A Hugging Face BertLayer (eager attention, eval mode) holding the JAX block's `params`
    (one seed, {"params": ...}): both sides then compute the same function."""
    torch = _torch()
    from transformers import BertConfig  # noqa: PLC0415
    from transformers.models.bert.modeling_bert import BertLayer  # noqa: PLC0415

    config = BertConfig(hidden_size=d_model, num_attention_heads=num_heads,
                        intermediate_size=d_ff, hidden_act="gelu", layer_norm_eps=layer_norm_eps,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config._attn_implementation = "eager"  # the probabilities are needed for the entropy
    layer = BertLayer(config)
    p = params["params"]
    linear = {layer.attention.self.query: p["attention"]["query"],
              layer.attention.self.key: p["attention"]["key"],
              layer.attention.self.value: p["attention"]["value"],
              layer.attention.output.dense: p["attention"]["out"],
              layer.intermediate.dense: p["mlp"]["fc_in"],
              layer.output.dense: p["mlp"]["fc_out"]}
    norms = {layer.attention.output.LayerNorm: p["attention_norm"],
             layer.output.LayerNorm: p["mlp_norm"]}
    with torch.no_grad():
        for module, q in linear.items():
            module.weight.copy_(torch.as_tensor(np.array(q["kernel"]).T.copy()))  # (in,out) → (out,in)
            module.bias.copy_(torch.as_tensor(np.array(q["bias"])))
        for module, q in norms.items():
            module.weight.copy_(torch.as_tensor(np.array(q["scale"])))
            module.bias.copy_(torch.as_tensor(np.array(q["bias"])))
    return layer.eval().to(device)


def _layer_with_probs(layer, x):
    """BertLayer.forward, but keeping the attention probabilities it computes."""
    attn_out, probs = layer.attention(x, None)
    return layer.feed_forward_chunk(attn_out), probs


def _metrics(y, probs, seq_len: int):
    """(S, 3): mean ‖y‖, average cosine over all token pairs, normalised entropy; y (S, B, L, D)."""
    torch = _torch()
    y = y.float()
    norms = torch.linalg.vector_norm(y, dim=-1)
    unit = y / norms.clamp_min(1e-30)[..., None]
    n = y.shape[1] * y.shape[2]
    total = unit.sum(dim=(1, 2))
    cosine = ((total * total).sum(-1) - n) / (n * (n - 1))
    probs = probs.float()
    entropy = torch.special.entr(probs).sum(-1)  # 0·log 0 = 0
    entropy = entropy.reshape(y.shape[0], -1).mean(-1) / math.log(seq_len)
    return torch.stack([norms.reshape(y.shape[0], -1).mean(-1), cosine, entropy], dim=-1)


def make_sweep_fn(layer, variant: str, fold: int) -> Callable:
    """Returns f(z (B, L, D), u (D,), bias_norms (S,)) → (S, 3) metrics tensor on the device."""
    torch = _torch()

    def one(z, u, s):
        x = (z + s * u)[None]
        y, probs = _layer_with_probs(layer, x[0])
        return _metrics(y[None], probs[None], z.shape[1])

    def folded_chunk(z, u, s_chunk):
        x = z[None] + s_chunk[:, None, None, None] * u  # (F, B, L, D)
        f, b, l, d = x.shape
        y, probs = _layer_with_probs(layer, x.reshape(f * b, l, d))
        return _metrics(y.reshape(f, b, l, d), probs.reshape(f, b, *probs.shape[1:]), l)

    if variant == "folded_compiled":
        folded_chunk = torch.compile(folded_chunk)

    def sweep(z, u, bias_norms):
        if variant == "loop":
            return torch.cat([one(z, u, s) for s in bias_norms])
        outs = [folded_chunk(z, u, bias_norms[i:i + fold])
                for i in range(0, bias_norms.shape[0], fold)]
        return torch.cat(outs)

    return sweep


@contextlib.contextmanager
def precision_context(precision: str, device: str):
    torch = _torch()
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    tf32 = precision in ("default", "tf32")
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    try:
        if precision == "bfloat16":
            with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16):
                yield
        else:
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def time_torch_sweep(*, variant: str, precision: str, bias_norms: np.ndarray, params: Any,
                     z: np.ndarray, u: np.ndarray, block: Any, fold: int, repeats: int,
                     device: str | None = None) -> dict[str, Any]:
    """Times one PyTorch variant on the JAX block's weights, z (B, L, D) and u (D,): first call
    (incl. torch.compile) and the median of `repeats` whole sweeps (one sync per sweep)."""
    torch = _torch()
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    layer = build_bert_layer(params, block.d_model, block.num_heads, block.d_ff,
                             block.layer_norm_eps, device)
    z_t = torch.as_tensor(np.array(z, np.float32)).to(device)
    u_t = torch.as_tensor(np.array(u, np.float32)).to(device)
    s = torch.as_tensor(np.array(bias_norms, np.float32)).to(device)
    sweep = make_sweep_fn(layer, variant, fold)

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    with torch.inference_mode(), precision_context(precision, device):
        sync()
        t0 = time.perf_counter()
        out = sweep(z_t, u_t, s)
        sync()
        first = time.perf_counter() - t0
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = sweep(z_t, u_t, s)
            sync()
            times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() if device.startswith("cuda") else None
    return {"variant": f"torch_{variant}", "precision": precision, "first_call_s": first,
            "times_s": times, "median_s": float(np.median(times)),
            "metrics": out.float().cpu().numpy(), "peak_device_bytes": peak,
            "torch_version": torch.__version__}
