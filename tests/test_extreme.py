"""The extreme-token study (studies/extreme) on tiny random-init models: every per-layer
statistic of one jitted forward against a float64 numpy reference computed from the same
forward's probes (so the wiring — which block, which mask, which queries — is checked, not the
metrics again: tests/test_extreme_metrics.py tests those), the storage (nothing grows
with L), the per-layer summary, the inputs, and the whole study in process on a tiny BERT
checkpoint with a toy tokenizer."""
import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from anisotropy_jax import commands
from anisotropy_jax.config import ConfigError, from_mapping
from anisotropy_jax.configs.extreme import ExtremeConfig
from anisotropy_jax.configs import extreme as extreme_settings
from anisotropy_jax.models.families import bert, gpt2
from anisotropy_jax.results import Provenance
from anisotropy_jax.studies.extreme import analysis, inputs, layers, report, summary
from anisotropy_jax.studies.pretrained import analysis as pretrained
from tests import reference
from tests.test_pretrained import TOY_HF, _random_params, _to_hf, _write_checkpoint, toy_tokenizer

TINY_GPT2 = {"model_type": "gpt2", "n_embd": 16, "n_head": 4, "n_layer": 2, "vocab_size": 40,
             "n_positions": 32}


def _model(name):
    """(family, config, params with every leaf random and large enough for peaked attention)."""
    if name == "bert":
        cfg = bert.config_from_hf({**TOY_HF, "vocab_size": 40})
        return bert.FAMILY, cfg, _random_params(cfg, seed=1)
    cfg = gpt2.config_from_hf(TINY_GPT2)
    params = gpt2.FAMILY.init_params(cfg, jax.random.key(3))
    rng = np.random.default_rng(4)
    return gpt2.FAMILY, cfg, jax.tree.map(
        lambda p: jnp.asarray(0.4 * rng.normal(size=p.shape), jnp.float32), params)


def _batch(length=10):
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, 40, size=(3, length)).astype(np.int32)
    mask = np.ones((3, length), bool)
    mask[1, length - 3:] = False  # a padded sequence: its padding is neither key nor query
    return (tokens, np.zeros_like(tokens), mask), mask


def _softmax64(q, k, visible):
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    logits = np.where(visible, logits, -np.inf)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True), logits


def _reference_block(block, mask, causal, control_key=None):
    """α_0, the split and the no-op score of one block, in float64 loops; with `control_key`
    (B,), the carried share for that key in the place of key 0 ("control_query_carried")."""
    q, k, v = (np.asarray(block[n], np.float64) for n in ("queries", "keys", "values"))
    b, l, h, dh = q.shape
    visible = np.broadcast_to(mask[:, None, None, :] & (np.tril(np.ones((l, l), bool)) if causal
                                                        else True), (b, 1, l, l))
    attn, logits = _softmax64(q, k, visible)
    alpha0 = np.array([[np.mean([attn[i, j, t, 0] for t in range(l) if mask[i, t]])
                        for j in range(h)] for i in range(b)])
    qbar = q[mask].mean(0)  # (H, Dh)
    shared, excess = np.zeros(h), np.zeros(h)
    positive, carried = np.zeros(h), np.zeros(h)
    key = np.zeros(b, int) if control_key is None else np.asarray(control_key)
    for j in range(h):
        rows = [(i, t) for i in range(b) for t in range(l)
                if mask[i, t] and visible[i, 0, t, key[i]] and visible[i, 0, t].sum() > 1]
        for i, t in rows:
            vis = visible[i, 0, t]
            delta = k[i, key[i], j] - k[i, vis, j].mean(0)
            one_excess, one_shared = q[i, t, j] @ delta / np.sqrt(dh), qbar[j] @ delta / np.sqrt(dh)
            excess[j] += one_excess / len(rows)
            shared[j] += one_shared / len(rows)
            positive[j] += (one_excess > 0) / len(rows)
            carried[j] += (one_excess > 0 and one_shared >= one_excess / 2) / len(rows)
    if control_key is not None:
        return {"control_query_carried": carried}
    vnorm = np.linalg.norm(v, axis=-1)  # (B, L, H)
    mean_v = np.array([vnorm[i][mask[i]].mean(0) for i in range(b)])
    return {"sink_score": alpha0, "excess": excess, "shared": shared,
            "query_positive": positive, "query_carried": carried,
            "noop_score": alpha0 * vnorm[:, 0, :] / mean_v}


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_layer_statistics_match_float64_references(name):
    family, cfg, params = _model(name)
    x, mask = _batch()
    control = np.array([5, 2, 7], np.int32)  # a key other than 0 per sequence (row 1: 7 valid)
    stats = layers.to_host(layers.layer_statistics_fn(family, cfg, 4, 2)(params, x, mask,
                                                                          control))
    _, probes = family.apply(cfg, params, *x)
    assert len(stats["attention"]) == len(probes["blocks"]) == 2
    for got, block in zip(stats["attention"], probes["blocks"]):
        ref = _reference_block(block, mask, family.causal)
        ref.update(_reference_block(block, mask, family.causal, control))
        for key, value in ref.items():
            np.testing.assert_allclose(got[key], value, rtol=2e-4, atol=2e-5, err_msg=key)
    states = np.asarray(family.states(probes, cfg), np.float64)
    assert len(stats["states"]) == len(states) == 3 + family.has_final_norm(cfg)
    for got, x_BxLxD in zip(stats["states"], states):
        tokens = x_BxLxD[mask]
        first = np.argmax(np.abs(np.where(mask[..., None], x_BxLxD, 0)).reshape(-1))
        assert got["top_values"][0] == pytest.approx(x_BxLxD.reshape(-1)[first], rel=1e-6)
        assert got["inf_norm"][1] == pytest.approx(np.abs(x_BxLxD[1][mask[1]]).max(), rel=1e-6)
        dev = x_BxLxD[1][mask[1]] - x_BxLxD[1][mask[1]].mean()
        assert got["kurtosis"][1] == pytest.approx(np.mean(dev ** 4) / np.mean(dev ** 2) ** 2,
                                                   rel=1e-4)
        units = tokens / np.linalg.norm(tokens, axis=1, keepdims=True)
        cos = units @ units.T
        n = len(tokens)
        assert got["average_cosine"] == pytest.approx((cos.sum() - n) / (n * (n - 1)), abs=1e-5)
        without = x_BxLxD[:, 1:][mask[:, 1:]]
        eig = np.linalg.eigvalsh(np.cov(without.T, bias=True))
        assert got["top_pc_share_without_first"] == pytest.approx(eig[-1] / eig.sum(), rel=1e-4)
        units = without / np.linalg.norm(without, axis=1, keepdims=True)
        n = len(without)
        assert got["average_cosine_without_first"] == pytest.approx(
            ((units @ units.T).sum() - n) / (n * (n - 1)), abs=1e-5)
        # float64 loops over the pooled tokens but each sequence's first (identical points, e.g.
        # one token at one position of two sequences in the embeddings, counted once)
        assert got["twonn_dimension"] == pytest.approx(reference.twonn(without), rel=1e-4)
        assert got["gride_dimension"] == pytest.approx(
            reference.gride(without, *layers.GRIDE_RANKS), rel=1e-4)
        norms = np.linalg.norm(x_BxLxD, axis=-1)
        assert got["first_token_norm_ratio"] == pytest.approx(np.mean(
            [norms[b, 0] / norms[b, 1:][mask[b, 1:]].mean() for b in range(3)]), rel=1e-5)
        for key, rows in (("top_pc_share_unit", tokens), ("top_pc_share_unit_without_first",
                                                          without)):
            unit_rows = rows / np.linalg.norm(rows, axis=1, keepdims=True)
            eig = np.linalg.eigvalsh(np.cov(unit_rows.T, bias=True))
            assert got[key] == pytest.approx(eig[-1] / eig.sum(), rel=1e-4), key


def test_storage_does_not_grow_with_length():
    """No L × L (nor L) array is kept: the bytes of one forward are the same at L = 8 and 16."""
    family, cfg, params = _model("gpt2")
    fn = layers.layer_statistics_fn(family, cfg, 4, 2)
    short, long = (layers.storage_bytes(layers.to_host(fn(params, *_batch(n)))) for n in (8, 16))
    assert short == long
    # B = 3, H = 4, 2 blocks; 4 states (GPT-2's last after the final norm), top_k = 4,
    # top_dims = 2 (floats kept as float64, coordinates and counts as int32)
    per_block = 4 * 3 * 4 * 8 + 3 * 4 * 4 + 6 * 4 * 8  # (B, H) floats, free_sink_key; (H,)
    per_state = (2 * 4 * 8 + 3 * 4 * 4  # top values and ratios; their coordinates
                 + 3 * 8 + 2 * 3 * 4 + 2 * 3 * 8  # median; massive/relative counts; kurtosis, ∞
                 + 11 * 8 + 2 * 4)  # eleven scalars; the top CC_d dimensions
    assert short == 2 * per_block + 4 * per_state


def test_summary_rates_and_shared_share():
    block = {"sink_score": np.array([[0.5, 0.1], [0.4, np.nan], [0.2, 0.9]]),
             "free_sink_score": np.array([[0.5, 0.4], [0.4, 0.2], [0.3, 0.9]]),
             "free_sink_key": np.array([[0, 3], [0, 1], [2, 0]]),
             "noop_score": np.ones((3, 2)), "output_ratio": np.ones((3, 2)),
             "excess": np.array([2.0, 1.0]), "shared": np.array([1.5, 3.0]),
             "query_specific": np.array([0.5, -2.0]),
             "query_positive": np.array([1.0, 0.9]), "query_carried": np.array([0.5, 0.2]),
             "control_query_carried": np.array([0.1, 0.0])}
    got = summary.attention_summary(block, 0.3)
    assert got["sink_rate"] == pytest.approx(3 / 5)
    assert got["free_sink_rate"] == pytest.approx(4 / 6)
    assert got["free_sink_first"] == pytest.approx(3 / 6)
    np.testing.assert_allclose(got["head_sink_rate"], [2 / 3, 1 / 2])
    assert got["shared_share_sink_heads"] == pytest.approx(0.75)  # head 0 only (1/2 is no majority)
    assert got["sink_heads"] == 1 and got["carried_sink_heads"] == 1.0  # 0.5 of its queries
    block["query_carried"][0] = 0.49
    assert summary.attention_summary(block, 0.3)["carried_sink_heads"] == 0.0
    block["sink_score"][:] = 0.0
    got = summary.attention_summary(block, 0.3)
    assert np.isnan(got["shared_share_sink_heads"]) and np.isnan(got["carried_sink_heads"])


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_bert")
    vocab = toy_tokenizer(path)
    cfg = bert.config_from_hf({**TOY_HF, "vocab_size": vocab})
    return _write_checkpoint(path, {**TOY_HF, "vocab_size": vocab},
                             _to_hf(_random_params(cfg, seed=2), cfg))


def test_inputs_keep_special_tokens_and_padding(tiny_dir):
    config = ExtremeConfig(num_sentences=4, min_words=5, max_length=16, untrained_seeds=1)
    loaded = pretrained.validate(analysis.pretrained_config(config, str(tiny_dir)))
    got = inputs.text_batches(loaded.model, loaded.sentences, config.inputs, seed=0)
    natural = got["natural"]
    tokens, types, mask = natural.inputs
    special = np.isin(tokens, [2, 3]) & mask  # [CLS], [SEP] of the toy vocabulary
    for kind in ("random", "repeated"):
        other = got[kind].inputs[0]
        assert np.array_equal(other[special | ~mask], tokens[special | ~mask]), kind
        assert not np.isin(other[mask & ~special], [0, 2, 3]).any(), kind
    assert len(np.unique(got["repeated"].inputs[0][mask & ~special])) == 1
    assert (got["random"].inputs[0][mask & ~special] != tokens[mask & ~special]).any()


def test_degenerate_natural_text_warns_and_the_repeated_kinds_asked_for_do_not(tiny_dir):
    """inputs.input_warnings: natural sentences that are one repeated token, or identical, give
    one line each naming the source and the kind; the repeated kinds are one repeated token by
    design and never warn, nor do ordinary sentences."""
    config = ExtremeConfig(num_sentences=4, min_words=5, max_length=16, untrained_seeds=1)
    loaded = pretrained.validate(analysis.pretrained_config(config, str(tiny_dir)))
    built = tuple(inputs.text_batches(loaded.model, loaded.sentences, config.inputs, seed=0))
    assert built == ("natural", "random", "repeated")  # the kinds measure_model checks
    assert inputs.input_warnings(loaded, built) == []  # "repeated" is one token, asked for
    stuck = dataclasses.replace(loaded, sentences=["the the the the the", "our our our our our",
                                                   "and and and and and"])
    where = f"{loaded.text_source} (input natural)"
    assert inputs.input_warnings(stuck, ("natural", "random", "repeated")) == [
        f"all 3 sentences of {where} are one repeated token each (sentence 1 'the the the the "
        f"the': token 5 × 5, sentence 2 'our our our our our': token 7 × 5, sentence 3 'and and "
        f"and and and': token 6 × 5): their tokens differ only by position"]
    assert inputs.input_warnings(stuck, ("repeated",)) == []
    assert inputs.input_warnings(stuck, ("random", "repeated")) == []
    same = dataclasses.replace(loaded, sentences=[loaded.sentences[0]] * 3)
    assert inputs.input_warnings(same, built) == [
        f"all 3 sentences of {where} are identical: the cosine between them is 1 by "
        f"construction"]


def test_study_in_process_and_report(tiny_dir, tmp_path, capsys):
    from anisotropy_jax.protocol import Progress

    config = ExtremeConfig(num_sentences=4, min_words=5, max_length=16, untrained_seeds=2)
    plan = analysis.Plan(config, {"tiny": pretrained.validate(
        analysis.pretrained_config(config, str(tiny_dir)))}, {"absent": "not installed"})
    doc = report.write(analysis.run(plan, Progress(bars=False)), tmp_path, Provenance())
    said = capsys.readouterr().out.splitlines()  # a line per model and input kind, as it goes
    for i, (run, kind) in enumerate((r, k) for r in ("trained", "untrained_seed_0",
                                                     "untrained_seed_1")
                                    for k in ("natural", "random", "repeated")):
        assert any(line.startswith(f"[tiny] {run}, {kind}: ") and line.endswith(f"({i + 1}/9)")
                   for line in said), (run, kind, said)
    for kind in ("natural", "random", "repeated"):  # the figures, before results.json
        figure = tmp_path / "figures" / f"{kind}_by_layer.png"
        assert figure.stat().st_size > 1000
        assert figure.stat().st_mtime <= (tmp_path / "results.json").stat().st_mtime
    saved = json.loads((tmp_path / "results.json").read_text())
    assert commands.identify(saved) == "extreme"
    model = saved["models"]["tiny"]
    assert set(model["inputs"]) == {"natural", "random", "repeated"}
    entry = model["inputs"]["natural"]
    assert len(entry["trained"]["attention"]["sink_rate"]) == 2
    assert len(entry["trained"]["states"]["kurtosis"]) == 3
    assert len(entry["untrained"]["per_seed"]) == 2 and entry["untrained"]["seeds"] == [0, 1]
    rates = [r["attention"]["sink_rate"][0] for r in entry["untrained"]["per_seed"]]
    assert entry["untrained"]["mean"]["attention"]["sink_rate"][0] == pytest.approx(
        np.mean(rates))
    assert model["storage_bytes"]["per_model"] == 3 * 3 * model["storage_bytes"]["per_forward"]
    assert "| layer_2 |" in report.format_report(doc) and "skipped absent" in (
        tmp_path / "summary.md").read_text()
    table = report.format_report(doc).splitlines()  # the abbreviations named under the tables
    legend = table.index(report.COLUMN_LEGEND)
    assert table[legend - 2].startswith("| layer_2 |")
    for _, _, title, _, meaning in report.COLUMNS:
        assert f"{title} = {meaning}" in report.COLUMN_LEGEND


def test_config_checks_and_variants():
    with pytest.raises(ConfigError, match="models"):
        from_mapping(ExtremeConfig, {"models": ["GPT-5"]})
    with pytest.raises(ConfigError, match="epsilon"):
        from_mapping(ExtremeConfig, {"epsilon": 1.5})
    smoke = from_mapping(ExtremeConfig, extreme_settings.get_config("smoke"))
    assert smoke.models == ("all-MiniLM-L6-v2",) and smoke.untrained_seeds == 2
    assert from_mapping(ExtremeConfig, extreme_settings.get_config(None)).untrained_seeds >= 5


@pytest.fixture(scope="module")
def tiny_causal_dir(tmp_path_factory):
    """A tiny random-init GPT-2 checkpoint whose BOS is the toy tokenizer's [CLS] (which the
    tokenizer adds), saved as a Hugging Face folder."""
    path = tmp_path_factory.mktemp("tiny_causal")
    hf = {**TINY_GPT2, "vocab_size": toy_tokenizer(path), "bos_token_id": 2,
          "architectures": ["GPT2LMHeadModel"]}
    cfg = gpt2.config_from_hf(hf)
    params = jax.tree.map(np.asarray, gpt2.FAMILY.init_params(cfg, jax.random.key(5))["params"])
    return _write_checkpoint(path, hf, gpt2.to_hf(params, cfg))


def test_any_checkpoint_with_and_without_its_first_token(tiny_causal_dir, tmp_path):
    config = from_mapping(ExtremeConfig, {"model_dir": str(tiny_causal_dir), "num_sentences": 4,
                                          "min_words": 5, "max_length": 16,
                                          "untrained_seeds": 1})
    plan = analysis.validate(config)
    name = tiny_causal_dir.name
    assert list(plan.models) == [name] and plan.skipped == {}
    kinds = analysis.batches(plan.models[name], config)
    assert set(kinds) == set(extreme_settings.INPUT_KINDS)
    assert len({b.token_ids.shape for b in kinds.values()}) == 1  # one width, one compilation
    natural, without = kinds["natural"], kinds["natural_no_bos"]
    assert (natural.token_ids[:, 0] == 2).all() and (without.token_ids[:, 0] != 2).all()
    rows = natural.mask_BxL.sum(1)
    for b, n in enumerate(rows):  # the same sentence, shifted left by the BOS
        assert np.array_equal(without.token_ids[b, :n - 1], natural.token_ids[b, 1:n])
    repeated, repeated_bos = kinds["repeated_no_bos"], kinds["repeated_bos"]
    # without the BOS, key 0 is the repeated id like every other content token
    assert (repeated.token_ids[:, 0] == repeated.token_ids[0, 1]).all()
    assert (repeated_bos.token_ids[:, 0] == 2).all()
    for batch in kinds.values():  # a control key other than 0 among each sequence's tokens
        n = batch.mask_BxL.sum(1)
        assert ((batch.control_key_B >= 1) & (batch.control_key_B < n)).all()
    # the run on two kinds (one forward each of the trained and the untrained weights)
    short = dataclasses.replace(plan, config=dataclasses.replace(
        config, inputs=("natural", "natural_bos", "natural_no_bos")))
    doc = report.write(analysis.run(short), tmp_path, Provenance())
    entry = doc["models"][name]["inputs"]
    assert entry["natural_bos"]["same_tokens_as"] == "natural"  # the tokenizer adds the BOS
    assert entry["natural"]["first_tokens"] == [2] and 2 not in entry["natural_no_bos"][
        "first_tokens"]
    assert "model_dir" in extreme_settings.get_config(None)
