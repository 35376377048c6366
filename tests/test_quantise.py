"""models.formats.quantise: weights through GGUF types and back (the quantisation control of
docs/EXTREME.md), and the control's per-model headline (benchmarks/quantisation_control.py)."""
import numpy as np
import pytest

from anisotropy_jax.models.formats import quantise

pytest.importorskip("gguf")


def _gaussian(rows=16, cols=512, seed=0):
    return np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)


def test_q4_k_blocks_are_144_bytes_per_256_values_and_read_back_by_gguf():
    x = _gaussian()
    assert quantise.q4_k_blocks(x).shape == (16, 2 * 144)
    y = quantise.round_trip(x, "Q4_K")
    assert y.shape == x.shape and y.dtype == np.float32
    # per sub-block of 32: within one quantisation step of its min-max range (15 steps)
    sub = x.reshape(-1, 32)
    step = (np.maximum(sub.max(1), 0) - np.minimum(sub.min(1), 0)) / 15
    assert np.all(np.abs(y - x).reshape(-1, 32).max(1) <= step * 1.01)


def test_q4_k_error_is_that_of_a_4_bit_type_and_q8_0_far_smaller():
    x = _gaussian(seed=1)
    rel = {k: np.linalg.norm(quantise.round_trip(x, k) - x) / np.linalg.norm(x)
           for k in quantise.KINDS}
    assert rel["Q8_0"] < 0.01 < rel["Q5_0"] < 0.7 * rel["Q4_0"]
    assert 0.03 < rel["Q4_K"] < 1.2 * rel["Q4_1"] and rel["Q4_0"] < 0.1


def test_zero_and_non_negative_rows_round_trip():
    zeros = np.zeros((2, 256), np.float32)
    assert np.array_equal(quantise.round_trip(zeros, "Q4_K"), zeros)
    positive = np.abs(_gaussian(2, 256)) + 1.0  # min clamped to 0, as llama.cpp's Q4_K does
    assert np.abs(quantise.round_trip(positive, "Q4_K") - positive).max() < 0.2


def test_a_row_of_partial_blocks_is_refused():
    with pytest.raises(ValueError, match="whole blocks"):
        quantise.round_trip(_gaussian(2, 384), "Q4_K")


def test_round_trip_params_quantises_whole_block_kernels_and_embeddings_only():
    params = {"dense": {"kernel": _gaussian(256, 8), "bias": np.ones(8, np.float32)},
              "narrow": {"kernel": _gaussian(100, 8)},
              "table": {"embedding": _gaussian(10, 256)}}
    out, counts = quantise.round_trip_params(params, "Q4_K")
    assert counts["quantised"] == 256 * 8 + 10 * 256 and counts["kept"] == 8 + 100 * 8
    assert 0.03 < counts["rel_rmse"] < 0.15
    assert np.array_equal(out["dense"]["bias"], params["dense"]["bias"])
    assert np.array_equal(out["narrow"]["kernel"], params["narrow"]["kernel"])
    assert not np.array_equal(out["dense"]["kernel"], params["dense"]["kernel"])
    # the kernel's blocks run along its input axis: a column is one GGUF row
    np.testing.assert_array_equal(out["dense"]["kernel"][:, 3],
                                  quantise.round_trip(params["dense"]["kernel"][:, 3][None],
                                                      "Q4_K")[0])


def test_the_controls_headline_leaves_the_embedding_state_out():
    from benchmarks.quantisation_control import headline

    per = {"states": {"kurtosis": [99.0, 3.0, 5.0], "massive_top": [-500.0, 2.0, -7.0],
                      "massive_top_ratio": [1e4, 10.0, 30.0]},
           "attention": {"sink_rate": [0.2, 0.9]}}
    assert headline(per) == {"max_kurtosis": 5.0, "max_abs_activation": 7.0,
                             "max_top_ratio": 30.0, "max_sink_rate": 0.9,
                             "mean_sink_rate": pytest.approx(0.55), "sink_blocks": 1}


def test_the_bound_table_shows_each_type_beside_float32(tmp_path):
    import json

    from anisotropy_jax import doc_tables
    from anisotropy_jax.studies.extreme import report

    head = {"max_kurtosis": 100.0, "max_abs_activation": 10.0, "max_top_ratio": 50.0,
            "max_sink_rate": 0.9, "mean_sink_rate": 0.5, "sink_blocks": 3}
    kinds = {"float32": {"parameters": None, "headline": head},
             "Q4_K": {"parameters": {"quantised": 3, "kept": 1, "rel_rmse": 0.08},
                      "headline": {**head, "max_kurtosis": 90.0}}}
    (tmp_path / "a.json").write_text(json.dumps({"models": {"mpnet": {"kinds": kinds},
                                                            "mine": {"kinds": kinds}}}))
    lines = report.quantisation_table(tmp_path).splitlines()
    assert len(lines) == 2 + 4 and lines[2].startswith("| all-mpnet-base-v2 | float32 | – | – |")
    assert "| Q4_K | 75.0% | 0.0800 | 90.0 (-10.0%) | 10.0 (+0.0%) | 50× (+0.0%) |" in lines[3]
    assert lines[4].startswith("| mine | float32 |")
    assert "extreme_quantisation" in doc_tables.__doc__
