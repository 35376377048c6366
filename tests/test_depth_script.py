"""experiments/depth.py end to end: a SIGKILLed run restarted with the same command computes
only the missing chunks and ends identical to an uninterrupted run; two processes under
jax.distributed (local coordinator, gloo CPU collectives, 2 fake devices each) give the numbers of
one process; a bad config is one line and exit 2 before compiling.

All runs share one persistent compilation cache; one architecture keeps compilation short."""
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from anisotropy_jax.studies.depth import grid

ROOT = pathlib.Path(__file__).resolve().parent.parent
SMOKE = ROOT / "anisotropy_jax" / "configs" / "depth.py"
# 2 seeds × 3 bias norms on 2 devices, 2 points per chunk: 4 chunks of (1 seed × 2 s).
ARGS = [f"--config={SMOKE}:smoke", "--config.architectures=('pre',)", "--config.chunk_size=2"]


def _script(args, cache, env_extra=None):
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1",
               JAX_COMPILATION_CACHE_DIR=str(cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0", **(env_extra or {}))
    return subprocess.Popen([sys.executable, str(ROOT / "experiments" / "depth.py"), *args],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def _finish(proc, timeout=400):
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        out, _ = proc.communicate(timeout=60)
        pytest.fail(f"the run did not finish in {timeout} s:\n{out[-6000:]}")
    assert proc.returncode == 0, out[-6000:]
    return out


def _npz(workdir):
    with np.load(workdir / "results.npz") as f:
        return {k: f[k] for k in f.files}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    cache = tmp_path_factory.mktemp("jax_cache")
    clean = tmp_path_factory.mktemp("uninterrupted")
    _finish(_script(ARGS + [f"--workdir={clean}"], cache))

    workdir = tmp_path_factory.mktemp("resumed")
    first = _script(ARGS + [f"--workdir={workdir}"], cache, {grid.HANG_ENV: "2"})
    output, deadline = [], time.time() + 300
    for line in first.stdout:  # wait until two chunks are written and the run is parked
        output.append(line)
        if "hanging after" in line or time.time() > deadline:
            break
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    assert first.returncode == -signal.SIGKILL, "".join(output)
    chunks_at_kill = sorted(p.name for p in (workdir / "chunks" / "pre_d32").glob("*.npz"))
    resumed = _finish(_script(ARGS + [f"--workdir={workdir}"], cache))
    return {"cache": cache, "clean": clean, "workdir": workdir, "chunks_at_kill": chunks_at_kill,
            "killed_out": "".join(output), "resumed_out": resumed}


def test_killed_run_resumes_computing_only_the_missing_chunks(runs):
    assert len(runs["chunks_at_kill"]) == 2, runs["killed_out"]
    assert "(2 chunks computed, 2 loaded)" in runs["resumed_out"], runs["resumed_out"]
    clean, resumed = _npz(runs["clean"]), _npz(runs["workdir"])
    assert clean.keys() == resumed.keys()
    for name in clean:
        np.testing.assert_array_equal(resumed[name], clean[name], err_msg=name)


def test_two_processes_under_jax_distributed_give_the_one_process_numbers(runs, tmp_path):
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    procs = [_script(ARGS + [f"--workdir={tmp_path}", "--distributed",
                             f"--coordinator_address=localhost:{port}", "--num_processes=2",
                             f"--process_id={i}"], runs["cache"]) for i in range(2)]
    outs = [_finish(p) for p in procs]
    assert "4 device(s) in 2 process(es)" in outs[0], outs[0]
    clean, multi = _npz(runs["clean"]), _npz(tmp_path)
    assert clean.keys() == multi.keys()
    for name in clean:
        np.testing.assert_allclose(multi[name], clean[name], rtol=1e-6, atol=1e-7, err_msg=name)


def test_bad_config_is_one_line_before_compiling(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "experiments" / "depth.py"),
                           f"--config={SMOKE}:smoke", "--config.widths=(20,)",
                           f"--workdir={tmp_path}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: widths: 20 is not a positive multiple of head_dim=16")
    assert not (tmp_path / "chunks").exists()
