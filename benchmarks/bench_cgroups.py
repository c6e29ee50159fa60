"""Issue 35's figures: what confining a job in cgroups costs the node agent per job.

Each round does what musterd does for one batch job under ``ProctrackType=proctrack/cgroup``
with ``ConstrainRAMSpace=yes`` (and ``ConstrainDevices=yes`` on two emulated GPU device
nodes): make the job's cgroups with its limits (``create_job``), fork a child that joins
them and exits at once, then, at the end, count OOM kills and peak memory, kill whatever is
left (``kill_all``) and remove the cgroups. The same fork+exit without cgroups is timed as
the baseline. Needs root and writable cgroups (v1, or v2 with ``--v2``). Figures are
printed, never asserted.

    python benchmarks/bench_cgroups.py [--rounds 200] [--v2]
"""

from __future__ import annotations

import argparse
import os
import stat
import statistics
import sys
import tempfile
import time

from muster.agent import cgroups
from muster.agent.cgroupfs import NodeCgroups


def _child(procs: tuple[str, ...]) -> None:
    pid = os.fork()
    if pid == 0:
        for path in procs:
            fd = os.open(path, os.O_WRONLY)
            os.write(fd, b"0")
            os.close(fd)
        os._exit(0)
    os.waitpid(pid, 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--v2", action="store_true", help="CgroupPlugin=cgroup/v2 (tracking and devices)")
    args = parser.parse_args(argv)
    devdir = tempfile.mkdtemp(prefix="bench-gpudev-")
    for i, minor in enumerate((7, 5)):
        os.mknod(os.path.join(devdir, f"gpu{i}"), 0o600 | stat.S_IFCHR, os.makedev(1, minor))
    text = f"ConstrainDevices=yes\nGpuDeviceFiles={devdir}/gpu[0-1]\n"
    text += "CgroupPlugin=cgroup/v2\n" if args.v2 else "CgroupPlugin=cgroup/v1\nConstrainRAMSpace=yes\n"
    conf = cgroups.parse_cgroup_conf(text)
    node = NodeCgroups.probe(conf, f"bench{os.getpid()}", gpus=2)
    setup, end, bare = [], [], []
    try:
        for job in range(1, args.rounds + 1):
            t0 = time.perf_counter()
            _child(())
            t1 = time.perf_counter()
            procs = node.create_job(job, cgroups.job_limits(conf, 512, None, [0], node.devices))
            t2 = time.perf_counter()
            _child(procs)
            t3 = time.perf_counter()
            node.oom_kills(job)
            node.peak_bytes(job)
            node.kill_all(job)
            node.remove_job(job)
            t4 = time.perf_counter()
            bare.append(t1 - t0)
            setup.append(t2 - t1 + (t3 - t2) - (t1 - t0))  # the cgroups' part of the launch
            end.append(t4 - t3)
    finally:
        node.remove_node()
        for name in os.listdir(devdir):
            os.unlink(os.path.join(devdir, name))
        os.rmdir(devdir)

    def ms(values: list[float]) -> str:
        return f"median {statistics.median(values) * 1000:.2f} ms, p95 {sorted(values)[int(len(values) * 0.95)] * 1000:.2f} ms"

    print(f"{node.describe()}, {args.rounds} jobs")
    print(f"fork+exit, no cgroup (baseline): {ms(bare)}")
    print(f"launch: cgroups made, limits written, child joined: {ms(setup)}")
    print(f"end: OOM count, peak, kill_all, rmdir: {ms(end)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
