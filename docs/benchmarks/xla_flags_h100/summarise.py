"""tokens/s (median over steps 300-399) and the largest loss difference from the default of the
same precision and round, for each run of call.sh: python3 summarise.py METRICS_DIR > flags.json"""
import json
import pathlib
import statistics
import sys

runs = {}
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.jsonl")):
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rate = [r["tokens_per_s"] for r in rows if r["step"] >= 300 and r.get("tokens_per_s")]
    runs[path.stem] = {"tokens_per_s": statistics.median(rate) if rate else None,
                       "readbacks": len(rate), "losses": [r["loss"] for r in rows]}
for name, run in runs.items():
    precision, rest = name.split("_", 1)
    suffix = "_" + name.rsplit("_", 1)[1] if name[-1].isdigit() else ""
    base = runs.get(f"{precision}_default{suffix}") or runs.get(f"{precision}_default")
    if base and base is not run and base["losses"] and run["losses"]:
        n = min(len(base["losses"]), len(run["losses"]))
        run["max_abs_loss_difference_from_default"] = max(
            abs(a - b) for a, b in zip(base["losses"][:n], run["losses"][:n]))
for run in runs.values():
    run["final_loss"] = run["losses"][-1] if run["losses"] else None
    del run["losses"]
json.dump(runs, sys.stdout, indent=1)
