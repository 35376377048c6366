"""The untrained-block bias sweep (docs/SCIENCE.md, "The untrained-block experiment";
docs/SWEEP.md).

  grid     `run(config) -> SweepResult`: the (seed × s) grid, chunked, jitted once, sharded
  points   one grid point: the block on x = z + s·u and the reduction of its probes to metrics
  affine   the shared input projection z·W + s·(u·W) that the block receives as `PrecomputedQKV`
  theory   closed forms F1-F5 (per inputs kind), their comparison with a run, trends, the results
           summary
  controls each control beside the biased inputs: paired differences, identities, operating
           points (input cosine 0.1-0.6)
  tables   the docs' tables, generated from committed results.json files
  report   config.json, results.json/npz, figures, the printed table
  study    the main job as a study of the protocol (`STUDY`: experiments/sweep.py)
"""
from anisotropy_jax.protocol import Study
from anisotropy_jax.studies.sweep import study as _study
from anisotropy_jax.studies.sweep.grid import SweepResult, run

STUDY = Study(_study.validate, _study.run, _study.write, _study.format_report,
              on_demand_memory=True, fast_exit=True)

__all__ = ["STUDY", "SweepResult", "run"]
