"""Issue 12's figures: what ordinary faults cost a running cluster.

1. The controller stopped (SIGSTOP) for twice SlurmdTimeout with jobs running and jobs that
   end meanwhile: jobs failed and runs repeated (both should be 0), and the seconds from
   SIGCONT until every node has heartbeated again and every ended job is recorded.
2. One node's spool read-only (a bind mount; root only) and 20 short jobs: seconds from the
   first submission to the node drained, and until all 20 completed elsewhere.
3. The state directory's disk full (a tmpfs; root only): seconds from freeing space until a
   job that waited meanwhile has run, with no restart.

Figures, not assertions: the machine is shared and noisy. Real Slurm is not measured here
(these faults need root on its daemons' directories).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from common import local_cluster_with

TIMEOUT = 10


def _nodes(h):  # type: ignore[no-untyped-def]
    return h.cluster.api("GET", "/v1/nodes")["nodes"]


def stall() -> None:
    with local_cluster_with({"SlurmdTimeout": str(TIMEOUT), "KillWait": "2"}, nodes=4, cpus=4) as h:
        short = [h.sbatch("-c1", "--wrap", f"echo run >> runs-s{i}; sleep 3") for i in range(4)]
        long = [h.sbatch("-c1", "--wrap", f"echo run >> runs-l{i}; sleep 40") for i in range(8)]
        for j in short + long:
            h.wait_state(j, "RUNNING")
        pid = h.cluster._alive("musterctld")
        os.kill(pid, signal.SIGSTOP)
        time.sleep(2 * TIMEOUT)
        os.kill(pid, signal.SIGCONT)
        t0 = time.perf_counter()
        while True:
            seen = [n["last_seen"] for n in _nodes(h)]
            jobs = [h.job(j) for j in short]
            if all(j["state"] == "COMPLETED" for j in jobs) and min(seen) > time.time() - 2:
                break
            if time.perf_counter() - t0 > 60:
                break
            time.sleep(0.1)
        back = time.perf_counter() - t0
        for j in long:
            h.run(["scancel", str(j)])
        ended = [h.wait_job(j) for j in short + long]
        failed = sum(1 for j in ended if j["restart_count"] or j["state"] not in ("COMPLETED", "CANCELLED"))
        reruns = sum(
            len(h.read(f"runs-{t}").splitlines()) - 1 for t in [f"s{i}" for i in range(4)] + [f"l{i}" for i in range(8)]
        )
        print(
            f"controller stopped {2 * TIMEOUT} s (SlurmdTimeout={TIMEOUT}) with 12 jobs: "
            f"{failed} failed or requeued, {reruns} runs repeated; "
            f"nodes heard and ended jobs recorded {back:.2f} s after SIGCONT"
        )


def read_only_spool() -> None:
    if os.geteuid() != 0:
        print("read-only spool: skipped (needs root for a bind mount)")
        return
    with local_cluster_with({"KillWait": "2"}, nodes=4, cpus=4) as h:
        spool = os.path.join(h.cluster.state_dir, "nodes", "node1", "spool")
        subprocess.run(["mount", "--bind", spool, spool], check=True)
        try:
            subprocess.run(["mount", "-o", "remount,ro,bind", spool], check=True)
            t0 = time.perf_counter()
            jobs = [h.sbatch("-c1", "--wrap", "true") for _ in range(20)]
            drained = None
            while drained is None and time.perf_counter() - t0 < 60:
                if next(n for n in _nodes(h) if n["name"] == "node1")["drain"]:
                    drained = time.perf_counter() - t0
                time.sleep(0.02)
            ended = [h.wait_job(j, timeout=120) for j in jobs]
            done = time.perf_counter() - t0
        finally:
            subprocess.run(["umount", spool], check=False)
        ok = sum(1 for j in ended if j["state"] == "COMPLETED")
        requeued = sum(1 for j in ended if j["restart_count"])
        print(
            f"read-only spool on 1 of 4 nodes, 20 jobs: node drained after {drained:.2f} s, "
            f"{ok}/20 completed ({requeued} after a failed launch there) in {done:.2f} s"
        )


def full_disk() -> None:
    if os.geteuid() != 0:
        print("full state disk: skipped (needs root for a tmpfs)")
        return
    from harness import Harness, fill_disk
    from muster.cluster.local import ClusterShape

    h = Harness(ClusterShape(nodes=2, gpus_per_node=0, cpus_per_node=2, mem_per_node=4000), settings={"KillWait": "2"})
    h.cluster.create(h.shape, h.settings)
    ctld = os.path.join(h.cluster.state_dir, "ctld")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", ctld], check=True)
    try:
        h.up()
        waiting = h.sbatch("--hold", "--wrap", "true")
        filler = os.path.join(ctld, "filler")
        fill_disk(filler)
        refused = h.run(["scontrol", "release", str(waiting)]).returncode != 0
        os.unlink(filler)
        t0 = time.perf_counter()
        assert h.run(["scontrol", "release", str(waiting)]).returncode == 0
        h.wait_job(waiting)
        print(
            f"full state disk: release refused while full: {refused}; after freeing space the "
            f"job ran and ended {time.perf_counter() - t0:.2f} s later, no restart"
        )
    finally:
        h.down(remove=False)
        subprocess.run(["umount", "-l", ctld], check=False)
        h.down()


def main() -> None:
    stall()
    read_only_spool()
    full_disk()


if __name__ == "__main__":
    main()
