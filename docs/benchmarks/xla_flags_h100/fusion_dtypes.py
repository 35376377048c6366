"""The largest fusions of the training step's optimised HLO (by bytes written and read), with
their operand and result dtypes: an f32 operand where the step runs in bf16 shows as f32 here.

  python3 fusion_dtypes.py DUMP_DIR   (a --xla_dump_to folder with --xla_dump_hlo_as_text)
"""
import pathlib
import re
import sys

BYTES = {"f32": 4, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "pred": 1, "s8": 1, "u8": 1,
         "f64": 8, "s64": 8, "u64": 8}
SHAPE = re.compile(r"\b(f32|bf16|f16|s32|u32|pred|s8|u8|f64|s64|u64)\[([0-9,]*)\]")


def nbytes(dtype, dims):
    n = 1
    for d in filter(None, dims.split(",")):
        n *= int(d)
    return n * BYTES[dtype]


def main(folder):
    files = sorted(pathlib.Path(folder).glob("*after_optimizations.txt"),
                   key=lambda p: p.stat().st_size)
    if not files:
        sys.exit(f"no *after_optimizations.txt in {folder}")
    step = files[-1]  # the largest module: the training step
    print("module", step.name)
    rows, types = [], {}
    lines = step.read_text().splitlines()
    for line in lines:  # every instruction's result type, by name (operands are named only)
        m = re.match(r"\s*(?:ROOT )?(%[\w.\-]+) = (.*?) [\w\-]+\(", line)
        if m:
            types[m.group(1)] = SHAPE.findall(m.group(2))
    for line in lines:
        if " fusion(" not in line or "=" not in line:
            continue
        lhs, rhs = line.split("=", 1)
        result = SHAPE.findall(rhs.split("fusion(")[0])
        names = re.findall(r"%[\w.\-]+", rhs.split("fusion(", 1)[1].split("), kind=")[0])
        operands = [s for n in names for s in types.get(n, [])]
        kind = re.search(r"kind=(\w+)", rhs)
        total = sum(nbytes(*s) for s in result + operands)
        rows.append((total, lhs.strip().split(" ")[-1], kind.group(1) if kind else "?",
                     [f"{d}[{s}]" for d, s in result], [f"{d}[{s}]" for d, s in operands]))
    rows.sort(reverse=True)
    print(f"{len(rows)} fusions; the 15 largest by bytes read + written:")
    for total, name, kind, result, operands in rows[:15]:
        f32 = sum(1 for o in operands if o.startswith("f32"))
        print(f"{total / 2**20:8.1f} MiB {name} ({kind}) -> {', '.join(result)} | "
              f"{f32} f32 of {len(operands)} operands: {', '.join(operands)}")


if __name__ == "__main__":
    main(sys.argv[1])
