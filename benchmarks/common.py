"""Shared helpers for the benchmarks: a throwaway local cluster and timing utilities.

Benchmarks print figures and ratios; they never assert wall-clock bounds (the machines are
shared and noisy). The reference figures for real Slurm 22.05 below were measured on this
kind of machine and are copied here (no file outside the checkout is read), unless the
benchmark measured Slurm itself in the same run.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from harness import Harness  # noqa: E402
from muster.cluster.local import ClusterShape  # noqa: E402

# Real Slurm 22.05 on this kind of machine (the workplace's reference measurements).
SLURM = {
    "sbatch --version (ms)": 6.7,
    "sbatch --wrap=true (ms)": 12.7,
    "1000 jobs submit->done (jobs/s)": 17.8,
    "squeue, 1000 pending (ms)": 30.5,
    "srun -N1 true (ms)": 85.4,
    "srun -N2 -n4 true (ms)": 202.8,
    "backfill C after submit (s)": 23.8,
}


@contextmanager
def local_cluster(nodes: int = 4, gpus: int = 8, cpus: int = 32) -> Iterator[Harness]:
    h = Harness(ClusterShape(nodes=nodes, gpus_per_node=gpus, cpus_per_node=cpus, mem_per_node=128000))
    h.up()
    try:
        yield h
    finally:
        h.down()


@contextmanager
def local_cluster_with(settings: dict[str, str], nodes: int = 4, gpus: int = 8, cpus: int = 32) -> Iterator[Harness]:
    h = Harness(
        ClusterShape(nodes=nodes, gpus_per_node=gpus, cpus_per_node=cpus, mem_per_node=128000), settings=settings
    )
    h.up()
    try:
        yield h
    finally:
        h.down()


def time_calls(h: Harness, argv: list[str], n: int) -> list[float]:
    """Wall time in ms of ``n`` serial runs of a command, fork/exec included."""
    out = []
    env = h.env
    for _ in range(n):
        t0 = time.perf_counter()
        p = subprocess.run(argv, env=env, cwd=h.workdir, capture_output=True)
        out.append((time.perf_counter() - t0) * 1000)
        if p.returncode != 0:
            raise RuntimeError(f"{argv} failed: {p.stderr.decode()}")
    return out


def report(name: str, ours: float, unit_lower_is_better: bool = True) -> None:
    ref = SLURM.get(name)
    if ref is None:
        print(f"{name:<36} muster {ours:10.2f}")
        return
    ratio = ours / ref if unit_lower_is_better else ref / ours
    verdict = "x slower than Slurm" if ratio > 1 else "x Slurm's time" if unit_lower_is_better else ""
    print(
        f"{name:<36} muster {ours:10.2f}   slurm {ref:10.2f}   ratio {ratio:5.2f}{'' if not verdict else ' (' + ('muster/slurm' if unit_lower_is_better else 'slurm/muster') + ')'}"
    )


def median(xs: list[float]) -> float:
    return statistics.median(xs)
