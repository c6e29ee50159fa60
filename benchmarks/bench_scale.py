"""Issue 15's figures: what a cluster of a thousand emulated 8-GPU nodes costs.

Two parts, both printing figures (never asserting them):

1. **The controller in-process** (no sockets): one heartbeat's handling, the node check and
   a scheduling pass, at N nodes with 8 running jobs per node, on a manual clock. These say
   whether the controller's cost grows with nodes x jobs (it should not).
2. **Real daemons** (``muster up --nodes N --nodes-per-agent P``): nodes brought up per
   second, the controller's RSS and idle CPU (and so its CPU per heartbeat, HTTP included),
   the agents' RSS and CPU per hosted node, ``squeue``/``sinfo`` wall time (and ``squeue
   -r`` over a held array of one job per node), ``srun -NK
   true`` for K in 8/64/256 (first to last task), and how long after a ``kill -9`` of one
   agent process all its nodes are DOWN (a rack losing power; SlurmdTimeout=15). A size whose estimated memory exceeds
   half of what the machine has free is skipped with the reason printed.
3. **Launch fan-out** (``--launch 8,64,256,512``): one cluster of the largest size per
   ``TreeWidth`` (50, Slurm's default: srun contacts at most 50 agents, which relay; and
   65533: flat, srun contacts every node itself): ``srun -NK true`` wall time for each K,
   and a batch job over all the nodes whose script runs ``srun`` on every node: from the
   script's start to the first and to the last rank running, and first to last rank; and
   whether ``srun -N<all>`` runs with fewer open files allowed than there are nodes.

    python benchmarks/bench_scale.py [--sizes 128,512,1024] [--per-agent 64] [--idle 20]
                                     [--micro-only] [--no-micro] [--launch 8,64,256,512]
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from harness import Harness  # noqa: E402
from muster.cluster.local import ClusterShape  # noqa: E402
from muster.protocol.client import ConnectError  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


# --- 1. the controller in-process ------------------------------------------------------


def micro(nodes: int, jobs_per_node: int = 8, pending: int = 1000) -> dict[str, float]:
    from muster.core.clock import ManualClock
    from muster.core.config import parse_config
    from muster.core.job import JobSpec, NodeAlloc
    from muster.ctld.controller import Controller, Identity
    from muster.ctld.loop import run_pass
    from muster.ctld.store import Store
    from muster.sched.config import SchedConfig

    conf = (
        "ClusterName=b\nSlurmdTimeout=300\n"
        f"NodeName=n[1-{nodes}] CPUs=64 RealMemory=512000 Gres=gpu:8\n"
        "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"
    )
    # a store on tmpfs when there is one: the submissions that set the scene commit faster
    tmp = tempfile.mkdtemp(prefix="bench-scale-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    ctl = Controller(parse_config(conf, "b.conf"), Store(os.path.join(tmp, "m.db")), ManualClock(1000.0))
    ctl.load()
    for name in ctl.nodes:
        ctl.agents.register({"node": name, "gpus": 8, "running": []})
    user = Identity(1001, 1001, "alice", "alice", "h", admin=False)
    names = list(ctl.nodes)

    class Start:  # the scheduler's Start, reduced to what apply_starts reads
        def __init__(self, job_id: int, node: str, gpu: int) -> None:
            self.job_id, self.partition, self.backfilled = job_id, "gpu", False
            self.alloc = [NodeAlloc(node, 1, 1000, [gpu])]

    starts = []
    running: dict[str, list[tuple[int, int]]] = {}
    for i in range(nodes * jobs_per_node):
        job = ctl.queue.submit(JobSpec(script="#!/bin/sh\ntrue\n", workdir="/tmp", gpus_per_node=1), user)
        node = names[i % nodes]
        starts.append(Start(job.job_id, node, i // nodes))
        running.setdefault(node, []).append((job.job_id, 0))
    ctl.launches.apply_starts(starts, ctl.clock.now())
    for s in starts:
        ctl.launches.launch_done(s.job_id)
    for _ in range(pending):  # a queue that cannot start: every GPU is taken
        ctl.queue.submit(JobSpec(script="#!/bin/sh\ntrue\n", workdir="/tmp", gpus_per_node=8), user)
    t0 = time.perf_counter()
    rounds = 3
    for _ in range(rounds):
        for name in names:
            ctl.agents.heartbeat({"node": name, "running": running.get(name, [])})
    heartbeat = (time.perf_counter() - t0) / (rounds * nodes)
    t0 = time.perf_counter()
    for _ in range(10):
        ctl.liveness.check_nodes()
    check = (time.perf_counter() - t0) / 10
    config = SchedConfig.from_settings(dict(ctl.config.settings))
    t0 = time.perf_counter()
    for _ in range(3):
        run_pass(ctl, config, ctl.clock.now())
    pass_s = (time.perf_counter() - t0) / 3
    return {"heartbeat_us": heartbeat * 1e6, "check_nodes_ms": check * 1e3, "pass_ms": pass_s * 1e3}


# --- 2. real daemons --------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def available_mb() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return 0.0


def timed(h: Harness, argv: list[str], n: int = 3) -> float:
    """Median wall time in ms of ``argv`` (fork and exec included)."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        out = h.run(argv, timeout=600)
        times.append((time.perf_counter() - t0) * 1000)
        if out.returncode != 0:
            raise RuntimeError(f"{argv}: {out.stderr.strip()}")
    return sorted(times)[len(times) // 2]


def cluster(nodes: int, per_agent: int, idle: float, tls: bool = False) -> dict[str, Any]:
    h = Harness(
        ClusterShape(nodes=nodes, gpus_per_node=8, cpus_per_node=64, mem_per_node=512000, nodes_per_agent=per_agent),
        settings={"TLSType": "tls/muster" if tls else "tls/none", "MaxArraySize": str(max(1001, nodes + 1))},
    )
    out: dict[str, Any] = {"nodes": nodes, "agents": -(-nodes // per_agent)}
    try:
        h.cluster.create(h.shape, h.settings)
        t0 = time.perf_counter()
        h.cluster.start()
        h.cluster.wait_ready(max(120.0, nodes / 4))
        out["up_s"] = time.perf_counter() - t0
        out["nodes_per_s"] = nodes / out["up_s"]
        time.sleep(5)  # registrations and the first passes settle
        ctld = h.cluster._alive("musterctld")
        assert ctld is not None
        agents = [pid for name in h.cluster.agents() if (pid := h.cluster._alive(name)) is not None]
        interval = max(1.0, h.cluster.config().slurmd_timeout / 5)
        c0, a0, t0 = cpu_seconds(ctld), sum(cpu_seconds(p) for p in agents), time.perf_counter()
        time.sleep(idle)
        c1, a1, t1 = cpu_seconds(ctld), sum(cpu_seconds(p) for p in agents), time.perf_counter()
        heartbeats = nodes * (t1 - t0) / interval
        out["ctld_cpu_pct"] = 100 * (c1 - c0) / (t1 - t0)
        out["ctld_ms_per_heartbeat"] = 1000 * (c1 - c0) / heartbeats
        out["ctld_rss_mb"] = rss_mb(ctld)
        out["agent_rss_mb_per_node"] = sum(rss_mb(p) for p in agents) / nodes
        out["agent_cpu_pct_per_node"] = 100 * (a1 - a0) / (t1 - t0) / nodes
        out["squeue_ms"] = timed(h, ["squeue"])
        out["sinfo_ms"] = timed(h, ["sinfo"])
        # a queue of one pending job per node (a held array: one submission), listed whole
        array = h.sbatch(f"--array=0-{nodes - 1}", "--hold", "-o", "/dev/null", "--wrap", "true")
        out["squeue_r_ms"] = timed(h, ["squeue", "-r"])
        h.run(["scancel", str(array)])
        for k in (8, 64, 256):
            if k <= nodes:
                out[f"srun_N{k}_ms"] = timed(h, ["srun", f"-N{k}", "true"], n=1)
        # a rack's power lost: kill -9 the last agent process; how long until all its nodes are DOWN
        name, rack = list(h.cluster.agents().items())[-1]
        pid = h.cluster._alive(name)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 120:
            states = h.node_states()
            if all(states[n] == "DOWN" for n in rack):
                break
            time.sleep(0.2)
        out["rack_down_s"] = time.perf_counter() - t0
        out["rack"] = len(rack)
        out["slurmd_timeout"] = h.cluster.config().slurmd_timeout
    finally:
        h.down()
    return out


# --- 3. launch fan-out -----------------------------------------------------------------

FEW_FDS = 128  # srun's open-file limit in the last check: fewer than the nodes
RANKS_SCRIPT = "#!/bin/bash\necho start $EPOCHREALTIME\nsrun bash -c 'echo rank $SLURM_PROCID $EPOCHREALTIME'\n"


def timed_cpu(h: Harness, argv: list[str], n: int) -> tuple[float, float]:
    """Median wall time and median CPU time (user and system) of ``argv``, in ms."""
    walls, cpus = [], []
    for _ in range(n):
        r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        out = h.run(argv, timeout=600)
        t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        if out.returncode != 0:
            raise RuntimeError(f"{argv}: {out.stderr.strip()}")
        walls.append((t1 - t0) * 1000)
        cpus.append((r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * 1000)
    return sorted(walls)[n // 2], sorted(cpus)[n // 2]


def launch(sizes: list[int], per_agent: int, width: int, tls: bool = False, runs: int = 3) -> dict[str, float]:
    """``srun -NK true`` for each K in ``sizes`` and a batch job over the largest, on a
    cluster of the largest size whose TreeWidth is ``width``."""
    nodes = max(sizes)
    h = Harness(
        ClusterShape(nodes=nodes, gpus_per_node=8, cpus_per_node=64, mem_per_node=512000, nodes_per_agent=per_agent),
        # SlurmdTimeout=300 (Slurm's default): on a loaded machine a starved agent process
        # must not be called dead in the middle of a launch benchmark
        settings={"TLSType": "tls/muster" if tls else "tls/none", "TreeWidth": str(width), "SlurmdTimeout": "300"},
    )
    out: dict[str, float] = {}
    try:
        h.cluster.create(h.shape, h.settings)
        h.cluster.start()
        h.cluster.wait_ready(max(120.0, nodes / 4))
        time.sleep(3)  # registrations and the first passes settle
        for k in sizes:
            out[f"srun_N{k}_ms"], out[f"srun_N{k}_cpu_ms"] = timed_cpu(h, ["srun", f"-N{k}", "true"], runs)
        # srun holds one connection per head: at most TreeWidth, or every node when flat
        few = h.run(["/bin/sh", "-c", f"ulimit -n {FEW_FDS} && exec srun -N{nodes} true"], timeout=600)
        out["few_fds_ok"] = float(few.returncode == 0)
        job_id = h.sbatch(f"-N{nodes}", "-o", "ranks-%j.out", input=RANKS_SCRIPT)
        deadline = time.monotonic() + 600
        while True:  # the controller may be slow to answer on a loaded machine: ask again
            try:
                h.wait_job(job_id, timeout=max(1.0, deadline - time.monotonic()))
                break
            except ConnectError:
                if time.monotonic() > deadline:
                    raise
        start, ranks = 0.0, []
        for line in h.read(f"ranks-{job_id}.out").splitlines():
            words = line.split()
            if words[:1] == ["start"]:
                start = float(words[1])
            elif words[:1] == ["rank"]:
                ranks.append(float(words[2]))
        if len(ranks) != nodes:
            raise RuntimeError(f"batch job {job_id}: {len(ranks)} of {nodes} ranks ran")
        out["batch_first_ms"] = (min(ranks) - start) * 1000
        out["batch_last_ms"] = (max(ranks) - start) * 1000
        out["batch_spread_ms"] = (max(ranks) - min(ranks)) * 1000
    finally:
        h.down()
    return out


def report_launch(sizes: list[int], per_agent: int, tls: bool) -> None:
    nodes = max(sizes)
    links = "TLS" if tls else "plain HTTP"
    print(f"\nlaunch fan-out ({links}), {nodes} nodes in {-(-nodes // per_agent)} agent processes (median of 3 sruns):")
    results = {width: launch(sizes, per_agent, width, tls) for width in (50, 65533)}
    print(f"{'':>24}" + "".join(f"{'TreeWidth=' + str(w):>18}" for w in results))
    for k in sizes:
        for key, what in ((f"srun_N{k}_ms", f"srun -N{k} true"), (f"srun_N{k}_cpu_ms", "(srun's own CPU)")):
            print(f"{what:>24}" + "".join(f"{r[key]:>15.0f} ms" for r in results.values()))
    for key, what in (
        ("batch_first_ms", "script start->first rank"),
        ("batch_last_ms", "script start->last rank"),
        ("batch_spread_ms", "first->last rank"),
    ):
        print(f"{what:>24}" + "".join(f"{r[key]:>15.0f} ms" for r in results.values()))
    what = f"-N{nodes}, ulimit -n {FEW_FDS}"
    print(f"{what:>24}" + "".join(f"{'ran' if r['few_fds_ok'] else 'failed':>18}" for r in results.values()))
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="128,512,1024", help="emulated cluster sizes (default 128,512,1024)")
    ap.add_argument("--per-agent", type=int, default=64, help="nodes hosted per agent process (default 64)")
    ap.add_argument("--idle", type=float, default=20.0, help="seconds of idle measured per size (default 20)")
    ap.add_argument("--micro-only", action="store_true", help="the in-process part only")
    ap.add_argument("--no-micro", action="store_true", help="the real daemons only")
    ap.add_argument(
        "--tls",
        action="store_true",
        help="TLSType=tls/muster (an agent process heartbeats for its nodes over its host certificate)",
    )
    ap.add_argument("--launch", default="", help="launch fan-out for these srun sizes, e.g. 8,64,256,512")
    ap.add_argument("--launch-only", action="store_true", help="the launch fan-out part only")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.launch:
        report_launch([int(s) for s in args.launch.split(",") if s], args.per_agent, args.tls)
    if args.launch_only:
        return 0
    if not args.no_micro:
        print("controller in-process, 8 running jobs per node, 1,000 pending:")
        print(f"{'nodes':>6} {'heartbeat':>11} {'node check':>11} {'pass':>9}")
        for n in sizes:
            m = micro(n)
            print(f"{n:>6} {m['heartbeat_us']:>9.1f}us {m['check_nodes_ms']:>9.2f}ms {m['pass_ms']:>7.1f}ms")
    if args.micro_only:
        return 0
    links = "TLS" if args.tls else "plain HTTP, heartbeats batched per agent process"
    print(f"\nreal daemons ({links}), {args.per_agent} nodes per agent process, {args.idle:.0f} s idle per size:")
    per_node_mb = 2.0  # measured 1.7-1.8 MB at 128-1,024 nodes; the first size measures it again
    for n in sizes:
        need = 150 + n * per_node_mb
        if need > available_mb() / 2:
            print(
                f"{n:>6} nodes: skipped: needs about {need:.0f} MB, half the free memory is {available_mb() / 2:.0f} MB"
            )
            continue
        r = cluster(n, args.per_agent, args.idle, args.tls)
        per_node_mb = max(per_node_mb, r["agent_rss_mb_per_node"] * 1.2)
        print(
            f"{n:>6} nodes in {r['agents']} agents: up in {r['up_s']:.1f} s ({r['nodes_per_s']:.0f} nodes/s); "
            f"controller {r['ctld_rss_mb']:.0f} MB, idle CPU {r['ctld_cpu_pct']:.1f} % "
            f"({r['ctld_ms_per_heartbeat']:.2f} ms/heartbeat); agents {r['agent_rss_mb_per_node']:.1f} MB "
            f"and {r['agent_cpu_pct_per_node']:.3f} % CPU per node; squeue {r['squeue_ms']:.0f} ms, "
            f"sinfo {r['sinfo_ms']:.0f} ms, squeue -r of {n} held jobs {r['squeue_r_ms']:.0f} ms; "
            + ", ".join(f"srun -N{k} {r[f'srun_N{k}_ms']:.0f} ms" for k in (8, 64, 256) if f"srun_N{k}_ms" in r)
            + f"; an agent process of {r['rack']} nodes killed: all DOWN after {r['rack_down_s']:.1f} s "
            f"(SlurmdTimeout={r['slurmd_timeout']})"
        )
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
