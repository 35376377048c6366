"""Compares two main-job workdirs' results.npz array by array, bit for bit (dtype, shape, bytes).

    git worktree add /tmp/wt-base BASE_COMMIT
    (cd /tmp/wt-base && PYTHONPATH=. /path/to/.venv/bin/python experiments/sweep.py --workdir=/tmp/mj_base)
    .venv/bin/python experiments/sweep.py --workdir=/tmp/mj_head
    .venv/bin/python docs/benchmarks/main_job_bit_identity/compare.py /tmp/mj_base /tmp/mj_head

Both runs on one machine: bit identity is asked only of two runs on the same CPU.
"""
import sys

import numpy as np


def main(base: str, head: str) -> int:
    a, b = np.load(f"{base}/results.npz"), np.load(f"{head}/results.npz")
    only = set(a.files) ^ set(b.files)
    differ = sorted(k for k in set(a.files) & set(b.files)
                    if (a[k].dtype, a[k].shape, a[k].tobytes()) != (b[k].dtype, b[k].shape,
                                                                    b[k].tobytes()))
    print(f"{len(a.files)} and {len(b.files)} arrays; in one only: {sorted(only)}; "
          f"differ: {differ}")
    return int(bool(only or differ))


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
