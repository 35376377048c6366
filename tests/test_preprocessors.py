"""Real checkpoints' preprocessors against transformers' own (PIL backends,
torch CPU): ConvNextImageProcessor's crop_pct resize (microsoft/resnet-50 and the other ResNet
checkpoints) on images of several aspect ratios, and Wav2Vec2FeatureExtractor's do_normalize
(facebook/wav2vec2-base-960h, the large ones) on waveforms, then end to end through the pretrained
study's feeder into a tiny random wav2vec 2.0 model."""
import json
import os
import wave

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from PIL import Image  # noqa: E402
from transformers.models.convnext.image_processing_pil_convnext import (  # noqa: E402
    ConvNextImageProcessorPil)

from anisotropy_jax import media  # noqa: E402
from anisotropy_jax.configs.pretrained import PretrainedConfig
from anisotropy_jax.models import registry  # noqa: E402
from anisotropy_jax.studies.pretrained import media_inputs  # noqa: E402
from tests.test_families_vision import randomise  # noqa: E402

SHAPES = ((300, 400), (480, 240), (256, 256), (200, 333), (90, 120))  # (H, W): landscape, portrait…
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
# microsoft/resnet-50's preprocessor_config.json, today's and the first (feature extractor) form
RESNET50 = {"crop_pct": 0.875, "do_normalize": True, "do_rescale": True, "do_resize": True,
            "image_mean": MEAN, "image_processor_type": "ConvNextImageProcessor", "image_std": STD,
            "resample": 3, "rescale_factor": 1 / 255, "size": {"shortest_edge": 224}}
RESNET50_OLD = {"crop_pct": 0.875, "do_normalize": True, "do_resize": True, "image_mean": MEAN,
                "feature_extractor_type": "ConvNextFeatureExtractor", "image_std": STD,
                "resample": 3, "size": 224}


def _images(folder):
    paths = []
    for i, (h, w) in enumerate(SHAPES):
        yy, xx = np.mgrid[:h, :w]
        noise = np.random.default_rng(i).integers(0, 40, (h, w, 3))
        pixels = np.stack([xx * 255 / w, yy * 255 / h, (3 * xx + yy) % 256], -1) + noise
        paths.append(folder / f"{i}.png")
        Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(paths[-1])
    return paths


@pytest.mark.parametrize("case", ["resnet50", "resnet50_old", "crop_pct_0.9", "edge_384_warps"])
def test_convnext_crop_pct_matches_transformers(case, tmp_path):
    cfg = {"resnet50": RESNET50, "resnet50_old": RESNET50_OLD,
           "crop_pct_0.9": {**RESNET50, "crop_pct": 0.9, "size": {"shortest_edge": 160}},
           "edge_384_warps": {**RESNET50, "size": {"shortest_edge": 384}}}[case]
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(cfg))
    paths = _images(tmp_path)
    got = media.load_images(paths, media.image_preprocessing(tmp_path))
    edge = cfg["size"] if isinstance(cfg["size"], int) else cfg["size"]["shortest_edge"]
    hf = ConvNextImageProcessorPil(crop_pct=cfg["crop_pct"], size={"shortest_edge": edge},
                                   resample=3, image_mean=MEAN, image_std=STD)
    want = hf([Image.open(p).convert("RGB") for p in paths], return_tensors="np").pixel_values
    assert got.shape == want.shape == (len(SHAPES), 3, edge, edge)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_deit_processor_matches_transformers(tmp_path):
    """DeiTImageProcessor (facebook/deit-*): warp to 256 × 256 (bicubic), centre-crop 224; ViT's and
    DINOv2's processors are checked in tests/test_media.py."""
    from transformers.models.deit.image_processing_pil_deit import DeiTImageProcessorPil

    hf = DeiTImageProcessorPil()
    hf.save_pretrained(str(tmp_path))
    paths = _images(tmp_path)
    got = media.load_images(paths, media.image_preprocessing(tmp_path))
    want = hf([Image.open(p).convert("RGB") for p in paths], return_tensors="np").pixel_values
    assert got.shape == want.shape == (len(SHAPES), 3, 224, 224)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def _waves(seconds=(0.5, 1.0, 0.5)):
    rng = np.random.default_rng(0)
    return [(0.2 + 0.3 * np.sin(np.arange(int(s * 16000)) * (0.03 + 0.01 * i))
             + 0.05 * rng.normal(size=int(s * 16000))).astype(np.float32)
            for i, s in enumerate(seconds)]


@pytest.mark.parametrize("do_normalize", [True, False])
def test_waveforms_match_wav2vec2_feature_extractor(do_normalize, tmp_path):
    extractor = transformers.Wav2Vec2FeatureExtractor(do_normalize=do_normalize)
    extractor.save_pretrained(str(tmp_path))
    assert media.audio_normalization(tmp_path) is do_normalize
    for w in _waves():
        want = extractor(w, sampling_rate=16000, return_tensors="np").input_values[0]
        got = media.normalize_waveform(w) if media.audio_normalization(tmp_path) else w
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
    assert media.audio_normalization(None) is False


def _write_wav(path, samples):
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(16000)
        f.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())


def test_wav2vec2_with_do_normalize_matches_transformers_end_to_end(tmp_path):
    """The study's feeder (media_inputs.load) → our forward, against Wav2Vec2FeatureExtractor →
    transformers.Wav2Vec2Model, on a tiny random model whose preprocessor sets do_normalize."""
    model_dir, inputs = tmp_path / "model", tmp_path / "wavs"
    inputs.mkdir()
    config = transformers.Wav2Vec2Config(
        hidden_size=24, num_hidden_layers=2, num_attention_heads=3, intermediate_size=40,
        conv_dim=(8, 8, 8), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
        num_conv_pos_embeddings=6, num_conv_pos_embedding_groups=3, vocab_size=10,
        feat_extract_norm="layer", do_stable_layer_norm=True, conv_bias=True)  # as -large-lv60
    torch.manual_seed(0)
    model = transformers.Wav2Vec2Model(config)
    randomise(model, 0)
    model.eval().save_pretrained(str(model_dir))
    extractor = transformers.Wav2Vec2FeatureExtractor(do_normalize=True)
    extractor.save_pretrained(str(model_dir))
    for i, w in enumerate(_waves((0.5, 0.7))):  # 0.7 s is cut to 0.5 s by the feeder
        _write_wav(inputs / f"{i}.wav", w)
    loaded = registry.load(model_dir)
    fed = media_inputs.load(loaded.family, loaded.config, model_dir,
                            PretrainedConfig(inputs=str(inputs), num_inputs=2))
    forward = loaded.family.hidden_states_fn(loaded.config)
    raw = media.load_audio(sorted(inputs.glob("*.wav")), 16000)
    for batch, w in zip(fed.batches, raw):
        cut = w[:8000]
        values = extractor(cut, sampling_rate=16000, return_tensors="pt").input_values
        with torch.no_grad():
            want = [h.numpy() for h in model(values, output_hidden_states=True).hidden_states]
        got = np.asarray(forward(loaded.params, batch.inputs[0]))
        for k, ref in enumerate(want):
            np.testing.assert_allclose(got[k], ref, atol=1e-4, rtol=0, err_msg=f"state {k}")
        unnormalised = np.asarray(forward(loaded.params, cut[None]))
        assert np.abs(unnormalised[-1] - want[-1]).max() > 1e-2  # the setting matters here
