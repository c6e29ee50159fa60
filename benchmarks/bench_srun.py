"""Issue 4's figures: the latency of ``srun -N2 -n4 true`` and ``srun -N1 true`` (a new
allocation, its step, the job's end; fork/exec of srun included), and of a step alone
inside an allocation, next to real Slurm 22.05 on this machine (median 203 ms, 85 ms and
197 ms; shared/reference/slurm-22.05/README.md)."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time

from common import SLURM, local_cluster, median, report, time_calls

SLURM.setdefault("srun -n4 true in salloc -N2 -n4 (ms)", 197.1)


def spread(xs: list[float]) -> str:
    q = sorted(xs)
    return f"p10 {q[len(q) // 10]:.1f}  p90 {q[9 * len(q) // 10]:.1f}  mean {statistics.mean(q):.1f} ms"


def step_only(h: object, n: int) -> list[float]:
    """``srun -n4 true`` timed inside one ``salloc -N2 -n4`` (the step alone)."""
    loop = (
        "import subprocess, sys, time\n"
        f"out = []\nfor _ in range({n}):\n"
        "    t0 = time.perf_counter()\n"
        "    subprocess.run(['srun', '-n4', 'true'], check=True)\n"
        "    out.append((time.perf_counter() - t0) * 1000)\n"
        "print(' '.join(f'{x:.3f}' for x in out))\n"
    )
    import sys

    p = subprocess.run(
        ["salloc", "-Q", "-N2", "-n4", sys.executable, "-c", loop],
        env=h.env,
        cwd=h.workdir,
        capture_output=True,
        text=True,  # type: ignore[attr-defined]
    )
    if p.returncode != 0:
        raise RuntimeError(f"salloc failed: {p.stderr}")
    return [float(x) for x in p.stdout.split()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    with local_cluster() as h:
        time_calls(h, ["srun", "-N1", "true"], 3)  # warm the page cache and the daemons
        for argv, name in (
            (["srun", "-N2", "-n4", "true"], "srun -N2 -n4 true (ms)"),
            (["srun", "-N1", "true"], "srun -N1 true (ms)"),
        ):
            t0 = time.perf_counter()
            times = time_calls(h, argv, args.runs)
            report(name, median(times))
            print(f"{'':<36} {spread(times)}  ({args.runs} runs in {time.perf_counter() - t0:.1f} s)")
        times = step_only(h, args.runs)
        report("srun -n4 true in salloc -N2 -n4 (ms)", median(times))
        print(f"{'':<36} {spread(times)}")


if __name__ == "__main__":
    main()
