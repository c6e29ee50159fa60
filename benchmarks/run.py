"""Run every benchmark and print its figures (``make bench``): first issue 20's table,
muster next to real Slurm (``sidebyside.py``: measured in this run when ``$SLURM_ANCHOR``
names a slurm-anchor, else next to the stored Slurm figures), then each issue's own."""

from __future__ import annotations

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHES = [
    "sidebyside.py",
    "bench_submit.py",
    "bench_sched.py",
    "bench_failure.py",
    "bench_faults.py",
    "bench_srun.py",
    "bench_sim.py",
    "bench_tls.py",
    "bench_munge.py",
    "bench_http.py",
    "bench_cmdpath.py",  # the command path beside real Slurm (the anchor's, where it runs)
]
# Issue 40's real-daemon benchmarks at small sizes here (seconds); their full sizes
# (1,024-node gang, 1,000 victims) take minutes: docs/performance.md gives the commands.
SMALL = {
    "bench_gang.py": ["--sizes", "16,32,64", "--nodes-per-agent", "16"],
    "bench_preempt_many.py": ["--sizes", "16,32,64", "--nodes-per-agent", "16", "--scheduler-interval", "1"],
}


def main() -> int:
    rc = 0
    for name in [*BENCHES, *SMALL]:
        path = os.path.join(HERE, name)
        if not os.path.exists(path):
            continue
        print(f"\n=== {name} ===", flush=True)
        rc |= subprocess.call([sys.executable, path, *SMALL.get(name, [])], cwd=HERE)
    return rc


if __name__ == "__main__":
    sys.exit(main())
