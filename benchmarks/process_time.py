r"""Seconds to results as whole processes: the main job against a
PyTorch loop script, wall clock from spawn to exit, with each script's own phase times.

  python -m benchmarks.process_time --out=FILE.json --rounds=N [--notorch] [--workload=default]
      [--script_flags=FLAGS ...] [--baseline=CHECKOUT]

Each round runs, one process at a time, alternating so that all sides share the machine's load:
for each cache mode (cold: an empty compilation-cache folder; warm: the same folder again; off:
--compilation_cache=off), our main job in each `--script_flags` variant (extra flags; default none), then the
`--baseline` checkout's main job if given, each followed by the torch script.
"ours" is experiments/sweep.py; `--workload=target4` (the default) is the CPU workload of
target 4 (B = 8, L = 128, one seed, 64 bias norms: s = 0 and 63 log-spaced in [2^-2, 2^12]),
`--workload=default` the README's main job unchanged (target 3, GPU). "torch" is
benchmarks/torch_loop_process.py on the target-4 shapes (`--notorch` skips it, e.g. on a GPU).

Per run the JSON holds: the command, wall seconds (perf_counter from just before spawn to the
reaped exit), user/system CPU seconds and peak RSS of the child (`os.wait4`), the load averages
before and after, and `phases`: [name, seconds] from the spawn (or the previous phase) to the end
of each phase the script marked (`--phase_times`), ending with "exit" (last mark → reaped). The
summary gives medians per side, cache mode and variant, the `fixed_s` of each run (wall minus the
steady-state compute: every chunk counted at the median time of the chunks after the first) and
the ratio torch wall / our wall of the pairs that ran back to back.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
from absl import app, flags

_OUT = flags.DEFINE_string("out", None, "Write every run and the summary as JSON here.",
                           required=True)
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Rounds (each: cold, warm, off; torch after each).")
_TORCH = flags.DEFINE_bool("torch", True, "Run the PyTorch loop script after each of ours.")
_WORKLOAD = flags.DEFINE_enum("workload", "target4", ["target4", "default"],
                              "target4: B = 8, 1 seed, 64 bias norms; default: the README's main "
                              "job.")
_MODES = flags.DEFINE_list("modes", ["cold", "warm", "off"], "Cache modes per round, in order "
                           "('warm' needs a 'cold' before it in the same round).")
_VARIANTS = flags.DEFINE_multi_string(
    "script_flags", [""], "Extra flags of our script, space-separated, one variant per use of "
    "this flag (run in turn within each round, for A/B comparisons), e.g. --script_flags= "
    "--script_flags=--figure_processes=0. Default: one variant without extra flags.")
_BASELINE = flags.DEFINE_string(
    "baseline", None, "Another checkout (e.g. `git archive` of an earlier commit whose script has "
    "--phase_times) whose main job runs too, after ours in every round and cache mode, with "
    "PYTHONPATH pointing at it: before/after under the same load.")
_NOTE = flags.DEFINE_string("note", "", "Free text saved in the JSON (e.g. what --baseline is).")
_PYTHON = flags.DEFINE_string("python", sys.executable, "The interpreter of both scripts.")

REPO = pathlib.Path(__file__).resolve().parent.parent
NUM_BIAS = 64  # target 4: s = 0 and 63 log-spaced in [2^-2, 2^12]


def target4_bias_norms() -> list[float]:
    return [0.0] + [2.0 ** (-2 + 14 * k / (NUM_BIAS - 2)) for k in range(NUM_BIAS - 1)]


def ours_command(workdir: pathlib.Path, cache: str, phase_file: pathlib.Path,
                 variant: str = "", repo: pathlib.Path = REPO) -> list[str]:
    cmd = [_PYTHON.value, str(repo / "experiments" / "sweep.py"),
           "--config=sweep",
           f"--workdir={workdir}", f"--compilation_cache={cache}", f"--phase_times={phase_file}"]
    if _WORKLOAD.value == "target4":
        norms = ",".join(repr(s) for s in target4_bias_norms())
        cmd += ["--config.batch_size=8", "--config.num_seeds=1", f"--config.bias_norms=({norms})"]
    return cmd + variant.split()


def torch_command(out: pathlib.Path, phase_file: pathlib.Path) -> list[str]:
    return [_PYTHON.value, "-m", "benchmarks.torch_loop_process", f"--out={out}",
            f"--phase_times={phase_file}", "--batch_size=8", f"--num_bias={NUM_BIAS}"]


def phase_durations(stamps: list, spawn_epoch: float, wall: float) -> list[list]:
    """[name, seconds since the previous mark (the first: since spawn)], then ["exit", ...]."""
    out, previous = [], spawn_epoch
    for name, at in stamps:
        out.append([name, round(at - previous, 4)])
        previous = at
    out.append(["exit", round(spawn_epoch + wall - previous, 4)])
    return out


def run_process(side: str, cache: str | None, cmd: list[str], phase_file: pathlib.Path,
                log: pathlib.Path, repo: pathlib.Path = REPO) -> dict:
    """One whole process (in `repo`, first on PYTHONPATH): wall from just before spawn to the
    reaped exit, its rusage and phases."""
    load_before = os.getloadavg()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(repo)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    with open(log, "w") as out:
        spawn_epoch, t0 = time.time(), time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    record = {"side": side, "cache": cache, "rc": proc.returncode, "wall_s": round(wall, 3),
              "user_s": round(usage.ru_utime, 2), "sys_s": round(usage.ru_stime, 2),
              "max_rss_kB": usage.ru_maxrss, "load_before": load_before,
              "load_after": os.getloadavg(), "command": " ".join(cmd[:6]) + " ..."}
    if proc.returncode != 0:
        record["log_tail"] = log.read_text()[-2000:]
        print(record["log_tail"], file=sys.stderr)
    elif phase_file.exists():
        stamps = json.loads(phase_file.read_text())["stamps"]
        record["phases"] = phase_durations(stamps, spawn_epoch, wall)
    print(f"{side:5s} cache={str(cache):5s} rc={proc.returncode} wall {wall:6.2f} s  load "
          f"{load_before[0]:.2f}  " + "  ".join(f"{n} {s:.2f}" for n, s in
                                                 record.get("phases", [])), flush=True)
    return record


def fixed_seconds(record: dict) -> float | None:
    """Wall minus steady-state compute: every chunk counted at the median of chunks 2.. ."""
    chunks = [s for name, s in record.get("phases", []) if name.startswith("chunk ")]
    if len(chunks) < 2:
        return None
    return round(record["wall_s"] - len(chunks) * float(np.median(chunks[1:])), 3)


def _group_key(record: dict) -> str:
    if record["side"] == "torch":
        return "torch"
    return f"{record['side']}/{record['cache']}" + (
        f" [{record['variant']}]" if record["variant"] else "")


def summarize(runs: list[dict]) -> dict:
    """Medians per side, cache mode and variant; torch/ours wall ratios of back-to-back pairs."""
    groups: dict[str, list[dict]] = {}
    for r in runs:
        if r["rc"] == 0:
            groups.setdefault(_group_key(r), []).append(r)
    summary = {}
    for key, group in groups.items():
        phases: dict[str, list[float]] = {}
        for r in group:
            for name, s in r.get("phases", []):
                phases.setdefault(name, []).append(s)
        walls = [r["wall_s"] for r in group]
        fixed = [f for f in map(fixed_seconds, group) if f is not None]
        summary[key] = {"runs": len(group), "wall_s_median": float(np.median(walls)),
                        "wall_s_range": [min(walls), max(walls)],
                        "fixed_s_median": float(np.median(fixed)) if fixed else None,
                        "phase_s_median": {n: float(np.median(v)) for n, v in phases.items()}}
    ratios: dict[str, list[float]] = {}
    for ours, torch in zip(runs, runs[1:]):
        if ours["side"] != "torch" and torch["side"] == "torch" and ours["rc"] == torch["rc"] == 0:
            ratio = round(torch["wall_s"] / ours["wall_s"], 3)
            ratios.setdefault(_group_key(ours), []).append(ratio)
    summary["torch_over_ours_wall"] = {key: {"pairs": v, "median": float(np.median(v))}
                                       for key, v in ratios.items()}
    return summary


def run_round(rnd: int, base: pathlib.Path) -> list[dict]:
    """One round: per cache mode, our script in each variant (and the baseline's), each followed
    by the torch script."""
    runs = []
    sides = [("ours", REPO, variant) for variant in _VARIANTS.value]
    if _BASELINE.value:
        sides.append(("baseline", pathlib.Path(_BASELINE.value).resolve(), ""))
    for mode in _MODES.value:
        for v, (side, repo, variant) in enumerate(sides):
            tag = f"{rnd}_{mode}_{v}"
            cache = "off" if mode == "off" else str(base / f"cache_{rnd}_{v}")
            phase_file = base / f"{side}_{tag}.phases.json"
            cmd = ours_command(base / f"{side}_{tag}", cache, phase_file, variant, repo)
            record = run_process(side, mode, cmd, phase_file, base / f"{side}_{tag}.log", repo)
            runs.append(dict(record, round=rnd, variant=variant))
            if _TORCH.value:
                phase_file = base / f"torch_{tag}.phases.json"
                cmd = torch_command(base / f"torch_{tag}.json", phase_file)
                record = run_process("torch", None, cmd, phase_file, base / f"torch_{tag}.log")
                runs.append(dict(record, round=rnd, variant=""))
    return runs


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main(argv):
    del argv
    if "warm" in _MODES.value and "cold" not in _MODES.value[:_MODES.value.index("warm")]:
        raise app.UsageError("--modes: 'warm' needs 'cold' before it")
    if _TORCH.value and _WORKLOAD.value != "target4":
        raise app.UsageError("--torch: the PyTorch script has the target4 shapes only (--notorch)")
    base = pathlib.Path(tempfile.mkdtemp(prefix="process_time_"))
    uptime_before = _uptime()
    runs = [r for rnd in range(_ROUNDS.value) for r in run_round(rnd, base)]
    from anisotropy_jax import results

    commit = results._git_commit()  # the provenance rule of results.json (git archive trees too)
    doc = {"what": f"benchmarks/process_time.py, workload {_WORKLOAD.value}", "note": _NOTE.value,
           "command": " ".join(sys.argv), "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(),
           "host": {"cpus": os.cpu_count(), "machine": platform.machine(),
                    "python": platform.python_version()},
           "git_commit": commit, "uptime_before": uptime_before, "uptime_after": _uptime(),
           "summary": summarize(runs), "runs": runs, "logs": str(base)}
    results.write_json(_OUT.value, doc)  # atomic, as every results file
    print(json.dumps(doc["summary"], indent=1))


if __name__ == "__main__":
    app.run(main)
