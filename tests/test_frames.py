"""Results as tables (`anisotropy_jax.results.load`): every committed result of every study reads
into one tidy DataFrame (and `show` prints it); each cell equals the number of the file it came
from, found by plain loops over the JSON / npz (the reference); every metric a study wrote is a
column, under the name every study gives it."""
import json
import pathlib
import shutil

import numpy as np
import pytest

from anisotropy_jax import commands, frames, metrics, results

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
STUDIES = ("cross_modal", "depth", "embeddings", "extreme", "normalizations", "pretrained",
           "report", "sweep", "train")


def _folders(study: str) -> list[pathlib.Path]:
    found = sorted({p.parent for p in (RESULTS / study).rglob("results.json")})
    return found + ([RESULTS / study] if study == "report" else [])


_ROWS: dict = {}


def _cell(table, value_column: str, **where):
    """The one row of `table` whose columns `where` hold these values (None: empty)."""
    names = tuple(sorted(where))
    key = (id(table), names)
    if key not in _ROWS:  # one pass over the table per set of columns, then a dict
        found: dict = {}
        columns = [table[n].astype(object).where(table[n].notna(), None) for n in names]
        for position, values in enumerate(zip(*columns)):
            found.setdefault(values, []).append(position)
        _ROWS.clear()
        _ROWS[key] = (table, found)
    positions = _ROWS[key][1].get(tuple(where[n] for n in names), [])
    assert len(positions) == 1, (where, len(positions))
    return table[value_column].iloc[positions[0]]


def _number(value) -> float:
    return np.nan if value is None else float(value)


@pytest.mark.parametrize("study", STUDIES)
def test_every_committed_result_loads_and_shows(study):
    folders = _folders(study)
    assert folders
    for folder in folders:
        table = results.load(folder)
        assert len(table) and table["study"].notna().all(), folder
        assert list(table.columns[:2]) == [c for c in frames.INDEX if c in table.columns][:2]
        assert commands.show(str(folder)).strip(), folder


def test_the_sweep_table_holds_every_per_seed_value_and_the_free_sink_rate(tmp_path):
    """The position-free sink rate exists only in results.json (not in results.npz)."""
    shutil.copy(RESULTS / "sweep/sink_rates_h100/results_pallas.json", tmp_path / "results.json")
    doc = results.read_results(tmp_path / "results.json")
    table = results.load(tmp_path)
    for label, run in doc["runs"].items():
        for name, values in run["metrics"].items():
            assert name in table.columns
            for seed, row in enumerate(values["per_seed"]):
                for s, value in zip(run["bias_norms"], row):
                    assert _cell(table, name, run=label, seed=seed, s=s) == pytest.approx(
                        _number(value), nan_ok=True)
    assert table["attention_free_sink_rate"].notna().sum() == sum(
        np.size(run["metrics"]["attention_free_sink_rate"]["per_seed"])
        for run in doc["runs"].values())


def test_the_sweep_per_head_metrics_come_from_its_npz():
    folder = RESULTS / "sweep/normalizations"
    table = results.load(folder)
    with np.load(folder / "results.npz") as arrays:
        label = str(arrays["labels"][2])
        prefix = commands.frames.grids._safe_name(label) + "__per_head__"
        per_head = arrays[prefix + "attention_max"]  # (seeds, s, heads)
        norms = arrays[commands.frames.grids._safe_name(label) + "__bias_norms"]
    for seed, s, head in [(0, 0, 0), (2, len(norms) - 1, per_head.shape[2] - 1), (1, 3, 5)]:
        assert _cell(table, "attention_max", run=label, seed=seed, s=float(norms[s]),
                     head=head) == per_head[seed, s, head]


def test_the_training_table_is_every_group_of_its_analysis():
    doc = json.loads((RESULTS / "train/clm_small/seed_0/results.json").read_text())
    table = results.load(RESULTS / "train/clm_small/seed_0")
    for i, step in enumerate(doc["steps"]):
        for name, values in doc["layers"].items():
            for state, value in enumerate(values[i]):
                assert _cell(table, name, step=step, state=state, head=None) == value
        for name, values in doc["heads"].items():
            for layer, row in enumerate(values[i]):
                for head, value in enumerate(row):
                    assert _cell(table, name, step=step, layer=layer + 1, head=head) == value
        for name, values in doc["final_norm"].items():
            assert _cell(table, name, step=step, state=None, head=None) == values[i]
        assert _cell(table, "rho/key_term_share", step=step, state=None, head=None) == \
            doc["correlation"]["key_term_share"]["rho"][i]
    for step, loss in doc["training"]["val_loss"]:
        assert _cell(table, "val_loss", step=step, state=None, head=None) == loss


def test_a_seeds_run_is_its_seeds_training_tables():
    table = results.load(RESULTS / "train/mlm_small")
    assert sorted(table["seed"].unique()) == [0, 1, 2] and set(table["study"]) == {"seeds"}
    one = results.load(RESULTS / "train/mlm_small/seed_1").drop(columns="study")
    mine = table[table["seed"] == 1].drop(columns=["study", "seed"]).reset_index(drop=True)
    assert mine[one.columns].equals(one)


def test_pretrained_rows_per_weights_seed_and_state_under_the_layer_metric_names():
    folder = RESULTS / "report/pretrained/smollm2"
    doc = json.loads((folder / "results.json").read_text())
    table = results.load(folder)
    names = set(doc["metrics"]["trained"])
    assert names <= set(metrics.LAYER_METRICS) and names <= set(table.columns)
    labels = doc["model"]["state_labels"]
    for name in names:
        for state, value in enumerate(doc["metrics"]["trained"][name]):
            assert _cell(table, name, weights="trained", state=state) == pytest.approx(
                _number(value), nan_ok=True)
            assert _cell(table, "label", weights="trained", state=state) == labels[state]
        for seed, row in zip(doc["untrained_seeds"]["seeds"],
                             doc["untrained_seeds"]["metrics"][name]):
            assert _cell(table, name, weights="untrained", seed=seed, state=len(row) - 1) == \
                pytest.approx(_number(row[-1]), nan_ok=True)
    assert _cell(table, "drift_norm_vs_average_cosine/spearman", weights="trained",
                 state=None) == doc["correlations"]["trained"]["drift_norm_vs_average_cosine"][
                     "spearman"]


def test_extreme_and_sweep_name_the_sinks_alike_and_heads_are_rows():
    folder = RESULTS / "extreme/smoke"
    doc = json.loads((folder / "results.json").read_text())
    table = results.load(folder)
    name, entry = next(iter(doc["models"].items()))
    kind, measured = next(iter(entry["inputs"].items()))
    attention = measured["trained"]["attention"]
    where = dict(model=name, inputs=kind, weights="trained")
    for layer, value in enumerate(attention["free_sink_rate"]):
        assert _cell(table, "attention_free_sink_rate", layer=layer + 1, head=None,
                     **where) == pytest.approx(_number(value), nan_ok=True)
    for layer, row in enumerate(attention["head_sink_rate"]):
        for head, value in enumerate(row):
            assert _cell(table, "attention_sink_rate", layer=layer + 1, head=head,
                         **where) == pytest.approx(_number(value), nan_ok=True)
    seed_run = measured["untrained"]["per_seed"][1]["states"]
    for state, value in enumerate(seed_run["kurtosis"]):
        assert _cell(table, "kurtosis", weights="untrained", seed=1, state=state, model=name,
                     inputs=kind) == pytest.approx(_number(value), nan_ok=True)
    assert "sink_rate" not in table.columns and "attention_noop_score" in table.columns


def test_depth_reads_every_seed_from_its_npz_and_the_means_without_it(tmp_path):
    doc = json.loads((RESULTS / "depth/smoke/results.json").read_text())
    means = results.load(RESULTS / "depth/smoke")
    stack, entry = next(iter(doc["stacks"].items()))
    for s_index, s in enumerate(doc["bias_norms"]):
        for layer, value in enumerate(entry["per_layer"]["output_cosine"][s_index]):
            assert _cell(means, "output_cosine", run=stack, seed=None, s=s,
                         layer=layer + 1) == pytest.approx(_number(value), nan_ok=True)
        assert _cell(means, "residual_rms", run=stack, seed=None, s=s, layer=0) == \
            pytest.approx(entry["curves"]["residual_rms"]["mean"][s_index][0])
    rng = np.random.default_rng(0)
    seeds, norms, num_layers, num_heads = 2, len(doc["bias_norms"]), doc["num_layers"], 3
    arrays = {f"{stack}__input__residual_rms": rng.normal(size=(seeds, norms)),
              f"{stack}__output_cosine": rng.normal(size=(seeds, norms, num_layers)),
              f"{stack}__per_head__attention_max": rng.normal(size=(seeds, norms, num_layers,
                                                                     num_heads))}
    (tmp_path / "results.json").write_text(json.dumps({**doc, "stacks": {stack: entry}}))
    np.savez(tmp_path / "results.npz", **arrays)
    table = results.load(tmp_path)
    for seed, s_index, layer, head in np.ndindex(seeds, norms, num_layers, num_heads):
        s = doc["bias_norms"][s_index]
        assert _cell(table, "attention_max", seed=seed, s=s, layer=layer + 1, head=head) == \
            arrays[f"{stack}__per_head__attention_max"][seed, s_index, layer, head]
        assert _cell(table, "output_cosine", seed=seed, s=s, layer=layer + 1, head=None) == \
            arrays[f"{stack}__output_cosine"][seed, s_index, layer]
        assert _cell(table, "residual_rms", seed=seed, s=s, layer=0, head=None) == \
            arrays[f"{stack}__input__residual_rms"][seed, s_index]


def test_normalizations_read_every_checkpoint_of_each_run_under_todays_names():
    folder = RESULTS / "normalizations/cpu"
    table = results.load(folder)
    run = json.loads((folder / "shakespeare/sigmoid/seed_1/grid_run.json").read_text())
    cell = dict(dataset="shakespeare", normalization="sigmoid_per_query_bias", seed=1)
    for i, step in enumerate(run["steps"]):
        assert _cell(table, "centered_average_cosine", step=step, **cell) == \
            run["series"]["centered_cosine"][i]
        assert _cell(table, "attention_sink_rate", step=step, **cell) == \
            run["series"]["sink_rate"][i]
        assert _cell(table, "mean_query_key_abs_cosine", step=step, **cell) == \
            run["series"]["abs_cos_qk"][i]


def test_a_checkpoint_series_has_its_state_labels_and_the_cross_modal_study_its_depths(
        tmp_path):
    doc = json.loads((RESULTS / "train/clm_small/seed_0/results.json").read_text())
    labels = ["embeddings", "layer_1", "layer_2", "layer_3", "layer_4"]
    series = {**doc, "provenance": {**doc["provenance"], "schema_version": 3, "study": "series"},
              "state_labels": labels, "checkpoints": [f"step_{s}" for s in doc["steps"]]}
    (tmp_path / "results.json").write_text(json.dumps(series))
    table = results.load(tmp_path)
    assert set(table["study"]) == {"series"}
    assert list(table[(table["step"] == 300) & table["state"].notna()]["label"]) == labels
    modal = results.load(RESULTS / "cross_modal/cross_modal")
    entry = json.loads((RESULTS / "cross_modal/cross_modal/results.json").read_text())[
        "models"]["Whisper-base"]
    for state, depth in enumerate(entry["depth"]):
        row = modal[(modal["model"] == "Whisper-base") & (modal["weights"] == "trained")
                    & (modal["state"] == state)]
        assert row["relative_depth"].item() == depth and row["modality"].item() == "audio"
        assert row["average_cosine"].item() == pytest.approx(entry["trained"][state])


def test_intrinsic_dimension_is_a_layer_metric_of_the_runs_that_measured_it():
    for folder in ("extreme/intrinsic_dimension/training/clm_small",
                   "extreme/intrinsic_dimension/pretrained/all-MiniLM-L6-v2"):
        table = results.load(RESULTS / folder)
        measured = table[table["state"].notna()]
        assert measured[["twonn_dimension", "gride_dimension"]].notna().any().all(), folder


def test_errors_are_one_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        results.load(tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="no results.json: not a finished run"):
        results.load(tmp_path)
    (tmp_path / "results.json").write_text('{"something": 1}')
    with pytest.raises(ValueError, match="not the results of a study of this package"):
        results.load(tmp_path)
    (tmp_path / "results.json").write_text(json.dumps(
        {"provenance": {"study": "depth", "schema_version": 3}, "bias_norms": [0.0],
         "stacks": {"post_d8": {"per_layer": {"output_cosine": [[0.1, 0.2], [0.3]]}}}}))
    with pytest.raises(ValueError, match=r"cannot read these depth results as a table"):
        results.load(tmp_path)
    doc = json.loads((RESULTS / "depth/smoke/results.json").read_text())
    doc["provenance"].update(schema_version=results.RESULTS_SCHEMA_VERSION + 1)
    (tmp_path / "results.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"results schema \d+, newer than this anisotropy_jax"):
        results.load(tmp_path)
