"""Trains and analyses the listed bigram_backcopy cells of the :cpu grid (argv[2], in order) in the
grid's own workdir, beside the grid command, so the two share the contended CPU; the grid command
then finds them finished and only reads them."""
import pathlib, sys
from anisotropy_jax.configs import normalizations as normalization_settings
from anisotropy_jax.protocol import SILENT
from anisotropy_jax.studies.normalizations import STUDY, grid as grid_lib
plan = STUDY.validate(normalization_settings.get_config("cpu"), pathlib.Path(sys.argv[1]))
for norm in sys.argv[2].split(","):
    docs = grid_lib.run_cell(plan.grid, plan.workdir, "bigram_backcopy", norm, SILENT)
    print(norm, [d["series"]["val_loss"][-1] for d in docs], flush=True)
