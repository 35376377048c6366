"""Every registered family's per-input hidden states are independent of the rest of the batch
(right padding): the states of a right-padded batch equal, on the real positions and within
1e-5, those of each input run alone. One tiny random model per text family (its Hugging Face
config from transformers' config class, random-init weights with extra noise so that no tensor is
near zero); lengths chosen so that CANINE's last molecule window is part padding.

Not padded, so skipped by modality: image families (every image has the same size after
preprocessing: nothing to pad); audio families: Whisper always reads a 30 s window (its padding is
the model's input, and the study masks the frames after the speech, media_inputs.whisper_speech_mask),
and the study feeds each wav2vec 2.0 / HuBERT waveform alone (batch 1: padding would enter the
feature encoder's group norm), so neither sees a padded batch."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import transformers

from anisotropy_jax.models import registry

ATOL = 1e-5
LENGTHS = (13, 6, 10, 4)  # 13, 10 and 6 characters: L mod 4 = 1, 2, 2; 4: one molecule
SMALL = dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
             intermediate_size=32, max_position_embeddings=40)
HF_CONFIGS = {
    "bert": lambda: transformers.BertConfig(**SMALL, type_vocab_size=2),
    "canine": lambda: transformers.CanineConfig(
        **{**SMALL, "max_position_embeddings": 64}, num_hash_functions=4, num_hash_buckets=64,
        type_vocab_size=4, downsampling_rate=4, upsampling_kernel_size=4,
        local_transformer_stride=8),
    "gpt2": lambda: transformers.GPT2Config(vocab_size=64, n_embd=16, n_layer=2, n_head=2,
                                            n_positions=40, pad_token_id=0),
    "gpt_neox": lambda: transformers.GPTNeoXConfig(**SMALL, rotary_pct=0.5),
    "gemma3_text": lambda: transformers.Gemma3TextConfig(
        **SMALL, num_key_value_heads=1, head_dim=8, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"]),
    "llama": lambda: transformers.LlamaConfig(**SMALL, num_key_value_heads=1),
    "mpnet": lambda: transformers.MPNetConfig(**SMALL),
    "qwen2": lambda: transformers.Qwen2Config(**SMALL, num_key_value_heads=1),
    "t5": lambda: transformers.T5Config(vocab_size=64, d_model=16, d_kv=8, d_ff=32,
                                        num_layers=2, num_heads=2,
                                        relative_attention_num_buckets=8,
                                        relative_attention_max_distance=6),
}


def _noisy(params, seed):
    """Init plus N(0, 0.1²) on every parameter, so that the states carry every tensor."""
    leaves, tree = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
    return jax.tree_util.tree_unflatten(tree, [
        x + 0.1 * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys)])


def _batch(hf_config, family, seed=0):
    rng = np.random.default_rng(seed)
    pad = family.pad_token_id(hf_config)
    tokens = np.full((len(LENGTHS), max(LENGTHS)), pad, np.int32)
    mask = np.zeros(tokens.shape, bool)
    for i, n in enumerate(LENGTHS):
        tokens[i, :n] = rng.integers(3, 3000 if family.name == "canine" else 64, n)
        mask[i, :n] = True
    if family.name == "canine":
        tokens[:, 0] = 0xE000  # [CLS]
    return tokens, mask


def test_every_family_is_covered():
    modalities = {name: f.modality for name, f in registry.families().items()}
    assert {n for n, m in modalities.items() if m == "text"} == set(HF_CONFIGS)


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_padded_batch_states_equal_each_input_alone(name):
    family = registry.families()[name]
    hf_config = HF_CONFIGS[name]().to_dict()
    cfg = family.config_from_hf(hf_config)
    params = _noisy(family.init_params(cfg, jax.random.PRNGKey(0)), seed=1)
    tokens, mask = _batch(hf_config, family)
    states = family.hidden_states_fn(cfg)
    batched = np.asarray(states(params, jnp.asarray(tokens), jnp.zeros_like(jnp.asarray(tokens)),
                                jnp.asarray(mask)))
    assert np.isfinite(batched[:, mask]).all()
    assert np.abs(batched[:, mask]).max() > 0.1, "states too small to tell"
    for i, n in enumerate(LENGTHS):
        alone = np.asarray(states(params, jnp.asarray(tokens[i:i + 1, :n]),
                                  jnp.zeros((1, n), jnp.int32), jnp.ones((1, n), bool)))
        diff = np.abs(batched[:, i:i + 1, :n] - alone).max(axis=(1, 2, 3))
        assert diff.max() <= ATOL, (
            f"{name}, input {i} ({n} tokens): max |padded − alone| per state {diff}")
