"""The cross-modal comparison: the table and curves come from the per-model results.json files
(relative depth, counts of states where trained exceeds untrained, untrained-only CNN), and the
script runs a model end to end on a WAV folder, then reuses its results."""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np

from anisotropy_jax import results
from anisotropy_jax.studies import cross_modal
from tests.test_pretrained_modalities import _tones
from tests import processes

REPO = pathlib.Path(__file__).resolve().parent.parent


def _fake(workdir, name, labels, trained, untrained):
    metrics = {"untrained": {"average_cosine": untrained}}
    if trained is not None:
        metrics["trained"] = {"average_cosine": trained}
    doc = {"model": {"state_labels": labels}, "metrics": metrics, "data": {"text_source": "x"}}
    (workdir / name).mkdir(parents=True)
    (workdir / name / "results.json").write_text(json.dumps(doc))


def test_collect_table_and_figure_from_results_files(tmp_path):
    _fake(tmp_path, "Whisper-tiny.en", ["embeddings", "layer_1", "layer_2", "final_norm"],
          [0.5, 0.7, 0.6, 0.2], [0.4, 0.5, 0.5, 0.3])
    _fake(tmp_path, "ResNet-50-untrained", ["embeddings", "stage_1", "pooled"], None,
          [0.5, 0.8, 1.0])
    models = cross_modal.collect(tmp_path, ("Whisper-tiny.en", "DINOv2-S",
                                            "ResNet-50-untrained"))
    assert list(models) == ["Whisper-tiny.en", "ResNet-50-untrained"]  # DINOv2-S: no results
    np.testing.assert_allclose(models["Whisper-tiny.en"]["depth"], [0, 1 / 3, 2 / 3, 1])
    assert "trained" not in models["ResNet-50-untrained"]
    rows = cross_modal.table(models).splitlines()
    assert rows[2] == ("| Whisper-tiny.en | audio (transformer) | 4 (final_norm) | 0.60–0.70 | "
                       "0.50–0.50 | 0.20 | 0.30 | 3 of 4 |")
    assert rows[3] == ("| ResNet-50-untrained | image (cnn) | 3 (pooled) | — | 0.80 | — | 1.00 "
                       "| — |")
    out = cross_modal.write(models, {"DINOv2-S": "not installed"}, tmp_path,
                            results.Provenance())
    assert out["skipped"] == {"DINOv2-S": "not installed"}
    assert (tmp_path / "figures" / "cross_modal.png").stat().st_size > 0
    assert (tmp_path / "cross_modal.md").read_text().startswith("| model |")


def test_collect_keeps_every_untrained_seed_and_the_scope(tmp_path):
    """A results.json with untrained_seeds: the per-state cross-sequence cosine of the trained
    model and of each seed, their interval, the scope facts; seed_table's rows follow them."""
    from anisotropy_jax.studies.pretrained import media_inputs

    labels = ["embeddings", "layer_1", "final_norm"]
    per_seed = [[0.1, 0.2, 0.3], [0.2, 0.4, 0.1], [0.3, 0.3, 0.2]]
    interval = {"mean": [0.2, 0.3, 0.2], "low": [0.0, 0.1, 0.0], "high": [0.4, 0.5, 0.4],
                "min": [0.1, 0.2, 0.1], "max": [0.3, 0.4, 0.3]}
    doc = {"model": {"state_labels": labels}, "config": {"seed": 7},
           "metrics": {"trained": {"average_cosine": [0.5, 0.6, 0.7],
                                   "cross_sequence_cosine": [0.25, 0.45, 0.9]},
                       "untrained": {"average_cosine": [0.2, 0.3, 0.2],
                                     "cross_sequence_cosine": interval["mean"]}},
           "untrained_seeds": {"seeds": [7, 8, 9],
                               "metrics": {"cross_sequence_cosine": per_seed,
                                           "average_cosine": per_seed},
                               "interval": {"cross_sequence_cosine": interval,
                                            "average_cosine": interval}},
           "data": {"text_source": media_inputs.FORMANT_SOURCE,
                    "inputs_source": media_inputs.FORMANT_SOURCE}}
    (tmp_path / "Whisper-tiny.en").mkdir()
    (tmp_path / "Whisper-tiny.en" / "results.json").write_text(json.dumps(doc))
    _fake(tmp_path, "DINOv2-S", labels, [0.5, 0.6, 0.7], [0.4, 0.5, 0.6])  # one seed, old file
    models = cross_modal.collect(tmp_path, ("Whisper-tiny.en", "DINOv2-S"))
    whisper = models["Whisper-tiny.en"]
    assert whisper["untrained_seeds"] == [7, 8, 9]
    cross = whisper["per_layer"]["cross_sequence_cosine"]
    assert cross["untrained_per_seed"] == per_seed and cross["trained"] == [0.25, 0.45, 0.9]
    assert (cross["untrained"], cross["untrained_max"]) == (interval["mean"], interval["max"])
    assert whisper["scope"] == {"modality": "audio", "architecture": "transformer",
                                "weights": "trained", "inputs": "formant speech (numpy "
                                "synthesiser)", "inputs_synthetic": True,
                                "units": "20 ms frames", "character_level": False}
    assert set(whisper["per_layer"]) == {"average_cosine", "cross_sequence_cosine"}  # the file's
    dino = models["DINOv2-S"]
    assert dino["untrained_seeds"] == [0] and dino["scope"]["inputs_synthetic"] is None
    assert dino["per_layer"]["average_cosine"]["untrained_low"] == [None] * 3
    rows = cross_modal.seed_table(models).splitlines()
    assert len(rows) == 2 + 3  # DINOv2-S has no cross-sequence cosine
    assert rows[2] == ("| Whisper-tiny.en | embeddings | 0.250 | 0.200 | [0.000, 0.400] | "
                       "[0.100, 0.300] | False | formant speech (numpy synthesiser); trained; "
                       "3 untrained seeds |")
    assert rows[4].split(" | ")[6] == "True"  # 0.9 above every seed's 0.3
    from anisotropy_jax.plotting import cross_modal as plots  # the seeds' min-max: Whisper only
    assert len(plots.cross_modal_figure(models).axes[0].collections) == 1


def test_script_on_whisper_tiny_en_with_a_wav_folder(tmp_path):
    folder = _tones(tmp_path / "wavs", [0.6, 0.9], rate=16000)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    processes.one_device(env)
    args = [sys.executable, str(REPO / "experiments" / "cross_modal.py"),
            "--config=cross_modal:smoke",
            f"--workdir={tmp_path / 'out'}", "--config.models=('Whisper-tiny.en',)",
            f"--config.pretrained.inputs={folder}", "--config.pretrained.untrained_seeds=2"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    per_model = tmp_path / "out" / "Whisper-tiny.en" / "results.json"
    doc = json.loads(per_model.read_text())
    assert doc["data"]["inputs"] == ["tone_0.wav", "tone_1.wav"]
    summary = json.loads((tmp_path / "out" / "results.json").read_text())
    assert summary["models"]["Whisper-tiny.en"]["trained"] == doc["metrics"]["trained"][
        "average_cosine"]
    assert (tmp_path / "out" / "Whisper-tiny.en" / "inputs.txt").read_text().splitlines() == [
        "tone_0.wav", "tone_1.wav"]  # inputs, not sentences
    assert not (tmp_path / "out" / "Whisper-tiny.en" / "sentences.txt").exists()
    stamp = per_model.stat().st_mtime_ns
    again = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    assert again.returncode == 0 and "reusing" in again.stdout
    assert per_model.stat().st_mtime_ns == stamp
    bad = subprocess.run(args[:3] + [f"--workdir={tmp_path / 'bad'}", "--config.models=('GPT-9',)"],
                         capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1].startswith("error: models: unknown model 'GPT-9'")


def _without_espeak_ng() -> dict[str, str]:
    """The environment with every PATH entry holding an espeak-ng binary left out."""
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not (pathlib.Path(d) / "espeak-ng").exists()]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PATH": os.pathsep.join(path)}
    processes.one_device(env)
    return env


def test_smoke_runs_to_the_end_without_espeak_ng(tmp_path):
    """The README's cross-modal smoke row needs nothing outside pip: without espeak-ng the
    default speech is the formant synthesiser, and results.json says so."""
    args = [sys.executable, str(REPO / "experiments" / "cross_modal.py"),
            "--config=cross_modal:smoke",
            f"--workdir={tmp_path / 'out'}", "--config.pretrained.untrained_seeds=2"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=REPO,
                          env=_without_espeak_ng())
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "out" / "Whisper-tiny.en" / "results.json").read_text())
    assert doc["data"]["inputs_source"].startswith("numpy formant synthesiser")
    assert len(doc["data"]["inputs"]) == 2
    summary = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(summary["models"]) == {"all-MiniLM-L6-v2", "Whisper-tiny.en"}
    whisper = summary["models"]["Whisper-tiny.en"]
    assert whisper["untrained_seeds"] == [0, 1] and whisper["scope"]["inputs_synthetic"]
    per_seed = whisper["per_layer"]["cross_sequence_cosine"]["untrained_per_seed"]
    assert np.shape(per_seed) == (2, len(whisper["labels"]))
    assert "untrained seed 1 (2 of 2)" in proc.stdout + proc.stderr  # progress inside a model


def test_every_model_is_checked_before_the_first_runs(tmp_path):
    """A requirement of the second model (a text model given a WAV folder) stops the run with one
    line before the first model (Whisper, which takes the folder) writes anything."""
    folder = _tones(tmp_path / "wavs", [0.6, 0.9], rate=16000)
    args = [sys.executable, str(REPO / "experiments" / "cross_modal.py"),
            "--config=cross_modal:smoke",
            f"--workdir={tmp_path / 'out'}", f"--config.pretrained.inputs={folder}",
            "--config.models=('Whisper-tiny.en', 'all-MiniLM-L6-v2')"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=REPO,
                          env=_without_espeak_ng())
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: inputs:")
    assert not (tmp_path / "out" / "Whisper-tiny.en" / "results.json").exists()


def test_run_modalities_measures_speech_without_espeak_ng(tmp_path, monkeypatch):
    """The reproduction's vision/speech study asks for Whisper on the cross-modal study's own
    speech source when espeak-ng is absent (the formant synthesiser), instead of skipping it."""
    from anisotropy_jax import media
    from anisotropy_jax.configs.report import ReproduceConfig
    from anisotropy_jax.protocol import SILENT
    from anisotropy_jax.studies.report import runner

    asked = []
    monkeypatch.setattr(media.shutil, "which", lambda name: None)
    monkeypatch.setattr(cross_modal, "run_models",
                        lambda cfg, out, progress: asked.append(cfg.models) or {})
    monkeypatch.setattr(cross_modal, "collect", lambda out, names: {})
    run = runner.run_modalities(ReproduceConfig(studies=("modalities",)), tmp_path, SILENT)
    assert media.speech_source() == "formant"
    assert asked[-1] == runner.SPEECH_MODELS and run.results is None  # images: where installed
