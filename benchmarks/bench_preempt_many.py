"""Issue 40 item 3: preempt V running jobs for one urgent run, at three sizes on real daemons
(emulated 8-GPU nodes, agents hosting ``--nodes-per-agent`` nodes each).

Per size, a cluster of ceil(V/8) nodes is started with ``PreemptType=preempt/partition_prio``
and ``PreemptMode=REQUEUE``: a low partition (``PriorityTier=1``, the default) and an urgent
one (``PriorityTier=10``, ``PreemptMode=OFF``). V one-node, one-GPU jobs of the low tier (one
array of ``sleep``) fill every GPU; once all V run (RUNNING, and each has touched a file),
one exclusive urgent job needing every node
(``-p urgent -N<nodes> --gres=gpu:8``) is submitted. Measured from that submission:

* ``urgent RUNNING``: the controller reports the urgent job RUNNING;
* ``victims out``: no victim is RUNNING any more (each requeued, pending again);
* the batch script of the urgent job has run (its output file exists).

Run it under ``nice`` on a shared machine; it prints each size and the growth.

    nice -n 19 .venv/bin/python benchmarks/bench_preempt_many.py [--sizes 250,500,1000]
        [--nodes-per-agent 64] [--kill-wait 2] [--scheduler-interval 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

from bench_gang import wait_until  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from harness import Harness  # noqa: E402
from muster.cluster.local import ClusterShape  # noqa: E402

LOW = "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP"


def running(h: Harness, ids: set[int]) -> int:
    jobs = h.cluster.api("GET", "/v1/jobs", timeout=60)["jobs"]
    return sum(1 for j in jobs if j["job_id"] in ids and j["state"] == "RUNNING")


def one(victims: int, per_agent: int, kill_wait: int, interval: int) -> dict[str, float]:
    nodes = -(-victims // 8)
    h = Harness(
        ClusterShape(nodes=nodes, gpus_per_node=8, cpus_per_node=64, mem_per_node=512000, nodes_per_agent=per_agent),
        settings={
            "SlurmdTimeout": "300",
            "PreemptType": "preempt/partition_prio",
            "PreemptMode": "REQUEUE",
            "KillWait": str(kill_wait),
            "SchedulerInterval": str(interval),
        },
    )
    h.cluster.create(h.shape, h.settings, h.topology)
    with open(h.cluster.conf_path) as f:
        text = f.read()
    assert LOW in text, "the local cluster's partition line changed"
    with open(h.cluster.conf_path, "w") as f:
        f.write(
            text.replace(
                LOW,
                LOW
                + " PriorityTier=1\nPartitionName=urgent Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF",
            )
        )
    try:
        h.cluster.start()
        h.cluster.wait_ready(max(180.0, nodes / 4))
        started = os.path.join(h.workdir, "started")
        os.makedirs(started)
        os.chmod(started, 0o1777)
        first = h.sbatch(
            f"--array=0-{victims - 1}",
            "--gres=gpu:1",
            "-n1",
            "-c1",
            "--mem=1000",
            "-o",
            "/dev/null",
            "--wrap",
            f"touch {started}/$SLURM_ARRAY_TASK_ID; exec sleep 3600",
        )
        ids = set(range(first, first + victims))
        # every victim RUNNING in the controller and its process started on its node
        t_fill = wait_until(
            lambda: len(os.listdir(started)) >= victims and running(h, ids) >= victims,
            600,
            f"{victims} low jobs running",
            0.5,
        )
        urgent_out = os.path.join(h.workdir, "urgent.out")
        t0 = time.perf_counter()
        urgent = h.sbatch(
            "-p",
            "urgent",
            f"-N{nodes}",
            "--exclusive",
            "--gres=gpu:8",
            "-o",
            urgent_out,
            "--wrap",
            "echo up; sleep 3600",
        )
        t_urgent = wait_until(lambda: h.job(urgent)["state"] == "RUNNING", 600, f"urgent job {urgent} RUNNING", 0.01)
        t_out = time.perf_counter() - t0
        t_out += wait_until(
            lambda: os.path.exists(urgent_out) and os.path.getsize(urgent_out) > 0, 300, "urgent output"
        )
        left = running(h, ids)
        t_victims = time.perf_counter() - t0
        if left:
            t_victims += wait_until(lambda: running(h, ids) == 0, 300, "victims out", 0.2)
        h.run(["scancel", str(urgent), str(first)])
        return {
            "victims": victims,
            "nodes": nodes,
            "fill_s": t_fill,
            "urgent_running_s": t_urgent,
            "urgent_script_s": t_out,
            "victims_out_s": t_victims,
        }
    finally:
        h.down()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="250,500,1000", help="victims per size (nodes: ceil(victims/8))")
    ap.add_argument("--nodes-per-agent", type=int, default=64)
    ap.add_argument("--kill-wait", type=int, default=2, help="KillWait, seconds between SIGTERM and SIGKILL")
    ap.add_argument(
        "--scheduler-interval", type=int, default=5, help="SchedulerInterval, seconds between passes (default 5)"
    )
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    print(f"SchedulerInterval={args.scheduler_interval} KillWait={args.kill_wait}; load {os.getloadavg()[0]:.1f}")
    results = []
    for v in sizes:
        r = one(v, args.nodes_per_agent, args.kill_wait, args.scheduler_interval)
        results.append(r)
        print(
            f"{v} victims on {r['nodes']:.0f} nodes (all running after {r['fill_s']:.1f} s): urgent -N{r['nodes']:.0f} "
            f"RUNNING after {r['urgent_running_s']:.2f} s, its script ran after {r['urgent_script_s']:.2f} s, "
            f"no victim running after {r['victims_out_s']:.2f} s; load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    print("\ngrowth:")
    print(f"{'victims':>8}{'nodes':>7}{'urgent RUNNING s':>18}{'script s':>10}{'victims/s':>11}")
    base = results[0]["urgent_running_s"] if results else 1.0
    for r in results:
        print(
            f"{r['victims']:>8.0f}{r['nodes']:>7.0f}{r['urgent_running_s']:>18.2f}{r['urgent_script_s']:>10.2f}"
            f"{r['victims'] / r['urgent_running_s']:>11.0f}   x{r['urgent_running_s'] / base:.2f} vs {sizes[0]}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
