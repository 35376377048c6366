"""The depth study (docs/DEPTH.md): untrained stacks of independently initialised layers on
x = z + s·u, metrics after every layer, over architectures × widths × bias norms × seeds.

  stack    one layer (post-LN, pre-LN, attention-only; branches scaled by α), the scan over
           layers and the per-layer metrics (the bias sweep's, plus effective rank, rank-1
           residual and RMS norm)
  grid     `run(config) -> DepthResult`: chunked, sharded over devices and processes, resumable
  theory   closed forms beside the data: pre-LN norm growth, pure-attention collapse order
  report   chunk store, results.json/npz, figures, the printed table
  study    the study protocol (`STUDY`: experiments/depth.py)
"""
from anisotropy_jax.protocol import Study
from anisotropy_jax.studies.depth import study as _study
from anisotropy_jax.studies.depth.grid import DepthResult, StackResult, run

STUDY = Study(_study.validate, _study.run, _study.write, _study.format_report)

__all__ = ["DepthResult", "STUDY", "StackResult", "run"]
