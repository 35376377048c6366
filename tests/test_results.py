"""Atomic writers and JSON conversion."""
import pathlib
import json

import numpy as np
import pytest

from anisotropy_jax import plotting, results


def test_json_roundtrip_with_arrays_and_non_finite(tmp_path):
    path = results.write_json(tmp_path / "r.json", {"a": np.arange(3), "b": (1.5, float("nan")),
                                                   "c": np.float32(2.0), "d": float("-inf")})
    assert json.loads(path.read_text()) == {"a": [0, 1, 2], "b": [1.5, "nan"], "c": 2.0,
                                            "d": "-inf"}


def test_interrupted_write_leaves_previous_file_and_no_temporaries(tmp_path):
    path = results.write_json(tmp_path / "r.json", {"ok": 1})
    with pytest.raises(RuntimeError):
        with results.atomic_path(path) as tmp:
            tmp.write_text("{half")
            raise RuntimeError("killed")
    assert json.loads(path.read_text()) == {"ok": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_npz_and_figure(tmp_path):
    results.write_npz(tmp_path / "a.npz", {"x": np.ones((2, 3))})
    np.testing.assert_array_equal(np.load(tmp_path / "a.npz")["x"], np.ones((2, 3)))
    fig, axes = plotting.new_figure(2)
    axes[0, 0].plot([1, 2], [3, 4])
    path = results.save_figure(fig, tmp_path / "fig.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_provenance_fields():
    prov = results.Provenance().finish("sweep")
    assert prov["study"] == "sweep"  # `anisotropy-jax show` reads it
    for key in ("package_version", "jax_version", "flax_version", "devices", "start_time",
                "end_time", "wall_seconds"):
        assert key in prov
    assert prov["schema_version"] == results.RESULTS_SCHEMA_VERSION  # every results.json's


ROOT = pathlib.Path(__file__).resolve().parent.parent


def _keys(obj):
    """Every dict key at any depth."""
    if isinstance(obj, dict):
        return set(obj) | {k for v in obj.values() for k in _keys(v)}
    if isinstance(obj, list):
        return {k for v in obj for k in _keys(v)}
    return set()


def test_schema_1_files_read_the_same_numbers_under_the_current_names():
    """Committed results of schema 1 (the normalisation grid, a training analysis, the
    extreme-token study): `read_results` renames every old metric key, nothing else changes."""
    from anisotropy_jax import metrics

    assert set(results.SCHEMA_1_METRIC_NAMES.values()) <= set(metrics.LAYER_METRICS)
    grid_path = ROOT / "docs/results/normalizations/cpu/results.json"
    raw, doc = json.loads(grid_path.read_text()), results.read_results(grid_path)
    assert results.schema_version(raw) < 2 and "centered_cosine" in _keys(raw)
    assert not _keys(doc) & set(results.SCHEMA_1_METRIC_NAMES)
    for dataset, by_norm in raw["cells"].items():
        for norm, cell in by_norm.items():
            new = doc["cells"][dataset][results.SCHEMA_2_NORMALIZATION_NAMES.get(norm, norm)]
            assert new["centered_average_cosine"] == cell["centered_cosine"]
            assert new["massive_top_ratio"] == cell["massive_ratio"]
            assert {k: v for k, v in new.items() if k not in (
                "centered_average_cosine", "massive_top_ratio")} == {
                k: v for k, v in cell.items() if k not in ("centered_cosine", "massive_ratio")}
    dyn_path = ROOT / "docs/results/extreme/intrinsic_dimension/training/clm_small/seed_0/results.json"
    raw, doc = json.loads(dyn_path.read_text()), results.read_results(dyn_path)
    assert doc["layers"]["centered_average_cosine"] == raw["layers"]["centered_cosine"]
    assert doc["layers"]["massive_top_ratio"] == raw["layers"]["massive_ratio"]
    assert doc["final_norm"]["before_centered_average_cosine"] == raw["final_norm"][
        "before_centered_cosine"]
    assert doc["final_norm"]["after_massive_top_ratio"] == raw["final_norm"]["after_massive_ratio"]
    assert doc["heads"] == raw["heads"] and doc["provenance"] == raw["provenance"]
    ext_path = ROOT / "docs/results/extreme/report/all-MiniLM-L6-v2/results.json"
    raw, doc = json.loads(ext_path.read_text()), results.read_results(ext_path)
    states = lambda d: next(iter(d["models"].values()))["inputs"]["natural"]["trained"]["states"]
    assert states(doc)["twonn_dimension"] == states(raw)["twonn"]
    assert states(doc)["gride_dimension"] == states(raw)["gride"]
    assert states(doc)["kurtosis"] == states(raw)["kurtosis"]  # unchanged names stay


def test_older_documents_call_the_per_query_sigmoid_by_its_current_name():
    """Schema ≤ 2 said 'sigmoid' for σ(ℓ − ln n) with n per query, now
    'sigmoid_per_query_bias' ('sigmoid' is the scalar bias −ln L): renamed wherever it names a
    normalisation (grid cells and runs, the sweep's labels, block configs and compare_values),
    nowhere else, and the numbers are untouched."""
    old_name, new_name = "sigmoid", results.SCHEMA_2_NORMALIZATION_NAMES["sigmoid"]
    grid_path = ROOT / "docs/results/normalizations/h100/results_bigram_backcopy.json"
    raw, doc = json.loads(grid_path.read_text()), results.read_results(grid_path)
    for metric in ("val_loss", "sink_rate", "kurtosis"):  # (schema 1: the metrics renamed too)
        assert (doc["cells"]["bigram_backcopy"][new_name][metric]
                == raw["cells"]["bigram_backcopy"][old_name][metric])
    assert old_name not in doc["cells"]["bigram_backcopy"]
    assert new_name in doc["grid_config"]["normalizations"]
    assert old_name not in doc["grid_config"]["normalizations"]
    run_path = ROOT / "docs/results/normalizations/cpu/shakespeare/sigmoid/seed_0/grid_run.json"
    run = results.read_results(run_path)  # no provenance: schema 0
    assert run["normalization"] == new_name
    assert run["series"]["sink_rate"] == json.loads(run_path.read_text())["series"]["sink_rate"]
    sweep = results.read_results(ROOT / "docs/results/sweep/normalizations/results.json")
    labels = [label for label in sweep["runs"] if new_name in label]
    assert len(labels) == 2 and not [label for label in sweep["runs"]
                                     if f"={old_name}," in label]
    for label in labels:
        run = sweep["runs"][label]
        assert run["label"] == label
        assert run["sweep_config"]["block"]["attention_normalization"] == new_name
    assert sum(new_name in values for values in sweep["config"]["compare_values"]) == 2
    other = {"cells": {"sigmoid": 1}, "activation": "sigmoid", "note": "sigmoid attention"}
    assert results.upgrade({"provenance": {"schema_version": 2}, **other}) == {
        "provenance": {"schema_version": 2}, "cells": {new_name: 1}, "activation": "sigmoid",
        "note": "sigmoid attention"}
    current = {"provenance": {"schema_version": results.RESULTS_SCHEMA_VERSION}, **other}
    assert results.upgrade(current) is current


def test_current_documents_are_not_renamed():
    doc = {"provenance": {"schema_version": results.RESULTS_SCHEMA_VERSION},
           "layers": {"centered_cosine": [1.0], "twonn": [2.0]}}  # (names no study writes now)
    assert results.upgrade(doc) is doc
    old = {"layers": {"centered_cosine": [1.0]}}  # no provenance: schema 0, read as 1
    assert results.upgrade(old) == {"layers": {"centered_average_cosine": [1.0]}}
    assert old == {"layers": {"centered_cosine": [1.0]}}  # the input is left as it was


def test_git_commit_says_when_the_code_is_not_the_commit(monkeypatch):
    root = str(pathlib.Path(results.__file__).resolve().parent.parent)
    answers = {("rev-parse", "HEAD"): "abc123\n", ("rev-parse", "--show-toplevel"): root + "\n",
               ("status",): " M anisotropy_jax/studies/sweep/grid.py\n"}
    monkeypatch.delenv(results.GIT_COMMIT_ENV, raising=False)
    monkeypatch.setattr(results, "_git", lambda *args: answers[args[:1] if args[0] == "status"
                                                               else args[:2]])
    assert results._git_commit() == "abc123+modified"
    answers[("status",)] = ""
    assert results._git_commit() == "abc123"
    # an exported tree inside another repository: that repository's HEAD is not this code's
    answers[("rev-parse", "--show-toplevel")] = "/somewhere/else\n"
    assert results._git_commit() is None
    monkeypatch.setenv(results.GIT_COMMIT_ENV, "def456")
    assert results._git_commit() == "def456"
    monkeypatch.delenv(results.GIT_COMMIT_ENV)
    monkeypatch.setattr(results, "_git", lambda *args: None)
    assert results._git_commit() is None


PLOTS = "anisotropy_jax.plotting.sweep"
TINY_RUNS = {"a": {"bias_norms": [0.0, 1.0, 4.0], "seq_len": 4,
                   "metrics": {"input_norm": {"mean": [1.0, 2.0, 3.0],
                                              "per_seed": [[1.0, 2.0, 3.0], [1.0, 2.1, 2.9]]}}}}


def _jobs(folder):
    return [results.FigureJob(PLOTS, name, (TINY_RUNS,), folder / f"{name}.png")
            for name in ("norms_figure", "cosine_figure", "attention_figure")]


def test_figure_workers_save_the_same_files_as_this_process(tmp_path):
    with results.FigureWorkers([PLOTS], 2) as workers:
        workers.save(_jobs(tmp_path / "workers"))
    for job in _jobs(tmp_path / "here"):
        results.draw_figure(job)
        assert job.path.read_bytes() == (tmp_path / "workers" / job.path.name).read_bytes()
    assert not list(tmp_path.rglob(".*.tmp"))


def test_a_failing_figure_raises_naming_it_and_lost_workers_fall_back_to_this_process(tmp_path):
    bad = results.FigureJob(PLOTS, "norms_figure", ({},), tmp_path / "bad.png")  # no run
    with results.FigureWorkers([PLOTS], 1) as workers:
        with pytest.raises(RuntimeError, match="(?s)figure bad.png: .*StopIteration"):
            workers.save([bad])
    with results.FigureWorkers([PLOTS], 1) as workers:  # its process died: drawn here
        workers._procs[0].kill()
        workers._procs[0].wait()
        workers.save(_jobs(tmp_path / "died"))
    with results.FigureWorkers([PLOTS], 0) as workers:  # no processes: drawn here
        workers.save(_jobs(tmp_path / "none"))
    for folder in ("died", "none"):
        assert sorted(p.name for p in (tmp_path / folder).iterdir()) == [
            "attention_figure.png", "cosine_figure.png", "norms_figure.png"]


def test_image_and_audio_figures_say_input_not_sentence():
    from anisotropy_jax.plotting import pretrained as plots

    metrics = {name: [0.1, 0.2] for name in ("average_cosine", "cross_sequence_cosine",
                                              "sampled_pair_cosine", "within_sequence_cosine",
                                              "drift_norm")}
    for modality, word in ((None, "sentence"), ("text", "sentence"), ("image", "input"),
                           ("audio", "input")):
        doc = {"layers": [0, 1], "metrics": {"trained": metrics},
               "data": {} if modality is None else {"modality": modality}}
        labels = [ax.get_ylabel() for ax in plots.cosine_by_layer(doc).axes]
        assert f"cross-{word} cosine" in labels and f"within-{word} cosine" in labels, labels
        scatter = plots.drift_vs_cosine(doc, cosine="cross_sequence_cosine").axes[0]
        assert scatter.get_ylabel() == f"cross-{word} cosine"
