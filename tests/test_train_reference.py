"""Nothing changes in the numbers: experiments/train.py on `train:smoke`, run as a
user runs it on the CPU (one device, XLA's default optimisations), reproduces the losses, gradient
norms, learning rates and validation losses recorded at commit d21c390, before the training loop's
prefetch and async-readback changes, bit for bit.

The reference (docs/benchmarks/train_throughput_cpu/smoke_{metrics,eval}_d21c390.jsonl) was written by
  python experiments/train.py --config=train:smoke \
      --workdir=DIR --progress=false --config.analysis.run=false
on this project's 2-core x86-64 CPU machine. XLA compiles for the host's vector instructions, so a
CPU with other ones may sum in another order and miss the last bits: this test then fails on that
machine, not on a change of the code."""
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "benchmarks" / "train_throughput_cpu"


def _records(path):
    return [json.loads(line) for line in pathlib.Path(path).read_text().splitlines()]


def test_smoke_run_is_bit_identical_to_the_recorded_one(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLA_FLAGS", "JAX_DISABLE_MOST_OPTIMIZATIONS")}  # conftest.py's
    proc = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "train.py"),
         "--config=train:smoke",
         f"--workdir={tmp_path}", "--progress=false", "--config.analysis.run=false"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    fields = ("step", "loss", "grad_norm", "learning_rate")  # tokens_per_s is a timing
    got = [{k: r[k] for k in fields} for r in _records(tmp_path / "metrics.jsonl")]
    want = [{k: r[k] for k in fields} for r in _records(REFERENCE / "smoke_metrics_d21c390.jsonl")]
    assert len(got) == len(want) == 40
    assert got == want  # floats from JSON: equal means bit-identical float32 values
    assert _records(tmp_path / "eval.jsonl") == _records(REFERENCE / "smoke_eval_d21c390.jsonl")
