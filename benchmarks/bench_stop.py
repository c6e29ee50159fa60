"""Issue 33 item 4's figure: how long musterctld takes to stop on SIGTERM with connections open.

A local cluster of ``--nodes`` agents (whose heartbeats keep their connections alive). Each
round opens ``--idle`` kept-alive client connections (half on the Unix socket, half on TCP,
each having had one request answered), ``--half`` connections that sent half a request and
wait, and ``--waiting`` ``srun`` commands waiting for an allocation that will not come (a
held partition), then sends SIGTERM and measures until the process is gone. The
controller is started again between rounds (its lock lets go with it); one still up after
``--cap`` seconds is killed and counted as the cap. Figures are printed, never asserted.

    python benchmarks/bench_stop.py [--rounds 5] [--nodes 4] [--idle 20] [--half 4] [--waiting 4] [--cap 120]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from harness import Harness, process_running  # noqa: E402
from muster.cluster.local import ClusterShape  # noqa: E402

PING = b"GET /v1/ping HTTP/1.1\r\nHost: x\r\n\r\n"


def open_connections(h: Harness, idle: int, half: int) -> list[socket.socket]:
    cfg = h.cluster.config()
    tcp = (cfg.ctld_addrs[0][1], cfg.ctld_port)
    out = []
    for i in range(idle):
        if i % 2:
            s = socket.create_connection(tcp)
        else:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(cfg.ctld_socket_for(0))
        s.sendall(PING)
        s.settimeout(10)
        s.recv(65536)
        out.append(s)
    for _ in range(half):
        s = socket.create_connection(tcp)
        s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
        out.append(s)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--idle", type=int, default=20)
    ap.add_argument("--half", type=int, default=4)
    ap.add_argument("--waiting", type=int, default=4)
    ap.add_argument("--cap", type=float, default=120.0, help="seconds after which a controller still up is killed")
    args = ap.parse_args()
    h = Harness(ClusterShape(nodes=args.nodes, gpus_per_node=0, cpus_per_node=2, mem_per_node=2000))
    h.up()
    times = []
    try:
        h.run(["scontrol", "update", "partition=gpu", "state=down"])  # srun waits for ever
        for _ in range(args.rounds):
            conns = open_connections(h, args.idle, args.half)
            sruns = [
                subprocess.Popen(["srun", "true"], env=h.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                for _ in range(args.waiting)
            ]
            time.sleep(1.0)  # the sruns' requests are in
            pid = h.cluster._alive("musterctld")
            assert pid is not None
            started = time.monotonic()
            os.kill(pid, signal.SIGTERM)
            while process_running(pid) and time.monotonic() - started < args.cap:
                time.sleep(0.005)
            times.append(time.monotonic() - started)
            if process_running(pid):  # not stopped within the cap: counted as the cap
                os.kill(pid, signal.SIGKILL)
            for s in conns:
                s.close()
            for p in sruns:
                p.kill()
                p.wait()
            h.cluster.start()
            h.cluster.wait_ready(60)
    finally:
        h.down()
    print(
        f"musterctld SIGTERM -> exit with {args.nodes} agents, {args.idle} idle kept-alive client connections, "
        f"{args.half} half-sent requests, {args.waiting} waiting sruns: "
        f"median {statistics.median(times):.2f} s, max {max(times):.2f} s over {len(times)} rounds "
        f"({', '.join(f'{t:.2f}' for t in times)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
