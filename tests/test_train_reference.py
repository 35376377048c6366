"""Nothing changes in the numbers: experiments/train.py on `train:smoke`, run as a
user runs it on the CPU (one device, XLA's default optimisations), reproduces the losses, gradient
norms, learning rates and validation losses recorded at commit d21c390, before the training loop's
prefetch and async-readback changes, to float32 rounding.

The reference (docs/benchmarks/train_throughput_cpu/smoke_{metrics,eval}_d21c390.jsonl) was written by
  python experiments/train.py --config=train:smoke \
      --workdir=DIR --progress=false --config.analysis.run=false
on this project's 2-core x86-64 CPU machine (AVX-512). XLA compiles for the host's vector
instructions, so a CPU with other ones sums in another order and misses the last bits: the same
command with XLA_FLAGS=--xla_cpu_max_isa=AVX2 or =SSE4_2 (what an older x86-64 CPU gets) differs
from the reference from step 0 on, so the test compares with tolerances derived from float32
rounding (unit roundoff u = 2**-24 = 6e-8) and measured there, 40 steps:
  - losses, validation losses, learning rates: a few u; measured at most 3.0e-7 (loss), 3.4e-7
    (val loss), 1.1e-7 (learning rate); the runs do not drift apart over the 40 steps;
  - gradient norms: a sum of squares over every parameter, whose rounding error grows with their
    number (about sqrt(n)·u in any summation order); measured 3.0e-5 once (step 18, SSE4_2), one
    u elsewhere.
Hence RTOL: 1e-5 (losses), 1e-6 (learning rates), 2e-4 (gradient norms), no absolute slack. A
change of the numbers (a different init, loss, schedule or update) moves them by far more.
Bit-identity holds within one machine and is checked there: tests/test_train.py's killed and
resumed run equals the uninterrupted one, metrics, evaluations and final state, bit for bit."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "benchmarks" / "train_throughput_cpu"
RTOL = {"loss": 1e-5, "val_loss": 1e-5, "learning_rate": 1e-6, "grad_norm": 2e-4}


def _records(path):
    return [json.loads(line) for line in pathlib.Path(path).read_text().splitlines()]


def test_smoke_run_reproduces_the_recorded_one_to_float32_rounding(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("XLA_FLAGS", "JAX_DISABLE_MOST_OPTIMIZATIONS")}  # conftest.py's
    proc = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "train.py"),
         "--config=train:smoke",
         f"--workdir={tmp_path}", "--progress=false", "--config.analysis.run=false"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got, want = _records(tmp_path / "metrics.jsonl"), _records(REFERENCE / "smoke_metrics_d21c390.jsonl")
    assert len(got) == len(want) == 40
    assert [r["step"] for r in got] == [r["step"] for r in want]
    for field in ("loss", "grad_norm", "learning_rate"):  # tokens_per_s is a timing
        assert [r[field] for r in got] == pytest.approx([r[field] for r in want],
                                                        rel=RTOL[field], abs=0), field
    got, want = _records(tmp_path / "eval.jsonl"), _records(REFERENCE / "smoke_eval_d21c390.jsonl")
    assert [r["step"] for r in got] == [r["step"] for r in want]
    assert [set(r) for r in got] == [set(r) for r in want]
    assert [r["val_loss"] for r in got] == pytest.approx([r["val_loss"] for r in want],
                                                         rel=RTOL["val_loss"], abs=0)
