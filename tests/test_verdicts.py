"""Each verdict of the reproduction on synthetic results: every outcome it can give, decided by
the causal or scale-controlled criterion of docs/SWEEP.md, "The controls" (anisotropy_jax/studies/report/)."""
import numpy as np

from anisotropy_jax.studies.report import verdict as verdict_lib
from anisotropy_jax.studies.report import verdicts as V
from anisotropy_jax.studies.report import verdicts_key_term

NORMS = [0.0, 4.0, 16.0, 64.0]  # operating point: index 2 (input cosine 0.3)
SEED_NOISE = np.array([[-1.0], [0.0], [1.0], [0.5], [-0.5]])  # 5 seeds, mean 0


def _metric(mean_curve, spread=1e-3):
    per_seed = np.asarray(mean_curve, float)[None, :] + spread * SEED_NOISE
    return {"mean": per_seed.mean(0).tolist(), "per_seed": per_seed.tolist()}


def _run(inputs, entropy, agreement, norm="post", label=None):
    return {"label": label or f"inputs={inputs}", "inputs": inputs, "bias_norms": NORMS,
            "sweep_config": {"model": {"norm_position": norm, "d_model": 64, "num_heads": 4,
                                       "init": "bert"}, "seq_len": 16},
            "metrics": {"attention_entropy_normalized": _metric(entropy),
                        "attention_query_agreement": _metric(agreement),
                        "input_cosine": _metric([0.0, 0.05, 0.3, 0.9], 0.0)}}


def _sweep(biased, fixed, matched, per_sequence=None, pre=None):
    """Each argument (entropy curve, agreement curve)."""
    runs = {"inputs=biased": _run("biased", *biased),
            "inputs=fixed_norm": _run("fixed_norm", *fixed),
            "inputs=norm_matched": _run("norm_matched", *matched)}
    if per_sequence:
        runs["inputs=per_sequence"] = _run("per_sequence", *per_sequence)
    if pre:
        runs["pre-LN: inputs=biased"] = _run("biased", *pre, norm="pre",
                                             label="pre-LN: inputs=biased")
    controls = {"inputs=biased": {"operating_points": [2]}}
    if pre:
        controls["pre-LN: inputs=biased"] = {"operating_points": [2]}
    return {"runs": runs, "controls": controls}


FLAT_AGREEMENT = [0.04] * 4
RISING_AGREEMENT = [0.04, 0.1, 0.3, 0.9]


def test_godey_3a_direction_norm_and_nothing():
    sharpening = [0.99, 0.98, 0.9, 0.3]
    direction = _sweep((sharpening, RISING_AGREEMENT), (sharpening, RISING_AGREEMENT),
                       ([0.99, 0.98, 0.95, 0.5], FLAT_AGREEMENT),
                       pre=([0.99, 0.995, 0.999, 1.0], RISING_AGREEMENT))
    v = V.godey_3a(direction)
    assert v.verdict == V.HOLDS, v.numbers
    assert any("pre-LN block" in n and "flattens" in n for n in v.numbers)
    assert "post-LN block" in v.scope and "5 seeds" in v.scope
    # the biased inputs sharpen, but only the norm-matched control does, not the direction alone
    norm_only = _sweep((sharpening, RISING_AGREEMENT), ([0.99, 0.99, 0.995, 0.999],
                                                        RISING_AGREEMENT),
                       ([0.99, 0.9, 0.5, 0.1], FLAT_AGREEMENT))
    assert V.godey_3a(norm_only).verdict == V.PARTLY
    flat = [0.99, 0.99, 0.99, 0.99]
    nothing = _sweep((flat, FLAT_AGREEMENT), (flat, FLAT_AGREEMENT), (flat, FLAT_AGREEMENT))
    assert V.godey_3a(nothing).verdict == V.FAILS


def test_godey_3b_at_the_operating_points_or_only_at_the_largest_s():
    h = [0.99, 0.98, 0.9, 0.3]
    categorical = _sweep((h, RISING_AGREEMENT), (h, RISING_AGREEMENT), (h, FLAT_AGREEMENT),
                         per_sequence=(h, RISING_AGREEMENT))
    v = V.godey_3b(categorical)
    assert v.verdict == V.HOLDS
    assert any("per-sequence − biased 0 [0, 0]" in n for n in v.numbers), v.numbers
    late = _sweep((h, [0.04, 0.04, 0.04, 0.9]), (h, FLAT_AGREEMENT), (h, FLAT_AGREEMENT))
    assert V.godey_3b(late).verdict == V.PARTLY
    never = _sweep((h, FLAT_AGREEMENT), (h, FLAT_AGREEMENT), (h, FLAT_AGREEMENT))
    assert V.godey_3b(never).verdict == V.FAILS


def test_sweep_verdicts_not_measured():
    h = [0.99, 0.98, 0.9, 0.3]
    only_control = _sweep((h, RISING_AGREEMENT), (h, RISING_AGREEMENT), (h, FLAT_AGREEMENT))
    del only_control["runs"]["inputs=fixed_norm"]
    assert V.godey_3a(only_control).verdict == V.NOT_MEASURED  # no fixed-norm control
    assert V.godey_3b(only_control).verdict == V.HOLDS
    no_points = _sweep((h, RISING_AGREEMENT), (h, RISING_AGREEMENT), (h, FLAT_AGREEMENT))
    no_points["controls"]["inputs=biased"]["operating_points"] = []
    assert "0.1–0.6" in V.godey_3b(no_points).numbers[0]
    pre_first = _sweep((h, RISING_AGREEMENT), (h, RISING_AGREEMENT), (h, FLAT_AGREEMENT))
    for run in pre_first["runs"].values():
        run["sweep_config"]["model"]["norm_position"] = "pre"
    assert V.godey_3a(pre_first).verdict == V.NOT_MEASURED
    assert V.godey_3a(None, "skipped").numbers == ("not measured: skipped",)


def _embeddings(lows_highs, final_losses=None):
    """The embedding study's gain direction per width; `final_losses` the last validation loss
    of each width's 5 seeds (default 4.0: learned, against ln 8192 = 9.01)."""
    widths = [32, 64, 128][:len(lows_highs)]
    cell = {k: [[0.0, v] for v in vals] for k, vals in (
        ("mean", [(lo + hi) / 2 for lo, hi in lows_highs]), ("low", [lo for lo, _ in lows_highs]),
        ("high", [hi for _, hi in lows_highs]))}
    finals = final_losses or [4.0] * len(widths)
    return {"widths": widths, "gain_direction": {"centered": {
        **cell, "positive": [[0, 5]] * len(widths), "n": 5}},
        "vocab_size": 8192, "seeds": [0, 1, 2, 3, 4],
        "val_loss": [[[9.05, final]] * 5 for final in finals]}


def _val_loss(seeds, steps, final=2.0):
    """A seeds summary's val_loss quantity: 5.5 at first, `final` at the last checkpoint."""
    curve = np.linspace(5.5, final, steps)
    return {"per_seed": [curve.tolist()] * seeds}


def test_mm_b_decides_at_equal_scale():
    assert V.mm_b(None, "", _embeddings([(0.01, 0.02), (0.001, 0.03)])).verdict == V.HOLDS
    assert V.mm_b(None, "", _embeddings([(-0.02, -0.01), (-0.03, -0.001)])).verdict == V.FAILS
    mixed = V.mm_b(None, "", _embeddings([(0.0004, 0.007), (-0.0014, 0.004)]))
    assert mixed.verdict == V.NOT_TESTABLE == "not testable at this scale"
    assert mixed.numbers[-1] == ("trend with width: mean d 0.0037 (D = 32) → 0.0013 (D = 64): it "
                                 "falls at every larger width")
    rising = V.mm_b(None, "", _embeddings([(-0.02, -0.01), (-0.01, 0.0), (0.0, 0.01)]))
    assert rising.numbers[-1].endswith("it rises at every larger width")
    bumpy = V.mm_b(None, "", _embeddings([(-0.02, -0.01), (0.0, 0.01), (-0.01, 0.0)]))
    assert bumpy.numbers[-1].endswith("it is not monotone in the width")
    smol = {"smollm2": {"model": {"causal": True}, "embeddings": {"trained": {
        "output_scaled_centred": 0.154, "output_equalnorm_centred": 0.187,
        "output_centred": 0.706, "final_gain_mean": 1.8}}}}
    v = V.mm_b(smol, "", _embeddings([(0.0004, 0.007)]))
    assert v.verdict == V.HOLDS and any(n.startswith("smollm2: d = -0.033") for n in v.numbers)
    assert V.mm_b(smol, "").verdict == V.NOT_MEASURED  # no seeds: no interval to decide on


def test_labels_and_precision():
    assert set(V.VERDICTS) == {"holds", "partly", "does not hold", "not testable at this scale",
                               "not testable with these models", "not measured"}
    assert {origin for *_, origin in V.CLAIMS.values()} == {
        verdict_lib.STATED, verdict_lib.RECONSTRUCTED, verdict_lib.OURS}
    assert verdict_lib.below_precision(0.1234, 0.12341) and not verdict_lib.below_precision(
        0.1234, 0.1236)
    assert [verdict_lib.all_or_some(x) for x in ([True, True], [True, False], [False], [])] == [
        V.HOLDS, V.PARTLY, V.FAILS, V.FAILS]


def _modality(trained, untrained_max, arch="transformer", seeds=(0, 1, 2, 3, 4)):
    labels = ["embeddings"] + [f"layer_{i}" for i in range(1, len(trained) - 1)] + ["final_norm"]
    return {"architecture": arch, "labels": labels, "untrained": untrained_max,
            "untrained_seeds": list(seeds),
            "per_layer": {"cross_sequence_cosine": {"trained": trained, "untrained": untrained_max,
                                                    "untrained_max": untrained_max}},
            "scope": {"modality": "image", "inputs": "real photographs",
                      "inputs_synthetic": False}}


def test_godey_1_is_partly_at_best_and_never_the_best_layer():
    high = _modality([0.1, 0.5, 0.6, 0.5, 0.2], [0.05] * 5)
    one_layer = _modality([0.1, 0.9, 0.1, 0.1, 0.1], [0.05] * 5)  # one layer only: not enough
    cnn = _modality([0.0] * 5, [0.9] * 5, arch="cnn")
    v = V.godey_1({"models": {"vit": high, "resnet": cnn}})
    assert v.verdict == V.PARTLY and "no trained CNN" in v.scope, v
    assert v.numbers[0].startswith("vit: 3 of 3 intermediate states")
    assert V.godey_1({"models": {"vit": high, "other": one_layer}}).verdict == V.PARTLY
    assert V.godey_1({"models": {"other": one_layer}}).verdict == V.FAILS
    one_seed = _modality([0.1, 0.5, 0.6, 0.5, 0.2], [0.05] * 5, seeds=(0,))
    assert V.godey_1({"models": {"vit": one_seed}}).verdict == V.NOT_MEASURED


def _pretrained(average, share, untrained_average, untrained_share, plain=None):
    """`share`: the massive-token-free centring's share (the decision); `plain`: the plain mean's
    (default: the same), the median's the same as `share`."""
    n = len(average)
    plain = share if plain is None else plain
    return {"model": {"state_labels": ["embeddings"] + [f"layer_{i}" for i in range(1, n)]},
            "metrics": {"trained": {"average_cosine": average,
                                    "centering_removed_share": plain,
                                    "centering_removed_share_without_massive": share,
                                    "centering_removed_share_median": share}},
            "untrained_seeds": {"seeds": [0, 1, 2, 3, 4], "metrics": {
                "average_cosine": [untrained_average] * 5,
                "centering_removed_share": [untrained_share] * 5,
                "centering_removed_share_without_massive": [untrained_share] * 5,
                "centering_removed_share_median": [untrained_share] * 5}},
            "correlations": {"trained": {"drift_norm_vs_average_cosine": {
                "spearman": 0.9, "spearman_p": 0.01, "n": n}}}}


def test_godey_2_asks_whether_centring_removes_what_training_added_in_two_networks():
    low = [0.05] * 5
    drift = _pretrained([0.1, 0.4, 0.5, 0.6, 0.2], [0.5, 0.9, 0.8, 0.7, 0.5], low, [None] * 5)
    direction = _pretrained([0.1, 0.4, 0.5, 0.6, 0.2], [0.5, 0.1, 0.2, 0.3, 0.5], low, [0.9] * 5)
    assert V.godey_2({"a": drift, "b": drift}).verdict == V.HOLDS
    assert V.godey_2({"a": direction, "b": direction}).verdict == V.FAILS
    assert V.godey_2({"a": direction, "b": drift}).verdict == V.PARTLY
    # one network that can test it decides nothing, whichever way it reads
    assert V.godey_2({"smollm2": drift}).verdict == V.NO_TEST
    assert V.godey_2({"m": direction}).verdict == V.NO_TEST
    below = _pretrained([0.1] * 5, [0.99] * 5, [0.3] * 5, [1.0] * 5)  # training lowered it
    v = V.godey_2({"minilm": below, "a": drift})
    assert v.verdict == V.NO_TEST and "at none of 3" in v.numbers[0]
    assert V.godey_2({}).verdict == V.NOT_MEASURED


def test_godey_2_decides_on_the_massive_token_free_centre_and_shows_the_plain_mean():
    """The artefact: a massive token drags the plain mean, whose centred cosine then exceeds the
    raw one (share < 0); the decision reads the centre without it, the plain mean is shown."""
    low = [0.05] * 5
    dragged = _pretrained([0.1, 0.4, 0.5, 0.6, 0.2], [0.5, 0.9, 0.8, 0.7, 0.5], low, [None] * 5,
                          plain=[0.5, -0.2, -0.3, -0.1, 0.5])
    v = V.godey_2({"a": dragged, "b": dragged})
    assert v.verdict == V.HOLDS
    assert "plain mean: 0 of 3" in v.numbers[0] and "per-dimension median: 3 of 3" in v.numbers[0]
    old_schema = {"a": {**dragged, "metrics": {"trained": {"average_cosine": [0.1] * 5,
                                                          "centering_removed_share": [0.9] * 5}}}}
    assert V.godey_2(old_schema).verdict == V.NOT_MEASURED  # no massive-token-free share


def _seeds(change_lows, contrast=None):
    """A training summary over 3 seeds: changes with the given lower bounds; `contrast` the
    (low, high) of the intervention's entropy difference at the last step."""
    changes = {name: {"mean": low + 0.1, "low": low, "high": low + 0.2}
               for name, low in change_lows.items()}
    quantities = {}
    if contrast is not None:
        lo, hi = contrast
        for removed in ("key_term", "shared_control", "key_term_minus_shared_control"):
            quantities[f"heads_mean/delta_entropy_{removed}"] = {
                "mean": [0.0, (lo + hi) / 2], "low": [0.0, lo], "high": [0.0, hi]}
        quantities["partial_within_layers/key_term_given_logit_spread"] = {
            "mean": [0.0, -0.3], "low": [0.0, -0.6], "high": [0.0, 0.1],
            "per_seed": [[0.0, r] for r in (-0.3, np.nan, -0.1, -0.5, -0.3)]}
    quantities["val_loss"] = _val_loss(5, 2)
    return {"seeds": [0, 1, 2, 3, 4], "steps": [0, 100], "quantities": quantities,
            "changes_first_to_last": changes}


def _curves(per_seed, steps=(0, 16, 64, 100, 1000, 4000)):
    """A training summary whose two trend quantities have the per-seed curves `per_seed`
    (seeds × checkpoints) at `steps`."""
    names = ("heads_mean/abs_mean_query_key_cosine", "intermediate_cross_sequence_cosine")
    values = np.asarray(per_seed, np.float64)
    return {"seeds": list(range(len(values))), "steps": list(steps),
            "quantities": {**{n: {"per_seed": values.tolist()} for n in names},
                           "val_loss": _val_loss(len(values), len(steps))}}


def test_trends_are_decided_after_the_transient_against_a_float64_reference():
    rng = np.random.default_rng(0)
    # A transient up to 0.9 at step 16, then a fall: first → last says "rises", the rule says no.
    falling = 0.3 + np.array([0.0, 0.6, 0.3, 0.2, 0.15, 0.1]) + 0.01 * rng.normal(size=(5, 6))
    rising = 0.3 + np.array([0.0, 0.6, 0.1, 0.1, 0.2, 0.3]) + 0.01 * rng.normal(size=(5, 6))
    trend = V.trend_after_transient(_curves(rising), "intermediate_cross_sequence_cosine")
    delta = rising[:, -1] - rising[:, 3]  # step 100 is the first checkpoint at or after it
    half = 2.7764451051977987 * delta.std(ddof=1) / np.sqrt(5)  # t(0.975, 4)
    assert (trend["from_step"], trend["to_step"], trend["peak_step"]) == (100, 4000, 16)
    np.testing.assert_allclose([trend["mean"], trend["low"], trend["high"]],
                               [delta.mean(), delta.mean() - half, delta.mean() + half], rtol=1e-12)
    np.testing.assert_allclose(trend["peak"], rising[:, 1].mean(), rtol=1e-12)
    for fn in (V.godey_4a, V.godey_4c):
        v = fn({"clm": _curves(rising), "mlm": _curves(rising)})
        assert v.verdict == V.HOLDS and "5 seeds" in v.numbers[0], fn.__name__
        assert "peaks at" in v.numbers[0] and "step 16" in v.numbers[0]
        late = rising[:, -1] - rising[:, 4]  # the sensitivity entry: from step 1,000, once
        assert v.numbers[0].count("step 1000: ") == 1 and f"step 1000: {late.mean():.3g} [" in (
            v.numbers[0])
        assert fn({"clm": _curves(falling), "mlm": _curves(rising)}).verdict == V.PARTLY
        assert fn({"clm": _curves(falling), "mlm": _curves(falling)}).verdict == V.FAILS
    short = _curves(rising[:, :4], steps=(0, 16, 64, 100))  # nothing after the transient
    assert V.godey_4c({"clm": short}).verdict == V.NOT_MEASURED
    assert V.godey_4a(None, "not run").verdict == V.NOT_MEASURED


def _shares(difference, entropy=0.7, undefined=0, seeds=5, heads=8):
    """A training summary whose per-head arrays (seeds, 2 checkpoints, 2 layers, heads / 2) give
    share(m) − share(control) = difference + per-seed noise of mean 0 at the last checkpoint;
    the first `undefined` heads of every seed NaN (about uniform attention there)."""
    noise = 0.01 * SEED_NOISE[:seeds, :, None, None]
    shape = (seeds, 2, 2, heads // 2)
    share_m = np.full(shape, 0.5) + np.concatenate([0 * noise, difference + noise], axis=1)
    share_m.reshape(seeds, 2, -1)[:, :, :undefined] = np.nan
    doc = _seeds({})
    doc["per_head"] = {"entropy_deficit_share_key_term": share_m,
                       "entropy_deficit_share_matched_control": np.full(shape, 0.5),
                       "attention_entropy_normalized": np.full(shape, entropy),
                       "matched_control_unmatched_fraction": np.full(shape, 0.25),
                       "matched_control_shortfall": np.full(shape, 0.01)}
    doc["seeds"] = list(range(seeds))
    doc["quantities"]["val_loss"] = _val_loss(seeds, 2)
    return doc


def test_godey_4b_is_the_deficit_share_against_the_matched_control():
    v = V.godey_4b({"clm": _shares(0.1), "mlm": _shares(0.05, undefined=3)})
    assert v.verdict == V.HOLDS, v.numbers
    assert "difference 0.1 [" in v.numbers[0] and "control unmatched in 0.25" in v.numbers[0]
    assert "15 of 40 seed-heads undefined" in v.numbers[1]
    assert V.godey_4b({"clm": _shares(0.1), "mlm": _shares(-0.05)}).verdict == V.PARTLY
    assert V.godey_4b({"clm": _shares(0.0), "mlm": _shares(-0.05)}).verdict == V.FAILS
    # Uniform attention passes nothing: below the mean deficit, or no head defined.
    assert V.godey_4b({"clm": _shares(0.1, entropy=0.97)}).verdict == V.NO_TEST
    assert V.godey_4b({"clm": _shares(0.1, undefined=8)}).verdict == V.NO_TEST
    assert V.godey_4b({"clm": _shares(0.1), "mlm": _shares(0.1, entropy=0.99)}
                      ).verdict == V.PARTLY
    # Results made before the matched control: not measured, the old contrast shown beside.
    old = V.godey_4b({"clm": _seeds({}, (0.01, 0.03))})
    assert old.verdict == V.NOT_MEASURED and "cannot fail" in old.numbers[0]
    assert ("undefined in 1 of 5 seeds: the per-head arrays that would say why are not in these "
            "results") in old.numbers[0]


def _stuck(doc, vocab=256):
    """The summary with every seed's validation loss at ln V (nothing learned: random bytes)."""
    seeds, steps = len(doc["seeds"]), len(doc["steps"])
    flat = {"per_seed": [[float(np.log(vocab))] * steps] * seeds}
    return {**doc, "quantities": {**doc["quantities"], "val_loss": flat}}


def test_training_verdicts_are_not_testable_where_the_models_did_not_learn():
    """studies.training.learned: an objective whose final validation loss stays at ln V is not
    testable in 4a, 4b and 4c (never "holds"; NO_TEST when no objective learned), as a width of
    the embedding study is in Machina & Mercer b; the same results with a loss that fell keep
    their verdicts."""
    rising = 0.3 + np.array([0.0, 0.6, 0.1, 0.1, 0.2, 0.3]) + 0.01 * SEED_NOISE
    falling = 0.3 + np.array([0.0, 0.6, 0.3, 0.2, 0.15, 0.1]) + 0.01 * SEED_NOISE
    for fn in (V.godey_4a, V.godey_4c):
        assert fn({"clm": _curves(rising)}).verdict == V.HOLDS
        v = fn({"clm": _stuck(_curves(rising)), "mlm": _stuck(_curves(rising), 257)})
        assert v.verdict == V.NO_TEST, fn.__name__
        assert v.numbers[0].startswith("clm (5 seeds): not testable, the model did not learn: "
                                       "final validation loss seed 0: 5.55, ")
        assert "(1 − 0.1)·ln 257" in v.numbers[1]
        assert fn({"clm": _curves(rising), "mlm": _stuck(_curves(rising), 257)}
                  ).verdict == V.PARTLY
        assert fn({"clm": _curves(falling), "mlm": _stuck(_curves(rising), 257)}
                  ).verdict == V.FAILS
    assert V.godey_4b({"clm": _shares(0.1)}).verdict == V.HOLDS
    stuck = V.godey_4b({"clm": _stuck(_shares(0.1))})
    assert stuck.verdict == V.NO_TEST and "did not learn" in stuck.numbers[0]
    assert V.godey_4b({"clm": _shares(0.1), "mlm": _stuck(_shares(0.1), 257)}
                      ).verdict == V.PARTLY
    no_loss = _shares(0.1)
    del no_loss["quantities"]["val_loss"]
    assert V.godey_4b({"clm": no_loss}).verdict == V.NO_TEST  # not recorded: not passed
    assert V.mm_b(None, "", _embeddings([(0.01, 0.02)])).verdict == V.HOLDS
    ln_v = float(np.log(8192))
    flat = V.mm_b(None, "", _embeddings([(0.01, 0.02), (0.001, 0.03)], [ln_v, ln_v]))
    assert flat.verdict == V.NO_TEST and "not testable, the model did not learn" in (
        flat.numbers[0])
    one = V.mm_b(None, "", _embeddings([(0.01, 0.02), (0.001, 0.03)], [4.0, ln_v]))
    assert one.verdict == V.NOT_TESTABLE and "did not learn" in one.numbers[1]
    assert "did not learn" not in one.numbers[0]


def test_the_key_term_share_test_counts_undefined_heads_and_seeds():
    nan = np.nan
    share_m = np.array([[0.5, nan, 0.7], [nan, nan, nan], [0.6, 0.4, nan]])
    test = verdicts_key_term.key_term_share_test(share_m, np.full((3, 3), 0.3),
                                                 np.full((3, 3), 0.5))
    np.testing.assert_allclose(test["per_seed"], [0.3, nan, 0.2])
    assert test["undefined_heads"] == 5 and test["seeds_defined"] == 2
    assert test["status"] == "fails"  # mean 0.25, t(0.975, 1)·s/√2 = 12.7·0.05 > 0.25
    assert np.isfinite(test["interval"]["low"]) and test["mean_deficit"] == 0.5


def _pretrained_embeddings(model_type, causal, embeddings):
    return {"model": {"model_type": model_type, "causal": causal},
            "embeddings": {"trained": embeddings}}


def test_mm_a():
    iso = {"input_centred": 0.95, "output_centred": 0.97}
    assert V.mm_a({"p": _pretrained_embeddings("gpt_neox", True, iso)}).verdict == V.HOLDS
    assert V.mm_a({"p": _pretrained_embeddings("gpt_neox", True, {**iso, "output_centred": 0.5})}
                  ).verdict == V.FAILS
    assert V.mm_a({"l": _pretrained_embeddings("llama", True, iso)}).verdict == V.NOT_MEASURED


def _depth(rank_last, cos_last, zero=True):
    curves = {"effective_rank": {"mean": [[8.0, 3.0, rank_last]] * 2},
              "average_cosine": {"mean": [[0.0, 0.3, cos_last]] * 2}}
    return {"bias_norms": [0.0 if zero else 1.0, 4.0], "num_layers": 2,
            "depth_config": {"num_seeds": 5},
            "stacks": {"attention_only_d32": {"architecture": "attention_only", "curves": curves},
                       "post_d32": {"architecture": "post", "curves": curves}}}


def test_depth_verdicts():
    assert V.depth_a(_depth(1.01, 0.9)).verdict == V.HOLDS
    assert V.depth_b(_depth(1.01, 0.9)).verdict == V.HOLDS
    assert V.depth_a(_depth(2.5, 0.9)).verdict == V.FAILS
    assert V.depth_b(_depth(2.5, 0.9)).verdict == V.NOT_MEASURED  # no collapse to judge
    assert V.depth_b(_depth(1.01, 0.2)).verdict == V.FAILS
    assert V.depth_a(_depth(1.01, 0.9, zero=False)).verdict == V.NOT_MEASURED
    knife_edge = V.depth_b(_depth(1.01, 0.50001))  # passes, by less than the printed digits
    assert knife_edge.verdict == V.HOLDS and verdict_lib.PRECISION_NOTE in knife_edge.numbers[0]
    assert verdict_lib.PRECISION_NOTE not in V.depth_b(_depth(1.01, 0.9)).numbers[0]
