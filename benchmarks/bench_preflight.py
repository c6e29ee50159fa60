"""Issue 36 item 3's bound: the pre-flight gate across a 128-node job, in emulation (the
bound is 60 s).

The cluster: 128 emulated nodes of 8 GPUs, ``--nodes-per-agent`` of them per agent process,
each with emulated GPU device files (``PreflightGpuDevices=<root>/dev/%n/nvidia%i``, 8 per
node) and a site ``PreflightProgram`` (a shell script that checks its node's device files
and exits 0, standing for a site's quick check). Each round submits ``sbatch -N128 --gres=
gpu:8 --preflight`` and, as the baseline, the same job without ``--preflight``; the script
writes the time it started. The gate's cost is the difference between the two jobs'
start-to-script times (controller start stamp -> the batch script's first line): the 127
other nodes asked at once, then the batch host's checks inside the launch. Figures are
printed, never asserted.

``--allreduce`` turns on the gate's all-reduce (``PreflightAllReduce=YES``): every node also
runs its rank of one small torch.distributed gloo all-reduce (``agent.allreduce``), a child
process per node that imports torch (torch must be installed in the venv).

    .venv/bin/python benchmarks/bench_preflight.py [--nodes 128] [--rounds 3] [--nodes-per-agent 32] [--allreduce]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from harness import Harness  # noqa: E402
from muster.cluster.local import ClusterShape  # noqa: E402

PROGRAM = """#!/bin/sh
# a site's quick check: this node's GPU device files are there
for i in 0 1 2 3 4 5 6 7; do [ -e "{root}/dev/$SLURMD_NODENAME/nvidia$i" ] || exit 1; done
exit 0
"""


def started_after(h: Harness, job_id: int, path: str) -> float:
    """Seconds from the controller's start stamp to the batch script's first line."""
    job = h.wait_job(job_id, timeout=300)
    assert job["state"] == "COMPLETED", job
    with open(path) as f:
        began = float(f.read().strip())
    return began - float(job["start_time"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nodes-per-agent", type=int, default=32)
    ap.add_argument("--allreduce", action="store_true", help="with the all-reduce (PreflightAllReduce=YES)")
    args = ap.parse_args(argv)
    h = Harness(
        ClusterShape(
            nodes=args.nodes, gpus_per_node=8, cpus_per_node=8, mem_per_node=64000, nodes_per_agent=args.nodes_per_agent
        ),
        settings={"SlurmdTimeout": "60"},
    )
    for k in range(1, args.nodes + 1):
        d = os.path.join(h.root, "dev", f"node{k}")
        os.makedirs(d)
        for i in range(8):
            open(os.path.join(d, f"nvidia{i}"), "w").close()
    program = os.path.join(h.root, "preflight.sh")
    with open(program, "w") as f:
        f.write(PROGRAM.format(root=h.root))
    os.chmod(program, 0o755)
    h.settings.update(
        {
            "PreflightProgram": program,
            "PreflightGpuDevices": os.path.join(h.root, "dev", "%n", "nvidia%i"),
            "PreflightMinFreeMB": "1",
        }
    )
    if args.allreduce:
        h.settings.update({"PreflightAllReduce": "YES", "PreflightAllReduceTimeout": "240"})
    try:
        t0 = time.perf_counter()
        h.up()
        print(
            f"cluster of {args.nodes} nodes ({args.nodes_per_agent} per agent) up in {time.perf_counter() - t0:.1f} s"
        )
        gated: list[float] = []
        plain: list[float] = []
        for rnd in range(args.rounds):
            for option, into in (("--preflight", gated), ("", plain)):
                mark = os.path.join(h.workdir, f"began-{rnd}-{bool(option)}")
                opts = [f"-N{args.nodes}", "--gres=gpu:8", "-o", "/dev/null"] + ([option] if option else [])
                job_id = h.sbatch(*opts, "--wrap", f"date +%s.%N > {mark}")
                into.append(started_after(h, job_id, mark))
            print(f"round {rnd + 1}: start -> script {gated[-1]:.3f} s gated, {plain[-1]:.3f} s without the gate")
        gate = [g - p for g, p in zip(gated, plain, strict=True)]
        print(
            f"pre-flight gate across {args.nodes} emulated nodes (8 GPU device files each, a site program"
            f"{', the all-reduce' if args.allreduce else ''}): "
            f"median {statistics.median(gated):.3f} s start -> script gated vs {statistics.median(plain):.3f} s without; "
            f"the gate's cost median {statistics.median(gate):.3f} s, max {max(gate):.3f} s (bound: 60 s)"
        )
    finally:
        h.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
