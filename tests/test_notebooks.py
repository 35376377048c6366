"""Notebooks: every jupytext source in notebooks/ has its paired .ipynb, in sync and with outputs
stripped (CI executes the .ipynb files in smoke mode with nbmake); the attention core a notebook
or study takes by default is the fused kernel only on GPUs."""
import json
import pathlib

import jupytext
import pytest

from anisotropy_jax.models import fused_attention

NOTEBOOKS = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
SOURCES = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py"))


def test_there_are_notebooks():
    assert SOURCES, "no notebooks/NN_topic.py found"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_pair_in_sync_and_outputs_stripped(source):
    paired = source.with_suffix(".ipynb")
    assert paired.exists(), f"run: jupytext --to ipynb {source.name}"
    committed = json.loads(paired.read_text())
    expected = jupytext.read(source)
    cells = [(c["cell_type"], "".join(c["source"])) for c in committed["cells"]]
    want = [(c["cell_type"], c["source"]) for c in expected.cells]
    assert cells == want, f"{paired.name} differs from {source.name}: jupytext --sync {source.name}"
    for cell in committed["cells"]:
        assert not cell.get("outputs"), f"{paired.name}: outputs are committed"
    text = source.read_text()
    assert "colab-badge" in text and "ANISOTROPY_JAX_SMOKE" in text
    assert 'find_spec("anisotropy_jax") is None' in text  # the guarded install cell


@pytest.mark.parametrize("platform,seq_len,d_head,want", [
    ("cpu", 128, 64, "xla"), ("tpu", 128, 64, "xla"), ("gpu", 128, 64, "pallas"),
    ("cuda", 128, 64, "pallas"), ("gpu", 100, 64, "xla"), ("gpu", 512, 64, "xla"),
])
def test_pallas_is_the_default_only_on_gpus_for_supported_shapes(platform, seq_len, d_head, want):
    assert fused_attention.default_impl(seq_len, d_head, platform) == want
