"""Compare every number of two results.json trees (old vs new), ignoring timings/provenance."""
import json, sys, math, pathlib
SKIP = {"provenance", "seconds", "wall_seconds", "first_chunk_seconds_incl_compile", "started",
        "finished", "elapsed", "time", "command", "workdir", "compile_seconds", "step_seconds"}
def walk(a, b, path, out):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in set(a) | set(b):
            if k in SKIP or "second" in k or "time" in k:
                continue
            if k not in a or k not in b:
                out.append((path + "/" + k, "missing in " + ("old" if k not in a else "new")))
                continue
            walk(a[k], b[k], path + "/" + k, out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append((path, f"length {len(a)} vs {len(b)}")); return
        for i, (x, y) in enumerate(zip(a, b)):
            walk(x, y, f"{path}[{i}]", out)
    elif isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        if a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)):
            return
        rel = abs(a - b) / max(abs(a), abs(b), 1e-30)
        out.append((path, rel))
    elif a != b:
        out.append((path, f"{str(a)[:60]!r} vs {str(b)[:60]!r}"))
old, new = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for f in sorted(old.rglob("results.json")):
    g = new / f.relative_to(old)
    if not g.exists():
        print(f.relative_to(old), "MISSING in new"); continue
    out = []
    walk(json.loads(f.read_text()), json.loads(g.read_text()), "", out)
    nums = [r for _, r in out if isinstance(r, float)]
    other = [(p, r) for p, r in out if not isinstance(r, float)]
    print(f.relative_to(old), f"numbers differing: {len(nums)}, max rel {max(nums) if nums else 0:.2e}; other diffs: {len(other)}")
    for p, r in other[:6]:
        print("   ", p, r)
