"""Run every benchmark and print its figures (``make bench``)."""

from __future__ import annotations

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHES = [
    "bench_submit.py",
    "bench_sched.py",
    "bench_failure.py",
    "bench_faults.py",
    "bench_srun.py",
    "bench_sim.py",
    "bench_tls.py",
]


def main() -> int:
    rc = 0
    for name in BENCHES:
        path = os.path.join(HERE, name)
        if not os.path.exists(path):
            continue
        print(f"\n=== {name} ===", flush=True)
        rc |= subprocess.call([sys.executable, path], cwd=HERE)
    return rc


if __name__ == "__main__":
    sys.exit(main())
