"""One command for every study and a verdict on each claim of docs/SCIENCE.md (docs/REPORT.md).

  python experiments/reproduce.py --config=experiments/configs/reproduce.py[:smoke|:full] \
      --workdir=DIR [--report=docs/REPORT.md] [--config.FIELD=VALUE ...]

Runs the bias sweep with its norm-matched control, the seeded training runs, the pretrained study
on every installed model, the vision/speech measurement and the depth study, each into DIR/<study>/
by its own report.write, then writes DIR/REPORT.md (with --report also a copy there, its figures
and results.json files copied beside it). A bad flag or config exits with status 2 and one line
naming the field, before anything is compiled; a non-finite metric exits with status 1.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("report", "experiments/configs/reproduce.py:smoke")
