"""Every study and a verdict on each claim: WORKDIR/REPORT.md (docs/REPORT.md).

  python experiments/report.py --workdir=DIR [--config=report:VARIANT] [--config.FIELD=VALUE ...]

The same as `anisotropy-jax report ...`; `--help` lists its flags, variants and config fields.
"""
from anisotropy_jax import commands

if __name__ == "__main__":
    commands.script("report")
