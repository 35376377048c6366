"""CPU smoke test of benchmarks/benchmark.py: every variant runs, the PyTorch peers compute the
same function as JAX (same weights, z, u), ratios and the compiled-memory relation are reported;
and the profilers' harness (benchmarks/profiling/harness.py)."""
import importlib.util
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _load(name):
    return importlib.import_module(f"benchmarks.{name}")


@pytest.fixture(scope="module")
def smoke_result():
    spec = importlib.util.spec_from_file_location("benchmark_config",
                                                  ROOT / "benchmarks" / "configs" / "benchmark.py")
    cfg_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cfg_module)
    c = cfg_module.get_config("smoke")
    c.repeats = 1
    c.device_counts = ()  # the scaling path is the sweep's sharding, tested in test_sweep
    bench = _load("benchmark")
    bench.validate(c)
    result = bench.run_benchmark(c, log=lambda *_: None)
    result["agreement"] = bench.agreement(result["variants"])
    return result


def test_every_variant_is_timed_with_positive_rates(smoke_result):
    variants = smoke_result["variants"]
    for name in ("jax_sweep", "jax_sweep_literal", "jax_bare", "jax_full_metrics", "jax_loop"):
        assert name in variants
    for row in variants.values():
        assert row["median_s"] > 0 and row["flops_per_s"] > 0
        assert 0 < row["share_of_matmul_rate"]
    assert smoke_result["matmul_flops_per_s"] > 0
    assert set(smoke_result["ratios"]) == set(variants) - {"jax_sweep"}
    contract = smoke_result["full_contract"]  # the main job's sweep against bare and the peers
    assert contract["over_bare"] == pytest.approx(
        variants["jax_full_metrics"]["median_s"] / variants["jax_bare"]["median_s"])
    assert {n for n in variants if n.startswith("torch_")} == set(contract) - {"over_bare"}


def test_shared_projection_is_the_same_function_with_fewer_executed_flops(smoke_result):
    sweep_row = smoke_result["variants"]["jax_sweep"]
    literal = smoke_result["variants"]["jax_sweep_literal"]
    # Float32 rounding differs (z·W + s·u·W vs (z + s·u)·W) and grows with s up to 4096 here:
    # the same bound as the PyTorch peers.
    for name, values in literal["metrics"].items():
        np.testing.assert_allclose(sweep_row["metrics"][name], values, atol=1e-4, err_msg=name)
    assert literal["executed_flop_per_point"] == smoke_result["flop_per_point"]
    assert sweep_row["executed_flop_per_point"] < smoke_result["flop_per_point"]
    for row in (sweep_row, literal):
        assert row["nominal_flops_per_s"] * row["s_per_point"] == pytest.approx(
            smoke_result["flop_per_point"])


def test_torch_peers_compute_the_same_metrics(smoke_result):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    assert {"torch_loop", "torch_folded"} <= set(smoke_result["variants"])
    # Same weights, inputs and float32 arithmetic: the metrics agree to float32 rounding.
    for name, diff in smoke_result["agreement"].items():
        assert diff < 1e-4, (name, diff)


def test_memory_grows_linearly_with_chunk(smoke_result):
    memory = smoke_result["memory"]
    assert len(memory) >= 2
    assert memory[-1]["temp_bytes"] + memory[-1]["output_bytes"] > (
        memory[0]["temp_bytes"] + memory[0]["output_bytes"])
    assert smoke_result["memory_fit"]["bytes_per_point"] > 0


def test_metrics_at_scale_agree_with_the_obvious_implementations(smoke_result):
    scale = smoke_result["metrics_at_scale"]
    cos = scale["average_cosine"]
    np.testing.assert_allclose(cos["ours_value_on_blocked_n"], cos["blocked_value_on_blocked_n"],
                               atol=1e-5)
    iso = scale["isoscore"]
    np.testing.assert_allclose(iso["ours_value"], iso["baseline_value"], atol=1e-4)


def test_bad_config_is_one_line_before_compiling(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.benchmark",
         "--config=" + str(ROOT / "benchmarks" / "configs" / "benchmark.py") + ":smoke",
         f"--workdir={tmp_path}", "--config.precision=fp8"],
        capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2
    assert "precision" in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "benchmark.json").exists()


def test_trace_sweep_sums_device_kernels_by_name(tmp_path):
    import gzip
    import json

    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/host:CPU"}},
        {"ph": "X", "pid": 1, "name": "gemm_a", "dur": 5},
        {"ph": "X", "pid": 1, "name": "gemm_a", "dur": 7},
        {"ph": "X", "pid": 1, "name": "fusion", "dur": 3},
        {"ph": "X", "pid": 2, "name": "host_work", "dur": 100},
    ]
    (tmp_path / "plugins" / "profile").mkdir(parents=True)
    with gzip.open(tmp_path / "plugins" / "profile" / "x.trace.json.gz", "wt") as f:
        json.dump({"traceEvents": events}, f)
    totals = _load("profiling.trace_sweep").kernel_times(str(tmp_path))
    assert dict(totals) == {"gemm_a": 12, "fusion": 3}


def test_trace_train_busy_time_is_the_union_of_kernel_intervals():
    trace_train = _load("profiling.trace_train")
    events = [("a", 0.0, 5.0), ("b", 3.0, 5.0), ("c", 10.0, 2.0), ("d", 10.5, 1.0)]
    assert trace_train.busy_time(events) == 10.0  # [0, 8] and [10, 12]
    assert trace_train.category("nvjet_sm90_tst_128x192") == "GEMM"
    assert trace_train.category("cudnn_generated_fort_native_sdpa") == "attention"
    assert trace_train.category("loop_add_convert_fusion").startswith("other")


def test_profilers_import_together_without_defining_flags():
    """Flags are defined only when a profiler runs (harness.run), so importing never clashes."""
    from absl import flags

    before = set(flags.FLAGS)
    names = sorted(p.stem for p in (ROOT / "benchmarks" / "profiling").glob("*.py")
                   if p.stem != "__init__")
    assert {"harness", "trace_sweep", "profile_block", "profile_metrics"} <= set(names)
    for name in names:
        module = _load(f"profiling.{name}")
        assert name == "harness" or callable(module.main), name
    assert set(flags.FLAGS) == before


def test_harness_times_calls_and_writes_rows_with_provenance(tmp_path, capsys):
    import json

    import jax.numpy as jnp

    harness = _load("profiling.harness")
    timing = harness.time_calls(lambda x: x * 2, jnp.ones(4), repeats=3)
    assert len(timing.times_s) == 3 and timing.first_s > 0
    assert timing.min_s <= timing.median_s and float(timing.result[0]) == 2.0
    with pytest.raises(ValueError, match="repeats"):
        harness.time_calls(lambda: 0, repeats=0)
    report = harness.Report("unit_test", repeats=2)
    report.describe("a title", chunk=4)
    report.time("double", lambda x: x * 2, jnp.ones(4), per=4, unit="µs", flop=8.0)
    report.row("a count", 3.0, "s", note="given")
    assert "a title" in capsys.readouterr().out
    doc = json.loads(report.write(tmp_path / "sub" / "out.json").read_text())
    assert doc["profiler"] == "benchmarks.profiling.unit_test" and doc["setup"] == {"chunk": 4}
    first, second = doc["rows"]
    assert first["label"] == "double" and first["unit"] == "µs/point" and first["value"] > 0
    assert first["min"] <= first["value"] and first["TFLOP/s"] > 0
    assert second == {"label": "a count", "value": 3.0, "unit": "s", "note": "given"}
    assert {"git_commit", "device_kind", "jax_version"} <= set(doc["provenance"])
    assert not list((tmp_path / "sub").glob(".*.tmp"))  # written atomically
