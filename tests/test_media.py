"""Offline inputs: images preprocessed as transformers' PIL image processors (ViT, DINOv2/Bit)
do it, WAV reading (8/16/24-bit, stereo) and resampling, the offline defaults, and one-line errors
naming the file for every bad input, raised before anything is computed."""
import json
import shutil
import wave

import numpy as np
import pytest
import transformers
from PIL import Image

from anisotropy_jax import formant, media


def _png(path, size=(40, 30), seed=0):
    pixels = np.random.default_rng(seed).integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return pixels


def _wav(path, samples, rate, width=2, channels=1):
    ints = np.round(np.asarray(samples) * (2 ** (8 * width - 1) - 1)).astype(np.int64)
    ints = np.repeat(ints[:, None], channels, axis=1).reshape(-1)
    if width == 1:
        raw = (ints + 128).astype(np.uint8).tobytes()
    else:
        raw = b"".join(int(v).to_bytes(width, "little", signed=True) for v in ints)
    with wave.open(str(path), "wb") as f:
        f.setnchannels(channels)
        f.setsampwidth(width)
        f.setframerate(rate)
        f.writeframes(raw)


@pytest.mark.parametrize("processor", ["bit", "vit"])
def test_images_match_transformers_processors(processor, tmp_path):
    paths = [tmp_path / "a.png", tmp_path / "b.jpg"]
    _png(paths[0], (40, 30))
    Image.fromarray(_png(tmp_path / "tmp.png", (33, 50), seed=1)).save(paths[1], quality=90)
    if processor == "bit":
        hf = transformers.BitImageProcessor(size={"shortest_edge": 32}, crop_size=24,
                                            image_mean=[0.4, 0.5, 0.6], image_std=[0.2, 0.3, 0.25])
    else:
        hf = transformers.ViTImageProcessor(size={"height": 20, "width": 28})
    hf.save_pretrained(str(tmp_path))
    prep = media.image_preprocessing(tmp_path)
    got = media.load_images(paths, prep)
    want = hf([Image.open(p).convert("RGB") for p in paths], return_tensors="np").pixel_values
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_default_preprocessing_is_dinov2s():
    prep = media.image_preprocessing(None)
    assert (prep.shortest_edge, prep.crop, prep.resample) == (256, (224, 224), 3)


def test_wav_reading_and_resampling(tmp_path):
    t = np.arange(22050) / 22050
    tone = 0.5 * np.sin(2 * np.pi * 300 * t)
    for width in (1, 2, 3):
        _wav(tmp_path / f"w{width}.wav", tone, 22050, width=width, channels=2)
    out = media.load_audio([tmp_path / f"w{w}.wav" for w in (1, 2, 3)], 16000)
    for width, samples in zip((1, 2, 3), out):
        assert samples.dtype == np.float32 and samples.shape == (16000,)
        want = 0.5 * np.sin(2 * np.pi * 300 * np.arange(16000) / 16000)
        inner = slice(200, -200)  # the filter's edges
        # polyphase passband ripple (~5e-4 of the amplitude) + quantisation
        np.testing.assert_allclose(samples[inner], want[inner], atol=1e-3 + 2.0 ** (2 - 8 * width))


def test_offline_defaults_exist(tmp_path):
    photos = media.skimage_sample_images()
    assert len(photos) == len(media.SKIMAGE_PHOTOS)
    assert media.load_images(photos[:2]).shape == (2, 3, 224, 224)
    # the speech default (docs/CROSS_MODAL.md): espeak-ng where installed, else formant clips
    assert media.speech_source() == ("espeak-ng" if shutil.which("espeak-ng") else "formant")
    (path,) = media.synthesize_speech(["Now is the winter of our discontent."], tmp_path)
    (samples,) = media.load_audio([path], 16000, minimum=1)
    assert 1.0 < samples.size / 16000 < 5.0 and np.abs(samples).max() > 0.05
    if not shutil.which("espeak-ng"):
        with pytest.raises(media.MediaError, match="espeak-ng: not found"):
            media.synthesize_speech(["x"], tmp_path / "forced", source="espeak-ng")


def test_formant_speech_is_deterministic_and_speech_like(tmp_path):
    lines = ["Now is the winter of our discontent.", "To be, or not to be: that is the question."]
    first = media.load_audio(formant.synthesize_formant_speech(lines, tmp_path / "a", seed=3), 16000)
    again = media.load_audio(formant.synthesize_formant_speech(lines, tmp_path / "b", seed=3), 16000)
    other = media.load_audio(formant.synthesize_formant_speech(lines, tmp_path / "c", seed=4), 16000)
    for x, y, z, line in zip(first, again, other, lines):
        np.testing.assert_array_equal(x, y)
        assert x.shape != z.shape or not np.array_equal(x, z)
        assert 0.8 < x.size / 16000 / (1.4 * 0.17 * len(line.split())) < 1.3
        spectrum = np.abs(np.fft.rfft(x)) ** 2
        freqs = np.fft.rfftfreq(x.size, 1 / 16000)
        # voiced speech: most energy below 1 kHz, some above 2 kHz (formants, fricatives)
        assert spectrum[freqs < 1000].sum() > 0.5 * spectrum.sum()
        assert spectrum[freqs > 2000].sum() > 0.005 * spectrum.sum()
    with pytest.raises(media.MediaError, match="speech source"):
        media.synthesize_speech(["x"], tmp_path, source="festival")


def test_bad_inputs_fail_in_one_line_naming_the_file(tmp_path):
    with pytest.raises(media.MediaError, match=f"{tmp_path}: no images"):
        media.list_files(tmp_path, media.IMAGE_SUFFIXES, "images")
    with pytest.raises(media.MediaError, match="does not exist"):
        media.list_files(tmp_path / "absent", media.AUDIO_SUFFIXES, "audio files")
    bad_image = tmp_path / "broken.png"
    bad_image.write_bytes(b"\x89PNG not really")
    _png(tmp_path / "good.png")
    with pytest.raises(media.MediaError, match=r"broken.png: cannot read image") as e:
        media.load_images(media.list_files(tmp_path, media.IMAGE_SUFFIXES, "images"))
    assert "\n" not in str(e.value)
    text = tmp_path / "notes.wav"
    text.write_text("this is not audio")
    with pytest.raises(media.MediaError, match="notes.wav: not a readable WAV file"):
        media.load_audio([text], 16000)
    _wav(tmp_path / "slow.wav", np.zeros(100), 4000)
    with pytest.raises(media.MediaError, match="slow.wav: unsupported sample rate 4000 Hz"):
        media.load_audio([tmp_path / "slow.wav"], 16000)
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"size": "big"}))
    with pytest.raises(media.MediaError, match="preprocessor_config.json: unreadable"):
        media.image_preprocessing(tmp_path)


def test_identical_or_constant_inputs_get_one_warning_line(tmp_path):
    """media.media_warnings on the inputs as the model sees them: identical images, an image of
    one colour, silent and constant clips each give one line naming the files and the folder;
    distinct, varying inputs give none."""
    for i in range(3):
        _png(tmp_path / f"img_{i}.png", seed=i)
    for i in range(8):
        shutil.copy(tmp_path / "img_0.png", tmp_path / f"same_{i}.png")
    Image.fromarray(np.full((30, 40, 3), 90, np.uint8)).save(tmp_path / "grey.png")
    where = "DIR"
    varied = media.load_images([tmp_path / f"img_{i}.png" for i in range(3)])
    assert media.media_warnings("image", list(varied), ["a", "b", "c"], where) == []
    same = media.load_images([tmp_path / f"same_{i}.png" for i in range(8)])
    assert media.media_warnings("image", list(same), [f"s{i}" for i in range(8)], where) == [
        "all 8 images of DIR are identical: the cosine between them is 1 by construction"]
    mixed = media.load_images([tmp_path / "img_0.png", tmp_path / "img_1.png",
                               tmp_path / "same_3.png", tmp_path / "grey.png"])
    assert media.media_warnings("image", list(mixed), ["a.png", "b.png", "c.png", "g.png"],
                                where) == [
        "1 of 4 images of DIR repeat an earlier one (c.png = a.png): the cosine between a repeat "
        "and its original is 1 by construction",
        "1 of 4 images of DIR are constant, one colour throughout (g.png): their tokens differ "
        "only by position"]
    # Audio, as loaded at 16 kHz from 22.05 kHz files: silence and a constant level stay exact.
    t = np.arange(11025) / 22050
    _wav(tmp_path / "tone.wav", 0.4 * np.sin(2 * np.pi * 220 * t), 22050)
    _wav(tmp_path / "chirp.wav", 0.4 * np.sin(2 * np.pi * (300 + 400 * t) * t), 22050)
    _wav(tmp_path / "silent.wav", np.zeros(11025), 22050)
    _wav(tmp_path / "level.wav", np.full(9000, 0.25), 22050)
    names = ["tone.wav", "chirp.wav", "silent.wav", "level.wav"]
    waves = media.load_audio([tmp_path / n for n in names], 16000)
    assert np.all(waves[3] == waves[3][0]) and waves[3].size == -(-9000 * 320 // 441)
    assert media.media_warnings("audio", waves[:2], names[:2], where) == []
    level = float(np.float32(round(0.25 * 32767) / 32768))
    assert media.media_warnings("audio", waves, names, where) == [
        f"2 of 4 audio clips of DIR are silent or constant (silent.wav: every sample 0, "
        f"level.wav: every sample {level:g}): their frames differ only by position"]
    silent = media.load_audio([tmp_path / "silent.wav"] * 2, 16000)
    assert media.media_warnings("audio", silent, ["x.wav", "y.wav"], where) == [
        "all 2 audio clips of DIR are identical: the cosine between them is 1 by construction",
        "all 2 audio clips of DIR are silent or constant (x.wav: every sample 0, y.wav: every "
        "sample 0): their frames differ only by position"]
