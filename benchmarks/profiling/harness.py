"""The profilers' one harness: timing of (jitted) calls, the printed table and the JSON file
(`time_calls` also times benchmarks/benchmark.py's matmul rate and metrics at scale).

Every profiler of this package is a script built the same way:

    def define_flags(): ...              # its own flags (none at import)
    def main(args, report): ...          # measures, calling report.time / report.row
    if __name__ == "__main__":
        harness.run("name", main, define_flags)

`run` adds the shared flags --repeats (timed calls after one warm-up call) and --json (write the
setup, every row and the provenance — git commit, device, JAX version — to a file, atomically).
Flags are defined only when a profiler runs, so any number of profilers can be imported in one
process (the tests do). Times are wall clock around `jax.block_until_ready`: the median and the
minimum of `repeats` calls, after a first call that compiles and is reported on its own.
"""
from __future__ import annotations

import dataclasses
import pathlib
import statistics
import sys
import time
from typing import Any, Callable

REPEATS = 20  # timed calls per measurement unless a profiler or --repeats says otherwise


@dataclasses.dataclass(frozen=True)
class Timing:
    """Wall seconds of one measured function: its first call (compilation included) and the
    timed calls after it; `result` is the last call's output."""
    first_s: float
    times_s: tuple[float, ...]
    result: Any = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def min_s(self) -> float:
        return min(self.times_s)


def time_calls(fn: Callable, *args, repeats: int = REPEATS) -> Timing:
    """Calls fn(*args) once (warm-up: compilation, caches), then `repeats` times, each time until
    every array of the output is ready."""
    import jax

    if repeats < 1:
        raise ValueError(f"repeats: must be >= 1, got {repeats}")
    t0 = time.perf_counter()
    result = jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return Timing(first, tuple(times), result)


UNITS = {"s": 1.0, "ms": 1e3, "µs": 1e6}


class Report:
    """A profiler's results: what was measured (`setup`) and one row per measurement, each
    printed as it is taken and kept for `write`."""

    def __init__(self, profiler: str, repeats: int | None = None):
        from anisotropy_jax import results

        self.profiler = profiler
        self.repeats = repeats
        self.setup: dict[str, Any] = {}
        self.rows: list[dict[str, Any]] = []
        self._provenance = results.Provenance()

    def describe(self, title: str, **setup) -> None:
        """Prints the device and `title`; records `setup` (shapes, precision, ...)."""
        import jax

        self.setup.update(setup)
        print(f"{jax.devices()[0].device_kind}: {title}", flush=True)

    def row(self, label: str, value: float, unit: str, **extra) -> dict[str, Any]:
        """One measurement: `value` in `unit`, with named extras (a rate, an error, a share)."""
        row = {"label": label, "value": float(value), "unit": unit, **extra}
        self.rows.append(row)
        tail = "".join(f"  {k} {_text(v)}" for k, v in extra.items())
        print(f"  {label:46s} {_text(value):>10s} {unit}{tail}", flush=True)
        return row

    def time(self, label: str, fn: Callable, *args, per: int | None = None, unit: str = "ms",
             flop: float | None = None, repeats: int | None = None, **extra) -> Timing:
        """Times fn(*args) (`time_calls`) and adds a row: the median in `unit` (s, ms, µs) per
        call, or per grid point given the `per` points of a call, with the minimum, the first
        call's seconds and, given the `flop` of one call, its TFLOP/s at the median."""
        timing = time_calls(fn, *args, repeats=repeats or self.repeats or REPEATS)
        scale = UNITS[unit] / (per or 1)
        if flop:
            extra = {"TFLOP/s": flop / timing.median_s / 1e12, **extra}
        self.row(label, timing.median_s * scale, unit if per is None else f"{unit}/point",
                 min=timing.min_s * scale, first_call_s=timing.first_s, **extra)
        return timing

    def write(self, path: str | pathlib.Path) -> pathlib.Path:
        """Writes the command, setup, rows and provenance as JSON, atomically."""
        from anisotropy_jax import results

        return results.write_json(path, {
            "profiler": f"benchmarks.profiling.{self.profiler}", "command": " ".join(sys.argv),
            "repeats": self.repeats, "setup": self.setup, "rows": self.rows,
            "provenance": self._provenance.finish("benchmarks.profiling")})


def _text(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def run(profiler: str, main: Callable[[Any, Report], None],
        define_flags: Callable[[], None] | None = None, *, repeats: int | None = REPEATS) -> None:
    """Runs a profiler as a script: defines its flags and the shared ones (--repeats unless
    `repeats` is None, --json), parses them, calls main(flags, report) and writes --json."""
    from absl import app, flags

    if define_flags is not None:
        define_flags()
    if repeats is not None:
        flags.DEFINE_integer("repeats", repeats, "Timed calls after one warm-up call (median and "
                             "minimum reported).")
    flags.DEFINE_string("json", None, "Also write the setup, every row and the provenance (git "
                        "commit, device, JAX version) as JSON here.")

    def entry(argv):
        del argv
        args = flags.FLAGS
        report = Report(profiler, args.repeats if repeats is not None else None)
        main(args, report)
        if args.json:
            print(f"wrote {report.write(args.json)}")

    app.run(entry)
