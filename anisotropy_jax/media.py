"""Offline images and audio → arrays for the vision and speech models (docs/CROSS_MODAL.md).

Images (PNG/JPEG, Pillow): converted to RGB, then preprocessed as the model directory's
preprocessor_config.json says, the way `transformers`' PIL image processors (ViTImageProcessor,
BitImageProcessor: `use_fast=False`) do it: resize (shortest edge, aspect kept, or to height ×
width) with the configured PIL filter, centre crop, rescale by 1/255, normalise by mean/std →
(N, 3, H, W) float32. ConvNextImageProcessor (ResNet checkpoints such as microsoft/resnet-50) has
its own resize: a shortest edge s < 384 with `crop_pct` p resizes the shortest edge to int(s / p)
and centre-crops s × s; s >= 384 warps to s × s. Without a preprocessor_config.json, DINOv2's
(`DEFAULT_IMAGE`).

Audio (WAV, stdlib `wave`): 8/16/24/32-bit PCM, channels averaged, scaled to [-1, 1), resampled
to the model's rate with a polyphase filter (scipy.signal.resample_poly); where the model's
preprocessor_config.json sets `do_normalize` (wav2vec 2.0 checkpoints such as
facebook/wav2vec2-base-960h), each waveform as fed to the model is brought to zero mean and unit
variance, (x − mean) / sqrt(var + 1e-7), as Wav2Vec2FeatureExtractor does (`audio_normalization`,
`normalize_waveform`).

Every file of a folder is checked before anything is computed; a bad one gives a one-line
`MediaError` naming the file (unreadable image, not a WAV file, unsupported sample rate or sample
width, a WAV shorter than one 25 ms analysis window), as does an empty folder or a single input
(every measurement compares inputs: `MIN_INPUTS`). Degenerate inputs are measured, with a warning
line (`media_warnings`): identical inputs, an image of one colour, a silent or constant clip.

Defaults that need no download: `skimage_sample_images()` (photographs shipped inside the
scikit-image wheel, used as files only) and `synthesize_speech(lines, folder)` (espeak-ng,
offline text to speech, where it is installed; else a numpy formant synthesiser of speech-like
clips: vowels with formant glides, fricative bursts and a falling pitch contour, deterministic
from a seed; `speech_source()` says which).
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import math
import pathlib
import shutil
import subprocess
import wave
from typing import Any, Sequence

import numpy as np

from anisotropy_jax import formant
from anisotropy_jax.config import ConfigError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
AUDIO_SUFFIXES = (".wav",)
RATE_RANGE = (8000, 192000)  # Hz accepted for resampling
# The shortest WAV accepted: one analysis window of the speech front ends (Whisper's 400-sample
# STFT window and wav2vec 2.0's 400-sample receptive field at 16 kHz).
MIN_SECONDS = 0.025
# Inputs a measurement needs: cosines between inputs need two of them.
MIN_INPUTS = 2
PIL_FILTERS = {0: "NEAREST", 1: "LANCZOS", 2: "BILINEAR", 3: "BICUBIC", 4: "BOX", 5: "HAMMING"}
SKIMAGE_PHOTOS = ("astronaut.png", "brick.png", "camera.png", "cell.png", "chelsea.png",
                  "coffee.png", "coins.png", "grass.png", "gravel.png", "hubble_deep_field.jpg",
                  "ihc.png", "moon.png", "motorcycle_left.png", "page.png", "retina.jpg",
                  "rocket.jpg")


class MediaError(ConfigError):
    """An input file or folder cannot be used; the one-line message names it."""


@dataclasses.dataclass(frozen=True)
class ImagePreprocessing:
    """The fields of a preprocessor_config.json that matter (transformers' names)."""

    shortest_edge: int | None = 256
    height: int | None = None
    width: int | None = None
    resample: int = 3
    crop: tuple[int, int] | None = (224, 224)
    rescale_factor: float = 1 / 255
    image_mean: tuple[float, ...] = (0.485, 0.456, 0.406)
    image_std: tuple[float, ...] = (0.229, 0.224, 0.225)
    crop_pct: float | None = None  # ConvNextImageProcessor's resize (module docstring)


CONVNEXT_WARP_EDGE = 384  # ConvNextImageProcessor warps to a square from this shortest edge on
DEFAULT_IMAGE = ImagePreprocessing()  # facebook/dinov2-small's BitImageProcessor


def image_preprocessing(model_dir: str | pathlib.Path | None) -> ImagePreprocessing:
    """From `model_dir`/preprocessor_config.json, or DEFAULT_IMAGE when there is none."""
    path = None if model_dir is None else pathlib.Path(model_dir) / "preprocessor_config.json"
    if path is None or not path.is_file():
        return DEFAULT_IMAGE
    try:
        cfg: dict[str, Any] = json.loads(path.read_text())
        convnext = str(cfg.get("image_processor_type", cfg.get("feature_extractor_type", ""))
                       ).startswith("ConvNext")
        size = cfg.get("size") or ({"shortest_edge": 384} if convnext else {})
        if isinstance(size, int):  # an int is the shortest edge where the processor keeps aspect
            size = {"shortest_edge": size} if convnext else {"height": size, "width": size}
        crop = cfg.get("crop_size") or {}
        crop = {"height": crop, "width": crop} if isinstance(crop, int) else crop
        resize = cfg.get("do_resize", True)
        return ImagePreprocessing(
            shortest_edge=size.get("shortest_edge") if resize else None,
            height=size.get("height") if resize else None,
            width=size.get("width") if resize else None,
            resample=int(cfg.get("resample", 3 if convnext else 2)),
            crop=(crop["height"], crop["width"]) if cfg.get("do_center_crop") else None,
            rescale_factor=float(cfg.get("rescale_factor", 1 / 255)) if cfg.get(
                "do_rescale", True) else 1.0,
            image_mean=tuple(cfg.get("image_mean", (0.0,) * 3)) if cfg.get(
                "do_normalize", True) else (0.0,) * 3,
            image_std=tuple(cfg.get("image_std", (1.0,) * 3)) if cfg.get(
                "do_normalize", True) else (1.0,) * 3,
            crop_pct=float(cfg.get("crop_pct") or 224 / 256) if convnext and resize else None)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise MediaError(f"{path}: unreadable preprocessor config ({e})") from None


def list_files(folder: str | pathlib.Path, suffixes: Sequence[str], what: str
               ) -> list[pathlib.Path]:
    """The files of `folder` with one of `suffixes` (sorted); MediaError if none or no folder."""
    folder = pathlib.Path(folder)
    if not folder.is_dir():
        raise MediaError(f"{folder}: inputs folder does not exist")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in suffixes)
    if not files:
        raise MediaError(f"{folder}: no {what} ({', '.join(suffixes)}) in the folder")
    return files


def _open_rgb(path: pathlib.Path):
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            image.load()
            return image.convert("RGB")
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        raise MediaError(f"{path}: cannot read image ({type(e).__name__}: "
                         f"{' '.join(str(e).split())})") from None


def _resize_crop(image, prep: ImagePreprocessing):
    from PIL import Image

    w, h = image.size
    edge, crop = prep.shortest_edge, prep.crop
    if prep.crop_pct is not None and edge:  # ConvNextImageProcessor
        if edge >= CONVNEXT_WARP_EDGE:
            edge, prep = None, dataclasses.replace(prep, height=edge, width=edge)
        else:
            edge, crop = int(edge / prep.crop_pct), (edge, edge)
    if edge:
        short, long = (w, h) if w <= h else (h, w)
        new_long = int(edge * long / short)
        size = (edge, new_long) if w <= h else (new_long, edge)
        image = image.resize(size, getattr(Image.Resampling, PIL_FILTERS[prep.resample]))
    elif prep.height and prep.width:
        image = image.resize((prep.width, prep.height),
                             getattr(Image.Resampling, PIL_FILTERS[prep.resample]))
    array = np.asarray(image)
    if crop:
        ch, cw = crop
        h, w = array.shape[:2]
        if ch > h or cw > w:  # transformers pads with zeros to the crop size first
            array = np.pad(array, (((max(ch - h, 0) + 1) // 2, max(ch - h, 0) // 2),
                                   ((max(cw - w, 0) + 1) // 2, max(cw - w, 0) // 2), (0, 0)))
            h, w = array.shape[:2]
        top, left = (h - ch) // 2, (w - cw) // 2
        array = array[top:top + ch, left:left + cw]
    return array


def load_images(paths: Sequence[str | pathlib.Path], prep: ImagePreprocessing = DEFAULT_IMAGE,
                minimum: int = MIN_INPUTS) -> np.ndarray:
    """Image files → (N, 3, H, W) float32, preprocessed (module docstring). Every file is opened
    before any is processed; all must give the same size (use a crop or a fixed size); fewer
    than `minimum` files is an error too."""
    images = [_open_rgb(pathlib.Path(p)) for p in paths]
    _require_count(paths, "image" + "s" * (len(paths) != 1), minimum)
    arrays = [_resize_crop(image, prep) for image in images]
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise MediaError(f"{paths[0]}: images of different sizes after preprocessing {shapes}; "
                         "the preprocessor config needs a crop or a fixed size")
    mean = np.asarray(prep.image_mean, np.float32)
    std = np.asarray(prep.image_std, np.float32)
    batch = np.stack(arrays).astype(np.float32) * np.float32(prep.rescale_factor)
    return ((batch - mean) / std).transpose(0, 3, 1, 2).astype(np.float32)


# --------------------------------------------------------------------------------------------
# Audio

def _read_wav(path: pathlib.Path) -> tuple[np.ndarray, int]:
    try:
        with wave.open(str(path), "rb") as f:
            rate, width, channels = f.getframerate(), f.getsampwidth(), f.getnchannels()
            frames = f.readframes(f.getnframes())
    except (wave.Error, EOFError, OSError) as e:
        raise MediaError(f"{path}: not a readable WAV file ({' '.join(str(e).split())})") from None
    if not RATE_RANGE[0] <= rate <= RATE_RANGE[1]:
        raise MediaError(f"{path}: unsupported sample rate {rate} Hz (supported: "
                         f"{RATE_RANGE[0]}-{RATE_RANGE[1]} Hz)")
    if width == 1:
        samples = (np.frombuffer(frames, np.uint8).astype(np.float64) - 128) / 128
    elif width == 3:
        raw = np.frombuffer(frames, np.uint8).reshape(-1, 3)
        ints = raw[:, 0].astype(np.int32) | raw[:, 1].astype(np.int32) << 8 | (
            raw[:, 2].astype(np.int8).astype(np.int32) << 16)
        samples = ints / 2.0 ** 23
    elif width in (2, 4):
        samples = np.frombuffer(frames, f"<i{width}").astype(np.float64) / 2.0 ** (8 * width - 1)
    else:
        raise MediaError(f"{path}: unsupported sample width {width} bytes")
    samples = samples[:samples.size // channels * channels].reshape(-1, channels).mean(axis=1)
    if samples.size == 0:
        raise MediaError(f"{path}: WAV file has no samples")
    if samples.size < MIN_SECONDS * rate:
        raise MediaError(f"{path}: {samples.size} sample{'s' * (samples.size != 1)} "
                         f"({1000 * samples.size / rate:.2g} ms at {rate} Hz), shorter than one "
                         f"{1000 * MIN_SECONDS:g} ms analysis window")
    return samples, rate


def _require_count(paths: Sequence[str | pathlib.Path], what: str, minimum: int) -> None:
    if len(paths) < minimum:
        where = pathlib.Path(paths[0]) if paths else pathlib.Path(".")
        raise MediaError(f"{where}: {len(paths)} {what}; the measurement compares inputs: give at "
                         f"least {minimum}")


def resample(samples: np.ndarray, rate: int, target: int) -> np.ndarray:
    """Polyphase resampling rate → target (scipy.signal.resample_poly, Kaiser window). A constant
    signal (silence too) stays exactly constant, at resample_poly's length (its filter would
    ripple at the edges), so that `media_warnings` can tell it."""
    if rate == target:
        return samples
    from scipy.signal import resample_poly

    g = math.gcd(rate, target)
    up, down = target // g, rate // g
    if samples.size and np.all(samples == samples[0]):
        return np.full(-(-samples.size * up // down), samples[0], samples.dtype)
    return resample_poly(samples, up, down)


def load_audio(paths: Sequence[str | pathlib.Path], rate: int, minimum: int = MIN_INPUTS
               ) -> list[np.ndarray]:
    """WAV files → one float32 waveform per file at `rate` Hz. Every file is read and checked
    before any is resampled; fewer than `minimum` files is an error too."""
    read = [_read_wav(pathlib.Path(p)) for p in paths]
    _require_count(paths, "audio file" + "s" * (len(paths) != 1), minimum)
    return [resample(samples, r, rate).astype(np.float32) for samples, r in read]


def audio_normalization(model_dir: str | pathlib.Path | None) -> bool:
    """`model_dir`/preprocessor_config.json's do_normalize (Wav2Vec2FeatureExtractor's flag);
    False without the file (HuBERT and Whisper checkpoints leave it false or absent)."""
    path = None if model_dir is None else pathlib.Path(model_dir) / "preprocessor_config.json"
    if path is None or not path.is_file():
        return False
    try:
        return bool(json.loads(path.read_text()).get("do_normalize", False))
    except (ValueError, AttributeError) as e:
        raise MediaError(f"{path}: unreadable preprocessor config ({e})") from None


def normalize_waveform(samples: np.ndarray) -> np.ndarray:
    """Zero mean, unit variance in float32: (x − mean) / sqrt(var + 1e-7), Wav2Vec2FeatureExtractor's
    zero_mean_unit_var_norm of one unpadded utterance."""
    x = np.asarray(samples, np.float32)
    return ((x - x.mean()) / np.sqrt(x.var() + 1e-7)).astype(np.float32)


# --------------------------------------------------------------------------------------------
# Degenerate inputs: identical or constant ones are measured, with a warning line

def _listed(items: Sequence[str]) -> str:
    return ", ".join(items[:3]) + (", …" if len(items) > 3 else "")


def identical_warning(arrays: Sequence[np.ndarray], names: Sequence[str], what: str,
                      where: str) -> str | None:
    """The warning when some of `arrays` (the inputs as the model sees them: preprocessed pixels,
    waveforms, token ids) are identical, else None: "all 8 images of DIR are identical: the cosine
    between them is 1 by construction", or "2 of 8 images of DIR repeat an earlier one (b.png =
    a.png, …): …"."""
    first: dict[tuple, int] = {}
    repeats = []
    for i, a in enumerate(arrays):
        a = np.ascontiguousarray(a)
        key = (a.shape, a.dtype.str, hashlib.blake2b(a.tobytes()).digest())
        if key in first:
            repeats.append(f"{names[i]} = {names[first[key]]}")
        else:
            first[key] = i
    if not repeats:
        return None
    if len(first) == 1:
        return (f"all {len(arrays)} {what} of {where} are identical: the cosine between them is 1 "
                f"by construction")
    return (f"{len(repeats)} of {len(arrays)} {what} of {where} repeat an earlier one "
            f"({_listed(repeats)}): the cosine between a repeat and its original is 1 by "
            f"construction")


def _constant(a: np.ndarray) -> bool:
    """Every value equal, per channel for an image (C, H, W)."""
    flat = np.asarray(a).reshape(a.shape[0] if np.ndim(a) > 1 else 1, -1)
    return bool(flat.size) and bool(np.all(flat == flat[:, :1]))


def media_warnings(modality: str, arrays: Sequence[np.ndarray], names: Sequence[str],
                   where: str) -> list[str]:
    """The warning lines of image ((C, H, W) preprocessed) or audio (waveforms) inputs:
    identical ones (`identical_warning`), and constant ones, an image of one colour throughout
    or a silent or constant clip, whose tokens then differ only by position."""
    what = "images" if modality == "image" else "audio clips"
    lines = [identical_warning(arrays, names, what, where)]
    constant = [i for i, a in enumerate(arrays) if _constant(a)]
    if constant:
        count = f"all {len(arrays)}" if len(constant) == len(arrays) else (
            f"{len(constant)} of {len(arrays)}")
        if modality == "image":
            lines.append(f"{count} {what} of {where} are constant, one colour throughout "
                         f"({_listed([names[i] for i in constant])}): their tokens differ only "
                         f"by position")
        else:
            cells = [f"{names[i]}: every sample {float(np.ravel(arrays[i])[0]):g}" for i in constant]
            lines.append(f"{count} {what} of {where} are silent or constant ({_listed(cells)}): "
                         f"their frames differ only by position")
    return [line for line in lines if line]


# --------------------------------------------------------------------------------------------
# Offline defaults

def skimage_sample_images() -> list[pathlib.Path]:
    """The photographs of scikit-image's bundled data folder (`SKIMAGE_PHOTOS`), found without
    importing scikit-image. MediaError when it is not installed."""
    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        raise MediaError("scikit-image: not installed; its sample photographs are the default "
                         "images (pip install scikit-image==0.26.0) or pass an inputs folder")
    data = pathlib.Path(list(spec.submodule_search_locations)[0]) / "data"
    return [data / name for name in SKIMAGE_PHOTOS if (data / name).is_file()]


SPEECH_SOURCES = ("espeak-ng", "formant")


def speech_source() -> str:
    """Which synthesiser `synthesize_speech` uses here: "espeak-ng" where the binary is on PATH,
    else "formant" (`formant.synthesize_formant_speech`, numpy only)."""
    return "espeak-ng" if shutil.which("espeak-ng") else "formant"


def synthesize_speech(lines: Sequence[str], folder: str | pathlib.Path, voice: str = "en-us",
                      words_per_minute: int = 150, seed: int = 0, source: str | None = None
                      ) -> list[pathlib.Path]:
    """One WAV per line into `folder` as line_000.wav, …: spoken by espeak-ng (offline; 22,050 Hz
    mono 16-bit; files already there are reused) where it is installed, else the numpy formant
    synthesiser (`formant.synthesize_formant_speech`, with `seed`). `source` forces one of
    SPEECH_SOURCES (default `speech_source()`); MediaError if "espeak-ng" is forced and absent."""
    source = source or speech_source()
    if source not in SPEECH_SOURCES:
        raise MediaError(f"speech source: {source!r} is not one of {SPEECH_SOURCES}")
    if source == "formant":
        return formant.synthesize_formant_speech(lines, folder, seed)
    binary = shutil.which("espeak-ng")
    if binary is None:
        raise MediaError("espeak-ng: not found; install it (apt-get install espeak-ng) or pass "
                         "an inputs folder of WAV files")
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, line in enumerate(lines):
        path = folder / f"line_{i:03d}.wav"
        if not path.is_file():
            subprocess.run([binary, "-v", voice, "-s", str(words_per_minute), "-w", str(path),
                            line], check=True, capture_output=True)
        paths.append(path)
    return paths
