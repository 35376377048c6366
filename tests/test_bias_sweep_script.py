"""experiments/sweep.py end to end, as a user runs it (subprocesses): the smoke variant writes
the results contract, figures and table; an overflowing bias norm exits non-zero naming the
overflow and leaves no results.json; bad flags and configs are one line, exit 2, nothing
written (every other bad input is checked in-process by tests/test_sweep.py, through the same validation).

The two compiling runs share a persistent XLA compilation cache (same shapes), so the second one
does not compile again.
"""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from anisotropy_jax import results
from anisotropy_jax.studies.sweep import report
from tests import processes

REPO = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = REPO / "experiments" / "sweep.py"
CONFIG = REPO / "anisotropy_jax" / "configs" / "sweep.py"
CONTRACT_METRICS = (
    "input_cosine", "output_cosine", "output_cross_sequence_cosine", "attention_output_cosine",
    "input_norm", "output_norm", "attention_entropy", "attention_entropy_normalized",
    "attention_max", "query_norm", "key_norm", "mean_query_norm", "mean_key_norm",
    "mean_query_key_cosine", "output_isoscore", "output_drift_norm", "attention_query_agreement",
    "attention_row_cosine", "attention_query_key_information", "attention_rounding_bound")


@pytest.fixture(scope="module")
def env():
    cache = os.environ["JAX_COMPILATION_CACHE_DIR"]  # the run's, shared (tests/conftest.py)
    environ = dict(os.environ)
    processes.one_device(environ)  # one CPU device, as a user's machine
    environ.update(JAX_COMPILATION_CACHE_DIR=str(cache),
                   JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                   JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1", MPLBACKEND="Agg")
    return environ


def _run(env, workdir, *flags, variant="smoke"):
    cmd = [sys.executable, str(SCRIPT), f"--config={CONFIG}:{variant}", f"--workdir={workdir}",
           *flags]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_smoke_run_writes_results_contract_figures_and_table(env, tmp_path):
    proc = _run(env, tmp_path, f"--phase_times={tmp_path / 'phases.json'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "chunk 1/" in out and "H/lnL" in out and "agree" in out and "F1" in out
    assert "warning" not in out  # s ≤ 1024 at d = 64: float32 is exact enough
    doc = json.loads((tmp_path / "results.json").read_text())
    for key in ("package_version", "jax_version", "flax_version", "devices", "start_time",
                "end_time", "wall_seconds"):
        assert key in doc["provenance"]
    assert doc["config"]["model"]["d_model"] == 64
    norms = doc["bias_norms"]
    assert norms == [0.0, 1.0, 4.0, 16.0, 64.0, 256.0, 1024.0]
    for name in CONTRACT_METRICS:
        metric = doc["metrics"][name]
        assert len(metric["mean"]) == len(metric["std"]) == len(norms), name
        per_seed = np.asarray(metric["per_seed"])
        assert per_seed.shape == (2, len(norms)), name
        np.testing.assert_allclose(metric["mean"], per_seed.mean(0), rtol=1e-12)
        np.testing.assert_allclose(metric["std"], per_seed.std(0, ddof=1), rtol=1e-9, atol=1e-15)
    assert doc["closed_forms"]["input_cosine"]["max_abs_deviation"] < 0.1
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["config"]["seq_len"] == 16
    arrays = np.load(tmp_path / "results.npz")
    np.testing.assert_allclose(arrays["post-LN_init_bert_0.02__input_cosine"],
                               doc["metrics"]["input_cosine"]["per_seed"], rtol=1e-6)
    assert arrays["post-LN_init_bert_0.02__per_head__query_norm"].shape == (2, 7, 4)
    assert arrays["post-LN_init_bert_0.02__per_head__attention_query_agreement"].shape == (2, 7, 4)
    assert doc["reliable"] == [True] * 7 and doc["runs"]["post-LN, init=bert(0.02)"]["inputs"] == (
        "biased")
    for name in ("cosine", "norms", "attention", "query_key", "categorical"):
        assert (tmp_path / "figures" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    assert not [p for p in tmp_path.rglob(".*.tmp")]  # no temporaries left behind
    # the figure processes drew what this process draws from results.json, byte for byte
    for job in report.figure_jobs(doc["runs"], tmp_path / "here"):
        results.draw_figure(job)
        assert job.path.read_bytes() == (tmp_path / "figures" / job.path.name).read_bytes()
    phases = [name for name, _ in json.loads((tmp_path / "phases.json").read_text())["stamps"]]
    assert phases == ["start_imports_flags", "setup", "chunk 1", "chunk 2", "summaries",
                      "provenance", "npz", "figures", "json", "table"], phases


def test_report_names_every_figure_of_the_plotting_module():
    from anisotropy_jax.plotting import sweep as sweep_plots

    assert set(report.FIGURE_NAMES) == set(sweep_plots.FIGURES)
    for name in report.FIGURE_NAMES:
        assert getattr(sweep_plots, f"{name}_figure") is sweep_plots.FIGURES[name]


def test_control_variant_runs_both_inputs_into_shared_results(env, tmp_path):
    """`:control`: biased and norm-matched inputs with the same weights, seeds and grid; the
    control has the biased run's input norm but no input cosine and no rise in agreement; a
    grid reaching s = 1e6 (where rounding corrupts this d = 64 block) is flagged by a warning."""
    proc = _run(env, tmp_path, "--config.bias_norms=(0.0,1.0,16.0,256.0,1e6)",
                "--figure_processes=0", variant="smoke+control")  # figures drawn in-process
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "results.json").read_text())
    biased, control = doc["runs"]["inputs=biased"], doc["runs"]["inputs=norm_matched"]
    assert control["inputs"] == "norm_matched" and biased["bias_norms"] == control["bias_norms"]
    np.testing.assert_allclose(control["metrics"]["input_norm"]["mean"],
                               biased["metrics"]["input_norm"]["mean"], rtol=0.05)
    assert max(abs(v) for v in control["metrics"]["input_cosine"]["mean"]) < 0.02
    agree_b = biased["metrics"]["attention_query_agreement"]["mean"]
    agree_c = control["metrics"]["attention_query_agreement"]["mean"]
    assert agree_b[3] > agree_b[0] + 0.3 and abs(agree_c[3] - agree_c[0]) < 0.05
    unreliable = [s for run in (biased, control) for s, ok in zip(run["bias_norms"],
                                                                 run["reliable"]) if not ok]
    assert unreliable and set(unreliable) <= {1e6}, unreliable
    assert "warning: [inputs=" in proc.stdout and "at s = 1e+06" in proc.stdout
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == sorted(
        f"{name}.png" for name in report.FIGURE_NAMES)


def test_overflow_exits_nonzero_naming_it_and_writes_no_results(env, tmp_path):
    proc = _run(env, tmp_path, "--config.bias_norms=(0.0,1.0,4.0,16.0,64.0,1e25,1024.0)")
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert "overflow" in last and "s=1e+25" in last, proc.stderr[-2000:]
    assert (tmp_path / "config.json").exists()  # what was attempted
    assert not (tmp_path / "results.json").exists()


@pytest.mark.parametrize("flag,field", [
    ("--config.bias_norms=(0.0,-2.0)", "bias_norms"),     # validation (ConfigError)
    ("--config.no_such_field=1", "no_such_field"),        # flag parsing (ml_collections)
    ("--config.model.num_heads=5", "model.d_model"),       # 64 is not divisible by 5
    ("--config.model.precision=fp8", "model.precision"),  # the block's, at its dataclass path
    ("--config.precision=default", "--config.precision"),  # no field is hoisted to the top
    ("--config.compare_fields=('model.colour',)", "compare_fields"),  # not a dataclass path
])
def test_bad_flag_is_one_line_exit_2_and_writes_nothing(env, tmp_path, flag, field):
    proc = _run(env, tmp_path, flag)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and field in lines[0], proc.stderr
    assert not any(tmp_path.iterdir())


def test_missing_workdir_and_unknown_variant_are_one_line(env, tmp_path):
    for args, start in (([f"--config={CONFIG}:smoke"], "error: --workdir: required"),
                        ([f"--config={CONFIG}:sideways", f"--workdir={tmp_path}"],
                         "error: --config: config: unknown variant 'sideways'")):
        proc = subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True,
                              text=True, timeout=120)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(start), proc.stderr
    assert not any(tmp_path.iterdir())
