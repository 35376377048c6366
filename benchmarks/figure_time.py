r"""Time to draw and save the bias sweep's five figures, with and without a second tight-bbox
draw (issue 14: the main job's fixed cost).

  python -m benchmarks.figure_time --results=runs/bias_sweep/results.json

`results.save_figure` saves a figure that has a layout engine (every figure of
`anisotropy_jax.plotting`) without `bbox_inches="tight"`, which would draw it a second time to
measure its extent; this compares the two on the same figures, median of `repeats`.
"""
from __future__ import annotations

import json
import pathlib
import tempfile
import time

from absl import app, flags

_RESULTS = flags.DEFINE_string("results", None, "A bias sweep's results.json.", required=True)
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed repetitions (median).")


def main(argv):
    del argv
    import matplotlib.pyplot as plt
    import numpy as np

    from anisotropy_jax import results
    from anisotropy_jax.plotting import sweep as sweep_plots

    runs = json.loads(pathlib.Path(_RESULTS.value).read_text())["runs"]
    out = pathlib.Path(tempfile.mkdtemp())

    def tight(fig, path):
        fig.savefig(path, format="png", dpi=120, bbox_inches="tight")
        plt.close(fig)

    for label, save in (("bbox_inches='tight' (before)", tight),
                        ("results.save_figure (now)", results.save_figure)):
        times = []
        for _ in range(_REPEATS.value):
            t0 = time.perf_counter()
            for name, make in sweep_plots.FIGURES.items():
                save(make(runs), out / f"{name}.png")
            times.append(time.perf_counter() - t0)
        print(f"{label:32s} {np.median(times):6.2f} s for {len(sweep_plots.FIGURES)} figures")


if __name__ == "__main__":
    app.run(main)
