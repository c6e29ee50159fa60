"""The command server's bookkeeping (``cli.cmdserver``): each runner's client hears how it
ended, whichever the server learns first, the runner's report or its end; and a runner
knows which of the server's pages it wrote (``cli.cmdpages``)."""

from __future__ import annotations

import subprocess
import sys

from muster.cli.launchers import import_root

# Run in a process of its own: reaping there takes any child's status (waitpid(-1)).
SCRIPT = """
import os, select, socket, sys, time
sys.path.insert(0, {root!r})
from muster.cli.cmdserver import PID, Server

server = Server.__new__(Server)
server.ready, server.running, server.last = set(), {{}}, 0.0
server.poller = select.poll()
server.control, server.reports = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
server.control.setblocking(False)
for order in ("report first", "end first"):
    client, runner_side = socket.socketpair()
    client.settimeout(10)
    pid = os.fork()
    if pid == 0:
        os._exit(3)
    socket.send_fds(server.reports, [PID.pack(pid)], [runner_side.fileno()])  # reported, then ended
    runner_side.close()
    time.sleep(0.2)  # the runner has ended (a zombie) and its report waits
    if order == "report first":
        server.take_reports()
    server.reap()
    reply = client.recv(16)
    print(order, reply[:1].decode(), PID.unpack(reply[1:5])[0] >> 8, len(server.running))
"""


def test_a_runner_that_ended_before_its_report_was_read_is_reported_to_its_client() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(root=import_root())], capture_output=True, text=True, timeout=60
    )
    assert out.stdout.splitlines() == ["report first X 3 0", "end first X 3 0"], out.stderr


LEARN = """
import ctypes, os, sys
sys.path.insert(0, {root!r})
from muster.cli.cmdpages import PAGE_SHIFT, writable_ranges, written_pages

buf = bytearray(b"x" * (64 << 12))  # written before the fork: shared with the child after it
middle = (ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf)) >> PAGE_SHIFT) + 32
pid = os.fork()
if pid == 0:
    ranges = writable_ranges()
    before = middle in written_pages(ranges)
    buf[32 << 12] = 0  # on that page: 32 pages past the buffer's start
    print(before, middle in written_pages(ranges), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


def test_a_runner_knows_which_of_the_servers_pages_it_wrote() -> None:
    out = subprocess.run(
        [sys.executable, "-c", LEARN.format(root=import_root())], capture_output=True, text=True, timeout=60
    )
    assert out.stdout.split() == ["False", "True"], out.stderr


def test_the_server_keeps_the_pages_its_runners_report_written() -> None:
    import array
    import socket

    from muster.cli.cmdserver import Server

    server = Server.__new__(Server)
    server.hot = set()
    server.control, server.reports = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.control.setblocking(False)
    try:
        for pages in ([7, 8, 9], [9, 40]):
            server.reports.send(b"hot:" + array.array("Q", pages).tobytes())
        server.take_reports()
        assert server.hot == {7, 8, 9, 40}  # the next runners copy these while they wait
    finally:
        server.control.close()
        server.reports.close()
