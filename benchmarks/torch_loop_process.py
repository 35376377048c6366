r"""The PyTorch peer of the main job as a whole process: what a researcher
would write with PyTorch on a CPU, timed by benchmarks/process_time.py from spawn to exit.

  python -m benchmarks.torch_loop_process --out=FILE.json [--batch_size=8 --num_bias=64]

One Hugging Face `BertLayer` (BERT-base: d = 768, 12 heads, d_ff = 3072, post-LN, LayerNorm eps
1e-12, exact GELU, eager attention) at BERT initialisation: weights N(0, 0.02²), biases 0,
LayerNorm scale 1 and bias 0 (built by `benchmark_torch.build_bert_layer`, the benchmark's peer).
One seed: z (B, L, D) i.i.d. N(0, 1), u uniform on the unit sphere, float32. A Python loop over
s computes y = layer(z + s·u) and the benchmark's three metrics per s
(`benchmark_torch.make_sweep_fn(layer, "loop")`: mean ‖y‖, the average cosine over all token
pairs, the attention entropy / ln L), prints a table and writes them as JSON. The grid is the
main job's shape: s = 0 and `num_bias` − 1 values log-spaced in [2^-2, 2^12].
"""
from __future__ import annotations

import json
import pathlib
import time

import numpy as np
import torch
from absl import app, flags

from benchmarks import benchmark_torch

D_MODEL, NUM_HEADS, D_FF, LN_EPS, INIT_STD = 768, 12, 3072, 1e-12, 0.02


def bias_norms(num_bias: int) -> np.ndarray:
    """s = 0, then num_bias − 1 values log-spaced in [2^-2, 2^12] (the main job's grid shape)."""
    return np.concatenate([[0.0], np.logspace(-2, 12, num_bias - 1, base=2.0)])


def bert_init_params(rng: np.random.Generator) -> dict:
    """{"params": ...} in the JAX block's layout ((in, out) kernels), float32: kernels
    N(0, INIT_STD²), biases 0, LayerNorm scale 1 and bias 0."""
    def dense(d_in, d_out):
        return {"kernel": (INIT_STD * rng.standard_normal((d_in, d_out))).astype(np.float32),
                "bias": np.zeros(d_out, np.float32)}

    def norm():
        return {"scale": np.ones(D_MODEL, np.float32), "bias": np.zeros(D_MODEL, np.float32)}

    attention = {name: dense(D_MODEL, D_MODEL) for name in ("query", "key", "value", "out")}
    mlp = {"fc_in": dense(D_MODEL, D_FF), "fc_out": dense(D_FF, D_MODEL)}
    return {"params": {"attention": attention, "mlp": mlp, "attention_norm": norm(),
                       "mlp_norm": norm()}}


def define_flags() -> None:
    """The script's flags, defined only when it runs (importing this module, as a test does next
    to benchmarks/process_time.py, must not define a second --out)."""
    flags.DEFINE_string("out", None, "Write the bias norms and metrics as JSON here.",
                        required=True)
    flags.DEFINE_integer("batch_size", 8, "B sequences.")
    flags.DEFINE_integer("seq_len", 128, "L tokens per sequence.")
    flags.DEFINE_integer("num_bias", 64, "Grid points: s = 0 and num_bias − 1 log-spaced values "
                         "in [2^-2, 2^12].")
    flags.DEFINE_integer("seed", 0, "numpy seed of the weights, z and u.")
    flags.DEFINE_string("phase_times", None, "Write each phase's wall-clock end time (epoch "
                        "seconds) as JSON here (benchmarks/process_time.py).")


def main(argv):
    del argv
    args = flags.FLAGS
    stamps = [("start_imports_flags", time.time())]
    rng = np.random.default_rng(args.seed)
    layer = benchmark_torch.build_bert_layer(bert_init_params(rng), D_MODEL, NUM_HEADS, D_FF,
                                             LN_EPS, "cpu")
    stamps.append(("build_layer", time.time()))
    g = rng.standard_normal(D_MODEL)
    z = torch.as_tensor(rng.standard_normal((args.batch_size, args.seq_len, D_MODEL)),
                        dtype=torch.float32)
    u = torch.as_tensor(g / np.linalg.norm(g), dtype=torch.float32)
    norms = bias_norms(args.num_bias)
    sweep = benchmark_torch.make_sweep_fn(layer, "loop", 1)
    with torch.inference_mode():
        t0 = time.perf_counter()
        metrics = sweep(z, u, torch.as_tensor(norms, dtype=torch.float32)).numpy()
        seconds = time.perf_counter() - t0
    stamps.append(("sweep", time.time()))
    print(f"{'s':>9} {'|y|':>9} {'out cos':>9} {'H/lnL':>9}")
    rows = sorted(set(round(i * (len(norms) - 1) / 9) for i in range(10)))
    for i in rows:
        print(f"{norms[i]:9.3g} " + " ".join(f"{v:9.4g}" for v in metrics[i]))
    print(f"{len(norms)} bias norms in {seconds:.2f} s ({1e3 * seconds / len(norms):.1f} ms each)")
    stamps.append(("table", time.time()))
    pathlib.Path(args.out).write_text(json.dumps({
        "bias_norms": norms.tolist(), "metric_names": ["output_norm", "output_cosine",
                                                       "attention_entropy_normalized"],
        "metrics": metrics.tolist(), "sweep_seconds": seconds,
        "torch_version": torch.__version__, "threads": torch.get_num_threads()}) + "\n")
    stamps.append(("json", time.time()))
    if args.phase_times:
        pathlib.Path(args.phase_times).write_text(json.dumps({"stamps": stamps}) + "\n")


if __name__ == "__main__":
    define_flags()
    app.run(main)
