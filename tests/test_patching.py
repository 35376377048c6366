"""models.patching on every registered family with blocks (one tiny random model each, one
compiled function per family): identity patches change no bit; a head's zero ablation equals
zeroing that head's rows of the output projection (and, for GPT-2, a float64 loop over the
layer); run A's residual stream patched into run B at layer l makes every later state A's. Then
the addresses, the patch helpers against numpy, vmap over a patch's operand, the errors, the local
(CANINE) core against its former per-chunk form, and docs/PATCHING.md's code, executed."""
import functools
import math
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import transformers

from anisotropy_jax.config import BlockConfig, ConfigError
from anisotropy_jax.models import attention, patching, registry
from anisotropy_jax.models.block import Block

ROOT = pathlib.Path(__file__).resolve().parents[1]
SMALL = dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
             intermediate_size=32, max_position_embeddings=40)
# A tiny config.json per family (transformers' config classes, as tests/test_padding.py).
HF_CONFIGS = {
    "bert": lambda: transformers.BertConfig(**SMALL, type_vocab_size=2),
    "canine": lambda: transformers.CanineConfig(  # blocks: initial, one deep, final
        **{**SMALL, "max_position_embeddings": 64, "num_hidden_layers": 1}, num_hash_functions=4,
        num_hash_buckets=64, type_vocab_size=4, downsampling_rate=4, upsampling_kernel_size=4,
        local_transformer_stride=4),
    "gemma3": lambda: transformers.Gemma3TextConfig(
        **SMALL, num_key_value_heads=1, head_dim=8, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"]),
    "gpt2": lambda: transformers.GPT2Config(vocab_size=64, n_embd=16, n_layer=2, n_head=2,
                                            n_positions=40),
    "gpt_neox": lambda: transformers.GPTNeoXConfig(**SMALL, rotary_pct=0.5),
    "llama": lambda: transformers.LlamaConfig(**SMALL, num_key_value_heads=1),
    "mpnet": lambda: transformers.MPNetConfig(**SMALL),
    "qwen2": lambda: transformers.Qwen2Config(**SMALL, num_key_value_heads=1),
    "t5": lambda: transformers.T5Config(vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=2,
                                        num_heads=2, relative_attention_num_buckets=8,
                                        relative_attention_max_distance=6),
    "vit": lambda: transformers.ViTConfig(hidden_size=16, num_hidden_layers=2,
                                          num_attention_heads=2, intermediate_size=32,
                                          image_size=8, patch_size=4),
    "wav2vec2": lambda: transformers.Wav2Vec2Config(
        hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        conv_dim=(8, 8), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=4,
        num_conv_pos_embedding_groups=2, vocab_size=10),
    "whisper": lambda: transformers.WhisperConfig(
        d_model=16, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=32,
        decoder_layers=1, decoder_attention_heads=2, decoder_ffn_dim=32, num_mel_bins=8,
        max_source_positions=8, max_target_positions=8, vocab_size=50, pad_token_id=1,
        bos_token_id=1, eos_token_id=2, decoder_start_token_id=1),
}
# The families whose patched and weight-zeroed programs agree bit for bit (or to 1e-6) only with
# XLA:CPU's default emitters (tests/conftest.py): they run with those.
EXACT_EMITTERS = ("canine", "wav2vec2")
FAMILIES = [pytest.param(name, marks=pytest.mark.default_emitters) if name in EXACT_EMITTERS
            else name for name in sorted(HF_CONFIGS)]
NO_BLOCKS = {"resnet"}  # the CNN baseline: no Block, nothing to address
LAYER, HEAD = 0, 1  # the ablated head
PATCH_LAYER = 1  # where run A's residual stream enters run B


def test_every_family_with_blocks_is_covered():
    names = {family.name for family in registry.families().values()}
    assert names - NO_BLOCKS == set(HF_CONFIGS)


def _random_params(family, cfg, seed=1):
    """Every parameter random (norm gains near 1), built from the shapes alone: no compilation."""
    shapes = jax.eval_shape(family.module(cfg).init, jax.random.key(0), family.example_input(cfg))
    rng = np.random.default_rng(seed)

    def leaf(path, shape):
        noise = rng.standard_normal(shape.shape).astype(np.float32)
        if "scale" in jax.tree_util.keystr(path):
            return jnp.asarray(1.0 + 0.1 * noise)
        fan_in = shape.shape[-2] if len(shape.shape) >= 2 else 10
        return jnp.asarray(noise / math.sqrt(fan_in))

    return jax.tree_util.tree_map_with_path(leaf, shapes)


def _inputs(family, batch=4, seed=0):
    rng = np.random.default_rng(seed)
    if family.modality == "image":
        return jnp.asarray(rng.standard_normal((batch, 3, 8, 8)), jnp.float32)
    if family.modality == "audio":
        shape = (batch, 8, 16) if family.name == "whisper" else (batch, 200)
        return jnp.asarray(rng.standard_normal(shape), jnp.float32)
    return jnp.asarray(rng.integers(3, 3000 if family.name == "canine" else 64, (batch, 8)),
                       jnp.int32)


@functools.lru_cache(maxsize=None)
def _model(name):
    hf_config = HF_CONFIGS[name]().to_dict()
    family = registry.families()[hf_config["model_type"]]
    cfg = family.config_from_hf(hf_config)
    params = _random_params(family, cfg)
    x = _inputs(family)
    return family, cfg, params, x


def _zeroed_head(params, path):
    """The params with head HEAD's rows of block `path`'s output projection zeroed."""
    def edit(key_path, leaf):
        keys = tuple(k.key for k in key_path)
        if keys == ("params",) + path + ("attention", "out", "kernel"):
            d_head = leaf.shape[0] // 2
            return leaf.at[HEAD * d_head:(HEAD + 1) * d_head].set(0.0)
        return leaf

    return jax.tree_util.tree_map_with_path(edit, params)


def _a_into_b(name):
    """The addresses that carry run A (rows 0-1) into run B (rows 2-3): block PATCH_LAYER's
    input, and for CANINE the initial block's output too (its final block reads it again, through
    the upsampling)."""
    return ((f"blocks.{PATCH_LAYER}.resid_pre",)
            + (("blocks.0.resid_post",) if name == "canine" else ()))


def _on_rows(rows, patch):
    """`patch` on the inputs `rows` only. The inputs of a forward are independent, so one forward
    holds run A (rows 0-1) with a head ablated and run B (rows 2-3) with A's residual stream."""
    return lambda value, address: value.at[rows].set(patch(value, address)[rows])


@functools.lru_cache(maxsize=None)
def _results(name):
    """Everything the per-family tests compare, from one compiled function (two forwards: the
    plain one, which the identity-patched one equals op for op, and the patched one), called
    twice: the second time on the parameters with a head's output projection rows zeroed."""
    family, cfg, params, x = _model(name)
    everything = [f"blocks.*.{n}" for n in patching.ACTIVATIONS]
    identity = {a: (lambda value, address: value) for a in everything}
    head = f"blocks.{LAYER}.head_out.{HEAD}"

    @jax.jit
    def compute(params, x):
        plain = family.apply(cfg, params, x)
        same = patching.run(family, cfg, params, x, patches=identity, read=everything)
        a_into_b = {a: same.cache[a].at[2:].set(same.cache[a][:2]) for a in _a_into_b(name)}
        patches = {a: _on_rows(slice(2, 4), patching.patch_from(a_into_b)) for a in a_into_b}
        patches[head] = _on_rows(slice(0, 2), patching.zero)
        patched = patching.run(family, cfg, params, x, patches=patches,
                               read=[head, f"blocks.{LAYER}.resid_pre"])
        states = lambda probes: family.states(probes, cfg)  # noqa: E731
        return dict(plain=plain, same=(same.output, same.probes), cache=same.cache,
                    patched=(patched.output, states(patched.probes)), patched_cache=patched.cache,
                    plain_states=states(plain[1]))

    got = jax.device_get(compute(params, x))
    zeroed = _zeroed_head(params, patching.block_paths(family, cfg, params, x)[LAYER])
    by_weights = jax.device_get(compute(zeroed, x))
    return dict(got, by_weights=(by_weights["plain"][0], by_weights["plain_states"]))


@pytest.mark.parametrize("name", FAMILIES)
def test_identity_patches_change_no_bit_and_the_cache_holds_the_probes(name):
    got = _results(name)
    plain, same = jax.tree_util.tree_leaves(got["plain"]), jax.tree_util.tree_leaves(got["same"])
    assert len(plain) == len(same)
    for a, b in zip(plain, same):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    blocks = got["plain"][1]["blocks"]
    for key, value in got["cache"].items():
        _, layer, activation = key.split(".")
        if activation in blocks[int(layer)]:
            np.testing.assert_array_equal(value, blocks[int(layer)][activation], err_msg=key)
    assert {k.split(".")[2] for k in got["cache"]} == set(patching.ACTIVATIONS)
    assert len(got["cache"]) == len(blocks) * len(patching.ACTIVATIONS)


@pytest.mark.parametrize("name", FAMILIES)
def test_head_zero_ablation_equals_zeroing_its_output_projection_rows(name):
    got = _results(name)
    head_out = got["patched_cache"][f"blocks.{LAYER}.head_out.{HEAD}"]
    assert head_out.ndim == 3 and not head_out[:2].any() and head_out[2:].all()
    assert np.abs(got["plain"][0][:2] - got["patched"][0][:2]).max() > 1e-3  # the head mattered
    for patched, by_weights in zip(got["patched"], got["by_weights"]):
        run_a = (slice(None), slice(0, 2)) if patched.ndim == 4 else slice(0, 2)  # states: S first
        np.testing.assert_allclose(patched[run_a], by_weights[run_a], rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", FAMILIES)
def test_run_a_residual_patched_into_run_b_gives_a_states_after_the_layer(name):
    got = _results(name)
    plain, patched = got["plain_states"], got["patched"][1]
    first_a = 1 if name == "canine" else PATCH_LAYER + 1  # states 0 … l: B's own
    assert np.abs(plain[:, :2] - plain[:, 2:]).max() > 0.1  # A and B differ
    np.testing.assert_array_equal(patched[:first_a, 2:], plain[:first_a, 2:])
    np.testing.assert_allclose(patched[first_a:, 2:], plain[first_a:, :2], rtol=0, atol=1e-6)
    np.testing.assert_allclose(got["patched"][0][2:], got["plain"][0][:2], rtol=0, atol=1e-6)


def _gpt2_block_float64(x_BxLxD, p, eps, heads, zero_head):
    """GPT-2's pre-LN block, a loop over inputs, heads and queries in float64, head `zero_head`'s
    output zeroed. Returns (resid_post, head_out (B, L, H, Dh), mlp_pre, mlp_post)."""
    def ln(y, q):
        mu = y.mean(-1, keepdims=True)
        return (y - mu) / np.sqrt(((y - mu) ** 2).mean(-1, keepdims=True) + eps) * q["scale"] \
            + q["bias"]

    att = p["attention"]
    batch, length, width = x_BxLxD.shape
    d_head = width // heads
    head_out = np.zeros((batch, length, heads, d_head))
    for b in range(batch):
        h_in = ln(x_BxLxD[b], p["attention_norm"])
        q, k, v = (h_in @ att[n]["kernel"] + att[n]["bias"] for n in ("query", "key", "value"))
        for h in range(heads):
            cols = slice(h * d_head, (h + 1) * d_head)
            for i in range(length):
                logits = np.array([q[i, cols] @ k[j, cols] for j in range(i + 1)])
                w = np.exp(logits / np.sqrt(d_head) - (logits / np.sqrt(d_head)).max())
                head_out[b, i, h] = (w / w.sum()) @ v[:i + 1, cols] * (h != zero_head)
    mid = x_BxLxD + head_out.reshape(batch, length, width) @ att["out"]["kernel"] \
        + att["out"]["bias"]
    pre = ln(mid, p["mlp_norm"]) @ p["mlp"]["fc_in"]["kernel"] + p["mlp"]["fc_in"]["bias"]
    post = 0.5 * pre * (1 + np.tanh(np.sqrt(2 / np.pi) * (pre + 0.044715 * pre ** 3)))
    out = mid + post @ p["mlp"]["fc_out"]["kernel"] + p["mlp"]["fc_out"]["bias"]
    return out, head_out, pre, post


def test_head_zero_ablation_equals_a_float64_loop_gpt2():
    family, cfg, params, x = _model("gpt2")
    got = _results("gpt2")
    path = patching.block_paths(family, cfg, params, x)[LAYER]
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params["params"][path[0]])
    resid_pre = np.asarray(got["patched_cache"][f"blocks.{LAYER}.resid_pre"][:2], np.float64)
    want, _, _, _ = _gpt2_block_float64(resid_pre, p, cfg.block.layer_norm_eps,
                                        cfg.block.num_heads, HEAD)
    np.testing.assert_allclose(got["patched"][1][LAYER + 1, :2], want, rtol=0, atol=2e-5)
    # the new activations of the unablated forward against the same loop
    cache = got["cache"]
    _, head_out, mlp_pre, mlp_post = _gpt2_block_float64(
        np.asarray(cache[f"blocks.{LAYER}.resid_pre"], np.float64), p, cfg.block.layer_norm_eps,
        cfg.block.num_heads, None)
    for key, want in (("head_out", head_out), ("mlp_pre", mlp_pre), ("mlp_post", mlp_post)):
        np.testing.assert_allclose(cache[f"blocks.{LAYER}.{key}"], want, rtol=0, atol=2e-5,
                                   err_msg=key)


# --------------------------------------------------------------------------------------------
# Addresses, helpers and errors on one block

def test_addresses_parse_print_and_refuse_nonsense():
    a = patching.Address.parse("blocks.3.attn_weights")
    assert a == patching.Address(3, "attn_weights") and str(a) == "blocks.3.attn_weights"
    assert str(patching.Address.parse("blocks.*.head_out.2")) == "blocks.*.head_out.2"
    assert patching.Address(0, "attn_weights", 1).position_axis == 1
    assert patching.Address(0, "attn_weights").position_axis == 2
    for bad, match in (("blocks.1.attn", "unknown activation"), ("layers.1.resid_pre", "is not"),
                       ("blocks.x.resid_pre", "layer must"), ("blocks.1.resid_pre.0", "no head"),
                       ("blocks.1.head_out.a", "head must")):
        with pytest.raises(ConfigError, match=match):
            patching.Address.parse(bad)


CFG = BlockConfig(d_model=8, num_heads=2, d_ff=16, norm_position="pre", causal=True)


X = np.random.default_rng(1).standard_normal((3, 5, 8)).astype(np.float32) + 1.0
PARAMS = Block(CFG).init(jax.random.key(0), X)  # eager: a few small ops


def _apply(patches, read, cfg=CFG):
    params = PARAMS if cfg is CFG else Block(cfg).init(jax.random.key(0), X)
    return patching.apply(Block(cfg).apply, params, X, patches=patches, read=read)


def test_helpers_equal_numpy():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5, 4)).astype(np.float32)
    mask = rng.random((3, 5)) < 0.7
    at = patching.Address(0, "resid_pre")
    assert not np.asarray(patching.zero(a, at)).any()
    np.testing.assert_allclose(patching.mean_ablation()(a, at), np.broadcast_to(a.mean(0), a.shape),
                               rtol=1e-6)
    w = mask[..., None].astype(np.float64)
    common = (a * w).sum((0, 1)) / w.sum((0, 1))
    np.testing.assert_allclose(patching.subtract_mean(mask_BxL=mask)(a, at), a - common, atol=1e-6)
    np.testing.assert_allclose(patching.subtract_mean()(a, at), a - a.mean((0, 1)), atol=1e-6)
    np.testing.assert_array_equal(patching.resample_ablation(np.array([2, 0, 1]))(a, at),
                                  a[[2, 0, 1]])
    d = rng.standard_normal(4).astype(np.float32)
    np.testing.assert_allclose(patching.add_direction(d, 2.0)(a, at), a + 2 * d, rtol=1e-6)
    np.testing.assert_array_equal(patching.at_positions(patching.zero, [0, 3])(a, at),
                                  np.where(np.isin(np.arange(5), [0, 3])[None, :, None], 0, a))
    weights = rng.random((2, 2, 4, 4))
    dropped = np.asarray(patching.drop_keys(0, renormalize=True)(
        weights, patching.Address(0, "attn_weights")))
    want = weights.copy()
    want[..., 0] = 0
    np.testing.assert_allclose(dropped, want / want.sum(-1, keepdims=True), rtol=1e-6)
    with pytest.raises(ConfigError, match="attn_weights"):
        patching.drop_keys(0)(a, at)


def test_sink_removal_vmapped_over_a_scale_equals_a_loop_and_acts_on_one_head():
    def forward(scale):
        patches = {"blocks.0.attn_weights.1": lambda w, _: w.at[..., 0].multiply(scale)}
        (y, probes), cache = _apply(patches, ["blocks.0.attn_weights", "blocks.0.head_out"])
        return y, cache

    scales = jnp.array([1.0, 0.5, 0.0])
    ys, caches = jax.jit(jax.vmap(forward))(scales)
    (y_plain, probes), _ = _apply(None, ())
    np.testing.assert_allclose(ys[0], y_plain, rtol=0, atol=1e-6)
    for i, s in enumerate([1.0, 0.5, 0.0]):
        y, cache = jax.jit(forward)(s)
        np.testing.assert_allclose(ys[i], y, rtol=1e-6, atol=1e-6)
        w = caches["blocks.0.attn_weights"][i]
        np.testing.assert_array_equal(w[:, 0], probes["attn_weights"][:, 0])  # head 0 untouched
        np.testing.assert_allclose(w[:, 1, :, 0], s * probes["attn_weights"][:, 1, :, 0],
                                   rtol=1e-6)


def test_missing_activations_and_misshapen_patches_are_one_line_errors():
    with pytest.raises(ConfigError, match="blocks.1.resid_pre: no such activation.*1 blocks"):
        _apply(None, ["blocks.1.resid_pre"])
    with pytest.raises(ConfigError, match="use_mlp=False"):
        _apply({"blocks.0.mlp_out": patching.zero}, (), cfg=CFG.replace(use_mlp=False))
    with pytest.raises(ConfigError, match="head 2 of 2"):
        _apply({"blocks.0.head_out.2": patching.zero}, ())
    with pytest.raises(ConfigError, match=r"returned shape \(3, 5\)"):
        _apply({"blocks.0.resid_mid": lambda a, _: a[..., 0]}, ())
    with pytest.raises(ConfigError, match="a patch is a function"):
        _apply({"blocks.0.resid_mid": 0.0}, ())


def _local_core_before(q, k, v, cfg, key_mask_BxL):
    """models/attention.py's local core before hook points: xla_core on each chunk."""
    batch, seq_len = q.shape[:2]
    mixed, stats, blocks = [], {}, []
    for start in range(0, seq_len, cfg.local_chunk):
        end = min(seq_len, start + cfg.local_chunk)
        out, probes = attention.xla_core(q[:, start:end], k[:, start:end], v[:, start:end], cfg,
                                         key_mask_BxL[:, start:end])
        mixed.append(out)
        for name in set(probes) - {"attn_logits", "attn_weights"}:
            stats.setdefault(name, []).append(probes[name])
        blocks.append((start, end, probes["attn_logits"], probes["attn_weights"]))
    logits = jnp.full((batch, q.shape[2], seq_len, seq_len), attention.MASK_VALUE, jnp.float32)
    weights = jnp.zeros(logits.shape, jnp.float32)
    for start, end, lg, w in blocks:
        logits = logits.at[:, :, start:end, start:end].set(lg)
        weights = weights.at[:, :, start:end, start:end].set(w)
    probes = {name: jnp.concatenate(parts, axis=-1) for name, parts in stats.items()}
    probes.update(attn_logits=logits, attn_weights=weights)
    return jnp.concatenate(mixed, axis=1), probes


def test_local_core_is_bit_for_bit_its_former_per_chunk_form():
    cfg = CFG.replace(causal=False, local_chunk=3)
    q, k, v = jax.random.normal(jax.random.key(2), (3, 2, 7, 2, 4))
    mask = jnp.arange(7)[None] < jnp.array([[7], [5]])
    want = jax.jit(_local_core_before, static_argnums=3)(q, k, v, cfg, mask)
    got = jax.jit(attention.local_core, static_argnums=3)(q, k, v, cfg, mask)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_patching_doc_runs():
    text = (ROOT / "docs" / "PATCHING.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 3
    namespace: dict = {}
    for code in blocks:
        exec(compile(code, "docs/PATCHING.md", "exec"), namespace)  # noqa: S102
