r"""Time to draw and save the bias sweep's five figures (issue 14: the main job's fixed cost):
with a second tight-bbox draw (before), in this process (`results.save_figure`), and in
`results.FigureWorkers` processes as the main job draws them.

  python -m benchmarks.figure_time --results=runs/bias_sweep/results.json [--processes=-1]

`results.save_figure` saves a figure that has a layout engine (every figure of
`anisotropy_jax.plotting`) without `bbox_inches="tight"`, which would draw it a second time to
measure its extent. The figure processes are started and have imported matplotlib before the
clock starts (the main job starts them before its sweep). Median of `repeats`.
"""
from __future__ import annotations

import json
import pathlib
import tempfile
import time

from absl import app, flags

_RESULTS = flags.DEFINE_string("results", None, "A bias sweep's results.json.", required=True)
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed repetitions (median).")
_PROCESSES = flags.DEFINE_integer("processes", -1, "Figure processes (-1: one per CPU core, at "
                                  "most one per figure, as the main job).")


def _median_seconds(draw, repeats: int) -> float:
    import numpy as np

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        draw()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main(argv):
    del argv
    import matplotlib.pyplot as plt

    from anisotropy_jax import results
    from anisotropy_jax.plotting import sweep as sweep_plots
    from anisotropy_jax.studies.sweep import report

    runs = json.loads(pathlib.Path(_RESULTS.value).read_text())["runs"]
    out = pathlib.Path(tempfile.mkdtemp())

    def tight(fig, path):
        fig.savefig(path, format="png", dpi=120, bbox_inches="tight")
        plt.close(fig)

    def in_process(save):
        return lambda: [save(make(runs), out / f"{name}.png")
                        for name, make in sweep_plots.FIGURES.items()]

    count = len(sweep_plots.FIGURES)
    for label, save in (("bbox_inches='tight' (before)", tight),
                        ("results.save_figure, this process", results.save_figure)):
        print(f"{label:40s} {_median_seconds(in_process(save), _REPEATS.value):6.2f} s for "
              f"{count} figures")
    processes = report.figure_processes(_PROCESSES.value)
    with results.FigureWorkers([report.PLOTTING_MODULE], processes) as workers:
        workers.save(report.figure_jobs(runs, out / "warm_up"))  # untimed: imports, first draw
        seconds = _median_seconds(lambda: workers.save(report.figure_jobs(runs, out)),
                                  _REPEATS.value)
    print(f"{f'results.FigureWorkers, {processes} processes':40s} {seconds:6.2f} s for "
          f"{count} figures")


if __name__ == "__main__":
    app.run(main)
