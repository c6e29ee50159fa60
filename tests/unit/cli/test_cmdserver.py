"""The command server's bookkeeping (``cli.cmdserver``): a runner's client hears how its
command ended, and nothing from a runner that ran nothing; a runner that found muster's code
changed makes the server leave; over its bound of runners the server tells a client at once
to run its command itself, and forks nothing, not even a runner ahead; the client a runner
ahead took is the server's to watch, a runner ahead that ended gives the socket back, and
while one waits the server leaves the clients to it."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import tempfile

from muster.cli.cmdserver import Server
from muster.cli.launchers import import_root

# Run in a process of its own: reaping there takes any child's status (waitpid(-1)).
SCRIPT = """
import os, select, signal, socket, sys, time
sys.path.insert(0, {root!r})
from muster.cli.cmdserver import PID, RAN, REFUSED, STALE, Server

server = Server.__new__(Server)
server.running, server.last, server.leaving = {{}}, 0.0, False
server.runners = 0  # no runner forked ahead here
server.poller = select.poll()
for name, end in (("ran", RAN), ("refused", REFUSED), ("stale", STALE), ("killed", -signal.SIGKILL)):
    client, runner_side = socket.socketpair()
    client.settimeout(10)
    pid = os.fork()
    if pid == 0:
        if end < 0:
            os.kill(os.getpid(), -end)
        os._exit(end)
    server.running[pid] = runner_side
    server.poller.register(runner_side, select.POLLRDHUP)
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # ended: a zombie until reaped
    server.reap()
    reply = client.recv(16)
    told = f"{{reply[:1].decode()}}{{PID.unpack(reply[1:5])[0]}}" if reply else "nothing"
    print(name, told, len(server.running), server.leaving, server.last > 0, flush=True)
    server.last, server.leaving = 0.0, False
"""


def test_a_runner_s_client_hears_how_its_command_ended_and_nothing_when_none_ran() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(root=import_root())], capture_output=True, text=True, timeout=60
    )
    assert out.stdout.splitlines() == [
        "ran X0 0 False True",  # the runner said its status itself first: this one is ignored
        "refused nothing 0 False False",  # it said "F": nothing more, and no command ran
        "stale nothing 0 True False",  # muster's code changed: the server leaves
        "killed X9 0 False True",  # a death by a signal: the client dies of it too
    ], out.stderr


def test_over_its_bound_the_server_tells_the_client_to_run_the_command_itself() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = Server.__new__(Server)
        server.runners, server.leaving = 1, False
        busy, _ = socket.socketpair()
        server.running = {os.getpid(): busy}  # one command runs: the bound
        server.poller = select.poll()
        server.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.listener.bind(os.path.join(tmp, "s"))
        server.listener.listen(8)
        server.listener.setblocking(False)
        clients = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(3)]
        try:
            for c in clients:
                c.connect(os.path.join(tmp, "s"))
                c.settimeout(10)
            server.accept()
            for c in clients:
                assert c.recv(16) == b"F"  # run it yourself: nothing ran
                assert c.recv(16) == b""
            assert list(server.running) == [os.getpid()]  # no runner forked
            server.fork_ahead()
            assert server.ahead is None  # none ahead either: it would wait for nothing
        finally:
            for s in (*clients, busy, server.listener):
                s.close()


def test_the_client_the_runner_ahead_took_is_watched_and_one_that_ended_gives_the_socket_back() -> None:
    server = Server.__new__(Server)
    server.runners, server.leaving, server.running = 1, False, {}
    server.poller = select.poll()
    server.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    client, conn = socket.socketpair()
    try:
        server.ahead = (1234, mine)
        server.poller.register(mine, select.POLLIN)
        server.taken()
        assert server.ahead is not None  # it waits still: nothing said
        socket.send_fds(theirs, [b"c"], [conn.fileno()])  # it took a client (before its "P")
        server.taken()
        assert server.ahead is None and list(server.running) == [1234]
        server.running[1234].send(b"X")  # the server holds the client's connection: it watches it
        assert client.recv(1) == b"X"
        assert theirs.recv(1) == b""  # and their pair is closed: the next runner has its own
        # one that ends having taken nothing (killed as it waited): dropped, none in its place
        gone, its_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        server.ahead = (1235, gone)
        server.poller.register(gone, select.POLLIN)
        its_end.close()
        server.taken()
        assert server.ahead is None and list(server.running) == [1234]
        server.poller.modify(server.listener, select.POLLIN)  # registered: the server takes clients itself
    finally:
        for s in (mine, theirs, client, conn, server.listener, *server.running.values()):
            s.close()


def test_while_a_runner_waits_ahead_the_server_leaves_the_clients_to_it() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = Server.__new__(Server)
        server.runners, server.leaving, server.running = 8, False, {}
        server.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.listener.bind(os.path.join(tmp, "s"))
        server.listener.listen(8)
        server.listener.setblocking(False)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        server.ahead = (1234, mine)
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            client.connect(os.path.join(tmp, "s"))
            server.accept()
            assert server.running == {}  # nothing forked, nothing said
            conn, _ = server.listener.accept()  # the client still waits on the socket, for the runner
            conn.close()
        finally:
            for s in (mine, theirs, client, server.listener):
                s.close()
