"""What a hostile client can do with a request's head, against real daemons: an endless URL,
endless header lines or one endless header are refused (431) once past 16 KiB while the
daemon goes on serving everyone else, and no ``X-Forwarded-For`` header lets a client on
the loopback escape the budget of failed authentications."""

from __future__ import annotations

import os
import select
import socket
from collections.abc import Iterator

import pytest

from harness import Harness
from muster.cluster.local import ClusterShape
from muster.protocol.httpconn import HEAD_LIMIT

pytestmark = pytest.mark.integration

STARTS = {
    "url": (b"GET /v1/ping?" + b"a" * 100, b"a" * 4096),
    "header lines": (b"GET /v1/ping HTTP/1.1\r\nHost: x\r\n", b"X-Filler: " + b"b" * 4084 + b"\r\n"),
    "one endless header": (b"GET /v1/ping HTTP/1.1\r\nHost: x\r\nX-Endless: ", b"c" * 4096),
}
FLOOD = 64 << 20  # bytes a client offers before giving up on an answer


@pytest.fixture(scope="module")
def world() -> Iterator[Harness]:
    h = Harness(ClusterShape(nodes=1, gpus_per_node=1, cpus_per_node=2, mem_per_node=4000))
    h.up()
    try:
        yield h
    finally:
        h.down()


def connect(world: Harness, target: str) -> socket.socket:
    cfg = world.cluster.config()
    if target == "ctld unix":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(cfg.ctld_socket)
        return s
    if target == "ctld tcp":
        return socket.create_connection((cfg.ctld_addr, cfg.ctld_port), timeout=10)
    node = cfg.nodes[0]
    return socket.create_connection((node.addr, node.port), timeout=10)


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def answer(s: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := s.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


@pytest.mark.parametrize("target", ["ctld unix", "ctld tcp", "node1 tcp"])
@pytest.mark.parametrize("where", list(STARTS))
def test_an_endless_head_gets_431_and_the_daemon_serves_others_meanwhile(
    world: Harness, target: str, where: str
) -> None:
    pid = world.cluster._alive("musterctld" if target.startswith("ctld") else "node1")
    assert pid is not None
    before = rss_kib(pid)
    start, more = STARTS[where]
    with connect(world, target) as s:
        s.sendall(start + more)  # half the bound: the daemon waits for the rest...
        assert world.run(["squeue", "-h"]).returncode == 0  # ...and serves others meanwhile
        sent = len(start + more)
        try:
            while sent < FLOOD and not select.select([s], [], [], 0)[0]:
                s.sendall(more)
                sent += len(more)
        except OSError:  # refused and closed while we were still sending
            pass
        reply = answer(s)
    assert reply.startswith(b"HTTP/1.1 431 "), reply[:200]
    assert b"connection: close" in reply
    assert rss_kib(pid) - before < 8 * 1024  # what was sent may fill the kernel's buffers, not the daemon
    name = "musterctld" if target.startswith("ctld") else "node1"
    with open(os.path.join(world.cluster.state_dir, "log", f"{name}.log")) as f:
        assert f"its head is over {HEAD_LIMIT} bytes" in f.read()
    assert world.run(["sinfo", "-h"]).returncode == 0


def test_a_large_head_under_the_bound_is_served(world: Harness) -> None:
    with connect(world, "ctld unix") as s:
        filler = b"X-Filler: " + b"d" * (HEAD_LIMIT - 1024) + b"\r\n"
        s.sendall(b"GET /v1/ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + filler + b"\r\n")
        assert answer(s).startswith(b"HTTP/1.1 200 ")


# Last in this module: it spends 127.0.0.1's budget of failed authentications, the address
# the agents reach the controller from.
def test_x_forwarded_for_does_not_escape_the_budget_of_failed_authentications(world: Harness) -> None:
    """uvicorn trusts a loopback client's X-Forwarded-For by default; the daemons do not."""
    statuses = []
    for i in range(100):
        with connect(world, "ctld tcp") as s:
            s.sendall(
                b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Forwarded-For: 10.7.%d.%d\r\n\r\n"
                % (i // 200, i % 200 + 1)
            )
            statuses.append(int(answer(s).split(b" ", 2)[1]))
        if statuses[-1] == 429:
            break
    assert statuses[0] == 401 and statuses[-1] == 429, statuses
    assert world.run(["squeue", "-h"]).returncode == 0  # the Unix socket's users are not throttled
