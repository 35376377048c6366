"""Godey 2's verdict (studies/report/verdicts_centring.py) on the pretrained runs in this folder:
  .venv/bin/python docs/results/pretrained/godey2_centring/verdict.py"""
import json
import pathlib

from anisotropy_jax.studies.report import verdicts

HERE = pathlib.Path(__file__).resolve().parent
docs = {p.parent.name: json.loads(p.read_text()) for p in sorted(HERE.glob("*/results.json"))}
v = verdicts.godey_2(docs)
print(f"Godey 2: {v.verdict}\ncriterion: {v.criterion}\nscope: {v.scope}")
for line in v.numbers:
    print("-", line)
