"""Issue 36 item 5: a failed node of a running 512-node job replaced in its allocation, with
8 failures at once: the time from the failure's detection to the repaired allocation handed
to the job (the controller answers it: ``GET /v1/jobs/ID`` names the new node), p50/p99 over
several rounds; the job keeps its id, 0 requeues.

The cluster: 520 emulated nodes (512 for the job, ``SpareNodes=`` 8), ``--nodes-per-agent``
of them per agent process. The failures are an administrator's ``scontrol update
nodename=<8 nodes> state=down`` (detection is then the command itself; a silent agent is
detected after SlurmdTimeout and goes through the very same call, ``Replacements.
job_lost_node``); each round downs 8 nodes of the job, waits until every one is replaced,
and resumes them (they are the next round's free nodes, the spares being used by then).

    .venv/bin/python benchmarks/bench_replace.py [--nodes 512] [--spares 8] [--failures 8]
        [--rounds 5] [--nodes-per-agent 65]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from harness import Harness  # noqa: E402
from muster.cluster.local import ClusterShape  # noqa: E402
from muster.core.hostlist import compress  # noqa: E402


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=512)
    ap.add_argument("--spares", type=int, default=8)
    ap.add_argument("--failures", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--nodes-per-agent", type=int, default=65)
    args = ap.parse_args(argv)
    total = args.nodes + args.spares
    h = Harness(
        ClusterShape(
            nodes=total, gpus_per_node=8, cpus_per_node=64, mem_per_node=512000, nodes_per_agent=args.nodes_per_agent
        ),
        settings={"SlurmdTimeout": "60"},
    )
    h.cluster.create(h.shape, h.settings, h.topology)
    with open(h.cluster.conf_path) as f:
        text = f.read()
    spares = f"node[{args.nodes + 1}-{total}]"
    with open(h.cluster.conf_path, "w") as f:
        f.write(text.replace("PartitionName=gpu Nodes=ALL", f"PartitionName=gpu Nodes=ALL SpareNodes={spares}"))
    rng = random.Random(36)
    try:
        t0 = time.perf_counter()
        h.up()
        print(f"cluster of {total} nodes ({args.nodes_per_agent} per agent) up in {time.perf_counter() - t0:.1f} s")
        budget = args.failures * args.rounds
        job_id = h.sbatch(f"-N{args.nodes}", f"--spare-nodes={budget}", "--wrap", "sleep 3600")
        h.wait_state(job_id, "RUNNING", timeout=300)
        latencies: list[float] = []
        for rnd in range(args.rounds):
            nodes = [a["node"] for a in h.job(job_id)["alloc"]]
            victims = rng.sample(nodes[1:], args.failures)  # never the batch host
            t0 = time.perf_counter()
            out = h.run(["scontrol", "update", f"nodename={compress(victims)}", "state=down", "reason=bench"])
            assert out.returncode == 0, out.stderr
            pending = set(victims)
            while pending:
                now = time.perf_counter() - t0
                held = {a["node"] for a in h.job(job_id)["alloc"]}
                for v in [v for v in pending if v not in held]:
                    latencies.append(now)
                    pending.discard(v)
                if now > 120:
                    raise SystemExit(f"round {rnd}: {sorted(pending)} not replaced after 120 s")
                time.sleep(0.01)
            job = h.job(job_id)
            assert job["state"] == "RUNNING" and job["restart_count"] == 0, job["state"]
            assert len(job["alloc"]) == args.nodes
            back = h.run(["scontrol", "update", f"nodename={compress(victims)}", "state=resume"])
            assert back.returncode == 0, back.stderr
            print(
                f"round {rnd + 1}: {args.failures} failures replaced, slowest after {max(latencies[-args.failures :]):.3f} s"
            )
        job = h.job(job_id)
        print(
            f"{len(latencies)} replacements in a running {args.nodes}-node job, {args.failures} at once: "
            f"detection -> handed over p50 {statistics.median(latencies):.3f} s, p99 {pct(latencies, 0.99):.3f} s, "
            f"max {max(latencies):.3f} s; requeues {job['restart_count']}, job id {job_id} unchanged, "
            f"{len(job['replacements'])} replacement events"
        )
        h.run(["scancel", str(job_id)])
    finally:
        h.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
