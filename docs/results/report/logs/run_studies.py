"""Runs some studies of the reproduction's default config into one workdir through the library
(the full `experiments/report.py` run later loads each from its study_run.json)."""
import pathlib, sys
from anisotropy_jax.configs import report as cfgs
from anisotropy_jax.configs.report import reproduce_config_from_mapping
from anisotropy_jax.protocol import Progress
from anisotropy_jax.studies.report import runner
import dataclasses
variant, workdir, studies = sys.argv[1], pathlib.Path(sys.argv[2]), tuple(sys.argv[3].split(","))
config = reproduce_config_from_mapping(cfgs.get_config(variant))
config = dataclasses.replace(config, studies=studies)
runs = runner.run_all(config, workdir, Progress(bars=False))
for name, run in runs.items():
    print(name, run.reason or f"{run.seconds:.0f} s")
