"""The daemons' fixed cost per HTTP request, with each of uvicorn's HTTP parsers (issue 20).

Two one-node clusters run side by side, one controller serving with h11
(``MUSTER_HTTP=h11``), the other with httptools (the default); rounds of ``N`` requests
alternate between them, so both see the same machine load. Each request is what a
command sends (``protocol.client``: a new Unix-socket connection, GET /v1/ping,
``Connection: close``), sent from this process without any interpreter start-up.

* the round trip (median over all requests, microseconds);
* the controller's CPU per request (its utime+stime from /proc/PID/stat over each round,
  microseconds; the median of the rounds).

Figures only; nothing here asserts a wall-clock bound.
"""

from __future__ import annotations

import os
import socket
import statistics
import time

from common import median

from harness import Harness
from muster.cluster.local import ClusterShape

N = int(os.environ.get("BENCH_HTTP_REQUESTS", "500"))
ROUNDS = int(os.environ.get("BENCH_HTTP_ROUNDS", "10"))
PARSERS = ("h11", "httptools")
PING = b"GET /v1/ping HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ask(path: str, request: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data


def start(parser: str) -> Harness:
    h = Harness(ClusterShape(nodes=1, gpus_per_node=1, cpus_per_node=2, mem_per_node=4000))
    os.environ["MUSTER_HTTP"] = parser  # the daemons inherit this process's environment
    try:
        h.up()
    finally:
        del os.environ["MUSTER_HTTP"]
    # Which parser serves shows in how a 20 KiB head is refused: h11 says 400, ours 431.
    status = ask(h.cluster.config().ctld_socket, b"GET / HTTP/1.1\r\nX: " + b"x" * 20480 + b"\r\n\r\n")[9:12]
    assert status == (b"400" if parser == "h11" else b"431"), (parser, status)
    return h


def main() -> None:
    clusters = {parser: start(parser) for parser in PARSERS}
    try:
        trips: dict[str, list[float]] = {p: [] for p in PARSERS}
        cpu: dict[str, list[float]] = {p: [] for p in PARSERS}
        for h in clusters.values():  # warm up
            for _ in range(50):
                ask(h.cluster.config().ctld_socket, PING)
        for _ in range(ROUNDS):
            for parser, h in clusters.items():
                path = h.cluster.config().ctld_socket
                pid = h.cluster._alive("musterctld")
                assert pid is not None
                cpu0 = cpu_seconds(pid)
                for _ in range(N):
                    t0 = time.perf_counter()
                    answer = ask(path, PING)
                    trips[parser].append((time.perf_counter() - t0) * 1e6)
                    assert answer.startswith(b"HTTP/1.1 200 "), answer[:100]
                cpu[parser].append((cpu_seconds(pid) - cpu0) * 1e6 / N)
        print(f"{ROUNDS} alternating rounds of {N} requests, GET /v1/ping over the controller's Unix socket")
        print(f"{'':<40} {'h11':>10} {'httptools':>10} {'saved':>8}")
        rows = {
            "round trip, median (us)": {p: median(trips[p]) for p in PARSERS},
            "controller CPU per request (us)": {p: statistics.median(cpu[p]) for p in PARSERS},
        }
        for name, row in rows.items():
            a, b = row["h11"], row["httptools"]
            print(f"{name:<40} {a:10.0f} {b:10.0f} {a - b:8.0f}")
    finally:
        for h in clusters.values():
            h.down()


if __name__ == "__main__":
    main()
