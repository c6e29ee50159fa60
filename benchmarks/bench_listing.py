"""squeue and sinfo at thousands of nodes, both sides, in one process (no sockets):

* the controller: what each command asks for (``GET /v1/partitions``, ``/v1/nodes``,
  ``/v1/jobs``...) answered through its ASGI app (the route, the wire dicts, columns or
  cached fragments, the JSON encoding), the sum of each request's best time;
* the command: ``sinfo`` and ``squeue`` (default formats) from those answers' bytes
  (JSON decoding, filtering, grouping, layout), the controller replaced by the bytes.

Start-up (the interpreter and the command's imports) and the socket come on top; the real
daemons' figures are ``bench_scale.py``'s.

    python benchmarks/bench_listing.py [--nodes 1024,4096] [--jobs-per-node 1] [--pending 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any


def cluster(nodes: int, jobs_per_node: int, pending: int) -> Any:
    from muster.core.clock import ManualClock
    from muster.core.config import parse_config
    from muster.core.job import JobSpec, NodeAlloc
    from muster.ctld.app import CtldApp
    from muster.ctld.controller import Identity

    tmp = tempfile.mkdtemp(prefix="bench-listing-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    conf = (
        f"ClusterName=b\nStateSaveLocation={tmp}\nSlurmdTimeout=300\n"
        f"NodeName=n[1-{nodes}] CPUs=64 RealMemory=512000 Gres=gpu:8\n"
        "PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"
        f"PartitionName=debug Nodes=n[1-{min(nodes, 64)}] MaxTime=60 State=UP\n"
    )
    app = CtldApp(parse_config(conf, os.path.join(tmp, "b.conf")), b"k" * 32, ManualClock(1000.0), f"{tmp}/m.db")
    ctl = app.controller
    for name in ctl.nodes:
        ctl.agents.register({"node": name, "gpus": 8, "running": []})
    user = Identity(1001, 1001, "alice", "alice", "h", admin=False)
    names = list(ctl.nodes)

    class Start:  # the scheduler's Start, reduced to what apply_starts reads
        def __init__(self, job_id: int, node: str, gpu: int) -> None:
            self.job_id, self.partition, self.backfilled = job_id, "gpu", False
            self.alloc = [NodeAlloc(node, 1, 1000, [gpu])]

    starts = []
    for i in range(nodes * jobs_per_node):
        job = ctl.queue.submit(JobSpec(script="#!/bin/sh\ntrue\n", workdir="/tmp", gpus_per_node=1), user)
        starts.append(Start(job.job_id, names[i % nodes], i // nodes))
    ctl.launches.apply_starts(starts, ctl.clock.now())
    for s in starts:
        ctl.launches.launch_done(s.job_id)
    for _ in range(pending):
        ctl.queue.submit(JobSpec(script="#!/bin/sh\ntrue\n", workdir="/tmp", gpus_per_node=8), user)
    for k in range(0, nodes, 97):  # some variety for sinfo's grouping
        ctl.nodes[names[k]].drain = True
        ctl.nodes[names[k]].reason = "bench"
    return app


def best(fn: Callable[[], object], n: int = 5) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times) * 1000


class Replay:
    """Stands in for ``client.controller.Controller``: answers from recorded bytes, or records
    them from ``fetch`` (the controller's app) the first time a path is asked for."""

    def __init__(self, answers: dict[str, bytes], fetch: Callable[[str], bytes] | None = None) -> None:
        self.answers = answers
        self.fetch = fetch

    def get(self, path: str) -> dict:  # type: ignore[type-arg]
        if path not in self.answers and self.fetch is not None:
            self.answers[path] = self.fetch(path)
        return json.loads(self.answers[path])  # as protocol.client decodes an answer


def command(module: Any, argv: list[str], replay: Replay) -> bytes:
    out = io.StringIO()
    saved = module.connect
    module.connect = lambda *a, **k: replay
    try:
        with contextlib.redirect_stdout(out):
            assert module.main(argv) == 0
    finally:
        module.connect = saved
    return out.getvalue().encode()


def measure(nodes: int, jobs_per_node: int, pending: int) -> dict[str, float]:
    from starlette.testclient import TestClient

    from muster.cli import sinfo, squeue
    from muster.protocol.httpd import PEER_KEY

    app = cluster(nodes, jobs_per_node, pending)

    async def as_root(scope: Any, receive: Any, send: Any) -> None:  # as the Unix socket's root peer
        if scope["type"] == "http":
            scope = {**scope, PEER_KEY: (0, 0, 0)}
        await app.asgi(scope, receive, send)

    client = TestClient(as_root)  # type: ignore[arg-type]

    def get(path: str) -> bytes:
        answer = client.get(path)
        assert answer.status_code == 200, answer.text
        return answer.content

    out: dict[str, float] = {}
    for name, module in (("sinfo", sinfo), ("squeue", squeue)):
        answers: dict[str, bytes] = {}
        command(module, [], Replay(answers, get))  # what the command asks for, recorded
        out[f"ctld_{name}_ms"] = sum(best(lambda path=path: get(path)) for path in answers)
        out[f"bytes_{name}"] = sum(len(body) for body in answers.values())
        out[f"cmd_{name}_ms"] = best(lambda module=module, answers=answers: command(module, [], Replay(answers)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="1024,4096", help="cluster sizes (default 1024,4096)")
    ap.add_argument("--jobs-per-node", type=int, default=1, help="running jobs per node (default 1)")
    ap.add_argument("--pending", type=int, default=1000, help="pending jobs (default 1,000)")
    args = ap.parse_args(argv)
    print(f"in-process, {args.jobs_per_node} running job(s) per node and {args.pending} pending; best of 5, ms:")
    print(f"{'nodes':>6} {'sinfo: ctld':>12} {'command':>8} {'squeue: ctld':>13} {'command':>8}")
    for n in [int(x) for x in args.nodes.split(",") if x]:
        r = measure(n, args.jobs_per_node, args.pending)
        print(
            f"{n:>6} {r['ctld_sinfo_ms']:>12.1f} {r['cmd_sinfo_ms']:>8.1f} {r['ctld_squeue_ms']:>13.1f} "
            f"{r['cmd_squeue_ms']:>8.1f}   ({r['bytes_sinfo'] // 1024} kB for sinfo, {r['bytes_squeue'] // 1024} kB "
            "for squeue)"
        )
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
