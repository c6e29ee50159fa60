"""The command server: one user's Slurm commands, run from an interpreter already warm.

A command written in Python pays the interpreter's start before its first line: ~5 ms on
this project's 2-core machine, more than Slurm's whole ``squeue``. The compiled client
(``client.c``, installed as the commands by ``muster.cli.launchers``) instead hands its
command to this server, started by the first command a user runs and left when idle:

* The server imports every one-shot command once, then keeps ``READY`` processes forked
  from itself waiting on its socket. The one that accepts a client runs that command and
  exits; the server forks another when it has ended. A command thus starts from a fork,
  with its modules imported and the forking off its path.
* The runner takes the client's arguments, environment, working directory, umask,
  resource limits, ignored signals and its stdin, stdout and stderr, as if the client had
  run it, and ends with what the interpreter would have done (the status, a traceback, a
  death by SIGINT). The client forwards the signals it gets (Ctrl-C) to the runner and
  exits as the runner did: with its status, or by the same signal.
* What a fork cannot copy exactly it refuses, and the client then runs the command's
  Python launcher itself, as every command ran before: a client of another user or group
  (peer credentials, real ids, supplementary groups), other ``PYTHON*`` variables than
  the server started with (the client picks its server by them: a safety net), limits it
  cannot set, a command it does not serve, or muster's
  own code changed since the server imported it (the server then leaves, and the next
  command starts a new one).

Faults: a runner answers ``P`` as it takes a client, and starts the command only on the
client's ``G``, which brings the client's descriptors; a client unanswered in time runs
the command itself instead (``client.c``), so a command runs once whichever side stalls.
The server watches each running command's client: one that goes (killed) has its command
hung up on, SIGHUP, as a closed terminal does.

Trust: the socket is in ``$XDG_RUNTIME_DIR/muster-cmd`` (a login session's runtime directory
that is the user's own and closed) or ``/tmp/muster-cmd-UID``, which the client accepts only when it is
the user's own directory closed to everyone else, and each side checks the other's peer
credentials. A runner never serves another user: it does not even answer one.

The server leaves after ``MUSTER_CMD_SERVER_IDLE`` seconds without a command (600 by
default), when its socket is removed or replaced, or on SIGTERM; ``MUSTER_CMD_SERVER=0``
(a user) or ``CommandServer=no`` in muster.conf (the site) makes the client run every
command itself.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import gc
import importlib
import io
import os
import select
import signal
import socket
import struct
import sys
import time
import traceback
from typing import NoReturn, TextIO

from muster.cli.cmdpages import HOT_MAX, POPULATE_AFTER, populate, writable_ranges, written_pages
from muster.cli.launchers import SERVED

READY = 2  # runners waiting on the socket
CHECK = 5.0  # seconds between the server's checks of its socket and its idle time
MAGIC = b"MUS1"
# What the commands import as they run, beyond their own modules: imported once by the server
# (the TLS path, ssl included, costs a command started alone several milliseconds).
WARM = (
    "grp",
    "pwd",
    "shlex",
    "muster.cli.directives",
    "muster.cli.failover",
    "muster.cli.hetargs",
    "muster.cli.jobarrays",
    "muster.cli.reservation",
    "muster.cli.scontrol_ha",
    "muster.cli.scontrol_records",
    "muster.cli.scontrol_steps",
    "muster.cli.scontrol_token",
    "muster.cli.scontrol_topology",
    "muster.cli.scontrol_update",
    "muster.cli.sinfo_fields",
    "muster.cli.slurmjson",
    "muster.cli.squeue_fields",
    "muster.cli.squeue_filters",
    "muster.cli.squeue_steps",
    "muster.core.arrays",
    "muster.core.conftext",
    "muster.core.errors",
    "muster.core.hostlist",
    "muster.core.memtext",
    "muster.core.optionvalues",
    "muster.core.statenames",
    "muster.core.timetext",
    "muster.core.tlsconf",
    "muster.protocol.client",
    "muster.protocol.tls",
    "muster.protocol.tlsclient",
    "muster.protocol.wirejson",
)
PID = struct.Struct("=i")


def idle_limit() -> float:
    try:
        return float(os.environ.get("MUSTER_CMD_SERVER_IDLE", "600"))
    except ValueError:
        return 600.0


class Refused(Exception):
    """A request this server's fork cannot run as the client would: the client runs it."""


class Request:
    """What a client sent: the fields of ``client.c``'s body (its four descriptors come with
    its "G")."""

    def __init__(self, body: bytes) -> None:
        fields = body.split(b"\0")
        if len(fields) < 8:
            raise Refused("a malformed request")
        self.fds: list[int] = []
        self.command = fields[0].decode()
        self.umask = int(fields[1], 8)
        self.ignored = int(fields[2])
        self.ids = tuple(int(x) for x in fields[3].split(b":"))
        self.groups = {int(x) for x in fields[4].split(b",") if x}
        self.limits = [limit(item) for item in fields[5].split(b",") if item]
        argc = int(fields[6])
        self.argv = [os.fsdecode(a) for a in fields[7 : 7 + argc]]
        self.environ = dict(e.partition(b"=")[::2] for e in fields[7 + argc : -1] if b"=" in e)


def limit(item: bytes) -> tuple[int, int, int]:
    """``RESOURCE:SOFT:HARD`` (-1: unlimited)."""
    number, soft, hard = (int(x) for x in item.split(b":"))
    return number, soft, hard


def read_request(conn: socket.socket) -> Request:
    """Exactly the request: the client's "G" may follow it, with descriptors to keep."""
    head = b""
    while len(head) < 8:
        more = conn.recv(8 - len(head))
        if not more:
            raise Refused("the client went away")
        head += more
    if head[:4] != MAGIC:
        raise Refused("not a muster client")
    (length,) = struct.unpack("=I", head[4:8])
    body = bytearray(head[8:])
    while len(body) < length:
        more = conn.recv(min(length - len(body), 1 << 20))
        if not more:
            raise Refused("the client went away")
        body += more
    return Request(bytes(body))


def take_go(conn: socket.socket) -> list[int] | None:
    """The client's "G" and its descriptors 0, 1, 2 and working directory; None where the
    client went away instead (it runs the command itself)."""
    msg, fds, _flags, _addr = socket.recv_fds(conn, 1, 4)
    if msg == b"G" and len(fds) == 4:
        return fds
    for fd in fds:
        os.close(fd)
    return None


def drain(conn: socket.socket) -> None:
    """Close what the client sends until it hangs up: its "G" may be on its way after an "F",
    and its descriptors must not wait in a socket that the server holds too (a caller
    reading the client's stdout to its end would wait with them)."""
    conn.settimeout(CHECK)
    while True:
        msg, fds, _flags, _addr = socket.recv_fds(conn, 1, 4)
        for fd in fds:
            os.close(fd)
        if not msg:
            return


def fingerprint() -> dict[str, int]:
    """The modification times of muster's modules now imported."""
    prints = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and (name == "muster" or name.startswith("muster.")):
            try:
                prints[path] = os.stat(path).st_mtime_ns
            except OSError:
                prints[path] = -1
    return prints


def stale(prints: dict[str, int]) -> bool:
    for path, mtime in prints.items():
        try:
            if os.stat(path).st_mtime_ns != mtime:
                return True
        except OSError:
            return True
    return False


NAMESPACES = ("mnt", "net", "uts", "ipc", "pid", "user", "cgroup")


def place(pid: int | str) -> tuple[tuple[int, int] | None, ...]:
    """A process's namespaces and root directory (``client.c``'s ``place``)."""
    found: list[tuple[int, int] | None] = []
    for path in (*(f"/proc/{pid}/ns/{kind}" for kind in NAMESPACES), f"/proc/{pid}/root"):
        try:
            st = os.stat(path)
            found.append((st.st_dev, st.st_ino))
        except OSError:
            found.append(None)
    return tuple(found)


def check(req: Request, startup_env: dict[bytes, bytes]) -> None:
    """Refuse what a fork of this server would run otherwise than the client itself."""
    if req.command not in SERVED:
        raise Refused(f"not a served command: {req.command}")
    if req.ids != (os.getuid(), os.getgid()) or req.groups != set(os.getgroups()):
        raise Refused("another identity")
    python = {k: v for k, v in req.environ.items() if k.startswith(b"PYTHON")}
    if python != {k: v for k, v in startup_env.items() if k.startswith(b"PYTHON")}:
        raise Refused("other PYTHON variables")
    import resource

    for number, soft, hard in req.limits:
        want = (resource.RLIM_INFINITY if soft < 0 else soft, resource.RLIM_INFINITY if hard < 0 else hard)
        try:
            if resource.getrlimit(number) != want:
                resource.setrlimit(number, want)
        except (OSError, ValueError) as e:
            raise Refused(f"limit {number}: {e}") from None


def become(req: Request) -> None:
    """Take the client's place: its directory, umask, signals, descriptors, environment."""
    os.fchdir(req.fds[3])
    os.umask(req.umask)
    for number in range(1, 32):
        if req.ignored & (1 << number) and number not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(number, signal.SIG_IGN)
    for fd in range(3):
        os.dup2(req.fds[fd], fd)
    for fd in req.fds:
        os.close(fd)
    environ = os.environb
    environ.clear()  # putenv and unsetenv too: what the command starts inherits them
    environ.update(req.environ)
    import posix

    posix.environ.clear()  # what muster.cli.common reads where os is not imported
    posix.environ.update(req.environ)
    time.tzset()
    sys.argv = req.argv
    tty = os.isatty(1)
    sys.stdin = reopen(sys.stdin, 0, "r", -1)
    sys.stdout = reopen(sys.stdout, 1, "w", 1 if tty else -1)  # line-buffered on a terminal, as there
    sys.stderr = reopen(sys.stderr, 2, "w", 1)


def reopen(stream: TextIO, fd: int, mode: str, buffering: int) -> TextIO:
    """A standard stream on the client's descriptor, encoded as the interpreter's own."""
    return io.TextIOWrapper(
        open(fd, mode + "b", buffering=buffering if buffering != 1 else -1, closefd=False),  # noqa: SIM115
        encoding=stream.encoding,
        errors=stream.errors,
        line_buffering=buffering == 1,
        write_through=fd == 2,
    )


def run(command: str) -> int:
    """The command's ``main``, ended as the interpreter ends a script: its status."""
    module = importlib.import_module(f"muster.cli.{command}")
    try:
        status = module.main()
    except SystemExit as e:
        status = e.code
    except KeyboardInterrupt:
        traceback.print_exc()
        finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # the interpreter's way: die by the signal
        raise
    except BaseException:
        traceback.print_exc()
        status = 1
    if status is None:
        status = 0
    elif not isinstance(status, int):
        sys.stderr.write(f"{status}\n")
        status = 1
    return finish() or status & 0xFF


def finish() -> int:
    """What the interpreter does on the way out: exit functions, threads, flushing (a
    failed flush is status 120, as there)."""
    atexit._run_exitfuncs()
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()  # type: ignore[attr-defined]
    failed = 0
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            failed = 120
    return failed


def report(conn: socket.socket, status: int) -> None:
    """A runner's wait status to its client (ignored where the runner said it first)."""
    try:
        conn.sendall(b"X" + PID.pack(status))
    except OSError:
        pass
    conn.close()


class Server:
    def __init__(self, path: str) -> None:
        self.path = path
        self.env = dict(os.environb)
        for name in (*(f"muster.cli.{c}" for c in SERVED), *WARM, "resource", "ctypes"):
            importlib.import_module(name)
        self.prints = fingerprint()
        self.place = place("self")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        tmp = f"{path}.{os.getpid()}"
        self.listener.bind(tmp)
        self.listener.listen(128)
        os.replace(tmp, path)  # atomically: a client never finds the path unbound
        try:
            os.unlink(f"{path}.starting")  # the client's mark: this start is done (client.c)
        except OSError:
            pass
        self.inode = os.stat(path).st_ino
        self.control, self.reports = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.life_r, self.life_w = os.pipe()  # its runners leave when it closes, whatever ends it
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.ready: set[int] = set()
        self.running: dict[int, socket.socket] = {}
        self.leaving = False
        self.stuck = False
        self.last = time.monotonic()
        self.poller = select.poll()
        self.hot: set[int] = set()  # the pages commands write (``populate``)
        self.ranges: list[tuple[int, int]] = []

    # --- the runner -------------------------------------------------------------------------

    def runner(self) -> NoReturn:
        """A runner's life. What it tells the server it never waits to tell (MSG_DONTWAIT:
        the runners share one socket's buffer, and a server stopped would hold them)."""
        status = 0
        try:
            signal.set_wakeup_fd(-1)
            for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGUSR1):
                signal.signal(number, signal.SIG_DFL)
            self.control.close()
            os.close(self.wake_r)
            os.close(self.wake_w)
            for conn in self.running.values():  # other commands' clients: theirs to end
                conn.close()
            os.close(self.life_w)
            self.ranges = writable_ranges()
            watched: list[socket.socket | int] = [self.listener, self.life_r]
            if not select.select(watched, [], [], POPULATE_AFTER)[0]:
                populate(self.hot)  # not in a quick succession of commands: it would slow them
            conn = self.accept()
            self.listener.close()
            os.close(self.life_r)
            status = self.serve(conn)
        except KeyboardInterrupt:  # Ctrl-C before the command started: die by it, as the interpreter
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
            status = 130
        except BaseException:
            traceback.print_exc()
            status = 1
        os._exit(status)

    def accept(self) -> socket.socket:
        """The next client, or leave when the server has gone (its end of ``life`` closed,
        however it ended)."""
        self.listener.setblocking(False)  # the runners race for each client
        while True:
            readable, _, _ = select.select([self.listener.fileno(), self.life_r], [], [])
            if self.life_r in readable:
                os._exit(0)
            try:
                conn, _ = self.listener.accept()
            except BlockingIOError:
                continue  # another runner took it
            conn.setblocking(True)
            return conn

    def serve(self, conn: socket.socket) -> int:
        """Take the client's command, and run it once the client says so (``G``): a client
        that waited for its answer in vain has run the command itself, and closes instead."""
        conn.settimeout(CHECK)
        peer = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        if (peer[1], peer[2]) != (os.geteuid(), os.getegid()):
            return 0  # never serve, nor answer, another user
        try:  # the server hangs up on the runner if the client goes, and reports a death by a signal
            socket.send_fds(self.reports, [PID.pack(os.getpid())], [conn.fileno()], socket.MSG_DONTWAIT)
        except OSError:
            pass
        try:
            conn.sendall(b"P" + PID.pack(os.getpid()))
            req = read_request(conn)
            if place(peer[0]) != self.place:
                raise Refused("another namespace or root directory")
            if stale(self.prints):
                self.reports.send(b"stale", socket.MSG_DONTWAIT)
                raise Refused("muster's code changed")
            check(req, self.env)
        except (Refused, OSError, ValueError):
            with contextlib.suppress(OSError):
                conn.sendall(b"F")
                drain(conn)
            return 0
        conn.settimeout(None)
        fds = take_go(conn)
        if fds is None:
            return 0  # the client gave up on us: nothing ran
        req.fds = fds
        become(req)
        status = run(req.command)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # done: its client leaving now hangs up on nothing
        try:
            conn.sendall(b"X" + PID.pack(status << 8))  # a wait status: the client need not wait for our exit
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDWR)  # the client's streams are its own again: a caller
        for fd in range(3):  # reading them to their end need not wait for our exit
            os.dup2(null, fd)
        try:  # what it wrote, for the next runners to copy while waiting (``populate``)
            pages = array.array("Q", written_pages(self.ranges)[:HOT_MAX])
            self.reports.send(b"hot:" + pages.tobytes(), socket.MSG_DONTWAIT)
        except OSError:
            pass
        return status

    # --- the server -------------------------------------------------------------------------

    def fork_runner(self) -> None:
        pid = os.fork()
        if pid == 0:
            self.runner()
        self.ready.add(pid)

    def reap(self) -> None:
        ended: dict[int, int] = {}
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            self.ready.discard(pid)
            conn = self.running.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(KeyError):  # not watched where it hung up already
                    self.poller.unregister(conn)
                report(conn, status)
            else:
                ended[pid] = status
        if ended:
            # A runner reports before it runs: the report of one that ended before its
            # report was read is in the queue now.
            self.take_reports(ended)

    def ours(self) -> bool:
        try:
            return os.stat(self.path).st_ino == self.inode
        except OSError:
            return False

    def loop(self) -> None:
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "leaving", True))
        # A client that waited in vain for a runner says so (client.c): the waiting ones
        # are stuck (stopped, say), and fresh ones are forked beside them.
        signal.signal(signal.SIGUSR1, lambda *_: setattr(self, "stuck", True))
        self.control.setblocking(False)
        self.poller.register(self.control, select.POLLIN)
        self.poller.register(self.wake_r, select.POLLIN)
        gc.disable()
        gc.freeze()  # the runners share the server's objects: no collection copies their pages
        limit = idle_limit()
        while not (self.leaving and not self.running):
            if self.stuck:
                self.stuck = False
                self.ready.clear()  # still children: reaped, and reported if they take a client
            while not self.leaving and len(self.ready) < READY:
                self.fork_runner()
            for fd, _events in self.poller.poll(CHECK * 1000):
                if fd not in (self.control.fileno(), self.wake_r):  # a running command's client
                    self.hang_up(fd)
            # Reports first: a runner reports before it runs, so one that has ended is known.
            self.take_reports()
            try:
                os.read(self.wake_r, 4096)
            except BlockingIOError:
                pass
            self.reap()
            # Idle: no command running, none run to its end for ``limit`` seconds (a server
            # that only refuses, one of an environment no longer used, leaves).
            if (not self.running and time.monotonic() - self.last > limit) or not self.ours():
                self.leaving = True
            if self.leaving:
                self.shutdown()

    def take_reports(self, ended: dict[int, int] | None = None) -> None:
        """The runners' reports; a runner in ``ended`` has its status reported at once."""
        while True:
            try:
                msg, fds, _flags, _addr = socket.recv_fds(self.control, 8 * HOT_MAX + 4, 1)
            except BlockingIOError:
                return
            if msg == b"stale":
                self.leaving = True
            elif msg.startswith(b"hot:"):  # a command has run to its end
                self.hot.update(array.array("Q", msg[4:]))
                self.last = time.monotonic()
            elif fds and len(msg) == PID.size:
                pid = PID.unpack(msg)[0]
                self.ready.discard(pid)
                conn = socket.socket(fileno=fds[0])
                if ended is not None and pid in ended:
                    report(conn, ended[pid])
                else:
                    self.running[pid] = conn
                    self.poller.register(conn, select.POLLRDHUP)  # not POLLIN: the client's bytes are the runner's
            else:
                for fd in fds:
                    os.close(fd)

    def hang_up(self, fd: int) -> None:
        """A running command's client has gone: hang up on the command, as a terminal does."""
        for pid, conn in self.running.items():
            if conn.fileno() == fd:
                self.poller.unregister(fd)
                os.kill(pid, signal.SIGHUP)
                return

    def shutdown(self) -> None:
        """Take the socket away. The waiting runners are left alone (one may have taken a
        command just now); those still waiting leave as the server's life pipe closes."""
        if self.ours():
            try:
                os.unlink(self.path)
            except OSError:
                pass


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: cmdserver SOCKET (started by the commands' client)\n")
        return 2
    Server(args[0]).loop()
    return 0
