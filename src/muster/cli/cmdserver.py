"""The command server: one user's Slurm commands, run from an interpreter already warm.

A command written in Python pays the interpreter's start before its first line: ~5 ms on
this project's 2-core machine, more than Slurm's whole ``squeue``. The compiled client
(``client.c``, installed as the commands by ``muster.cli.launchers``) instead hands its
command to this server, started by the first command a user runs and left when idle:

* The server imports every one-shot command once, then keeps one runner forked ahead: a
  fork of itself that waits on the socket, takes the next client, runs its command and
  exits. As it takes its client the server forks the next one (docs/decisions/0005: a
  fork per accepted client, as Mercurial's chg server does, put the fork on the command's
  path and missed Slurm's time by up to 1.85x). A command thus starts in a process forked
  already, with its modules imported and the pages it writes copied (``cmdpages``); an idle
  server is two processes, never more.
* At most ``MUSTER_CMD_SERVER_RUNNERS`` commands (8) run at once; no runner waits ahead at
  that bound, and the server takes the socket back: a client over it is told at once to
  run its command itself (``F``), as with no server: it never waits behind commands that
  run long (``sbatch --wait``, ``squeue -i``), and a burst of commands costs at most that
  many forks of the server, never one per client. Where no runner waits (its fork failed,
  or it was killed) the server forks one for the client it accepts.
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

Faults: the runner ahead answers ``P`` and its pid as it takes its client, having first
given the server a copy of the connection (the server answers ``P`` itself for a runner it
forks on accept); the runner starts the command only on the client's ``G``, which brings the client's descriptors (a runner
that refuses the command says ``F`` instead, before or after the ``G``); a client unanswered in time runs
the command itself instead (``client.c``), so a command runs once whichever side stalls.
The server watches each running command's client: one that goes (killed) has its command
hung up on, SIGHUP, as a closed terminal does. A runner tells the server how it ended by
its exit status (``RAN``, ``REFUSED``, ``STALE``); the server reports a runner's death by a
signal to its client, which dies of the same signal.

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

RUNNERS = 8  # commands run at once, by default (``MUSTER_CMD_SERVER_RUNNERS``)
RAN, REFUSED, STALE = 0, 1, 2  # how a runner ends: its command ran; nothing ran; nothing ran, code changed
CHECK = 5.0  # seconds between the server's checks of its socket and its idle time
MAGIC = b"MUS1"
# What the commands import as they run, beyond their own modules: imported once by the server
# (the TLS path, ssl included, costs a command started alone several milliseconds).
WARM = (
    "grp",
    "pwd",
    "shlex",
    "muster.cli.directives",
    "muster.client.failover",
    "muster.cli.hetargs",
    "muster.slurm.jobarrays",
    "muster.cli.reservation",
    "muster.cli.scontrol_ha",
    "muster.cli.scontrol_records",
    "muster.cli.scontrol_steps",
    "muster.cli.scontrol_token",
    "muster.cli.scontrol_topology",
    "muster.cli.scontrol_update",
    "muster.slurm.sinfo_fields",
    "muster.slurm.slurmjson",
    "muster.slurm.squeue_fields",
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
TEACHERS = 16  # runners that report the pages their command wrote (``cmdpages``): enough to learn them


def idle_limit() -> float:
    try:
        return float(os.environ.get("MUSTER_CMD_SERVER_IDLE", "600"))
    except ValueError:
        return 600.0


def runner_limit() -> int:
    try:
        return max(1, int(os.environ.get("MUSTER_CMD_SERVER_RUNNERS", RUNNERS)))
    except ValueError:
        return RUNNERS


def peer_of(conn: socket.socket) -> tuple[int, int, int]:
    """The pid, uid and gid of the process at the other end (the kernel's word)."""
    pid, uid, gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return pid, uid, gid


class Refused(Exception):
    """A request this server's fork cannot run as the client would: the client runs it."""


class Stale(Refused):
    """Muster's code changed since the server imported it: the server leaves."""


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
    head = exactly(conn, 8)
    if head[:4] != MAGIC:
        raise Refused("not a muster client")
    return Request(exactly(conn, struct.unpack("=I", head[4:8])[0]))


def exactly(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        more = conn.recv(min(size - len(data), 1 << 20))
        if not more:
            raise Refused("the client went away")
        data += more
    return bytes(data)


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
    ahead: tuple[int, socket.socket] | None = None  # the runner forked ahead, and its end of their pair

    def __init__(self, path: str) -> None:
        self.path = path
        self.env = dict(os.environb)
        for name in (*(f"muster.cli.{c}" for c in SERVED), *WARM, "resource", "ctypes"):
            importlib.import_module(name)
        self.prints = fingerprint()
        self.place = place("self")
        self.runners = runner_limit()
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
        self.listener.setblocking(False)
        self.control, self.reports = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)  # runners' pages
        self.control.setblocking(False)
        self.hot: set[int] = set()  # the pages commands write, copied by a runner ahead as it waits
        self.taught = 0  # the runners that reported them
        self.ranges: list[tuple[int, int]] = []  # a runner ahead's writable mappings, to report
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.running: dict[int, socket.socket] = {}  # each runner's client, watched
        self.leaving = False
        self.last = time.monotonic()
        self.poller = select.poll()

    # --- the runner -------------------------------------------------------------------------

    def detach(self) -> None:
        """A runner's first steps, out of the server's ways (before its client, if it waits)."""
        # The server hangs up on the command if the client goes (SIGHUP): held back until
        # the command has its client's streams, so that a client that goes before is no
        # command run.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(number, signal.SIG_DFL)
        self.control.close()
        os.close(self.wake_r)
        os.close(self.wake_w)
        for other in self.running.values():  # other commands' clients: theirs to end
            other.close()
        if self.ahead is not None:  # another runner's pair
            self.ahead[1].close()

    def runner(self, conn: socket.socket | None, hand: socket.socket | None = None) -> NoReturn:
        """A runner's life: one client's command. It ends ``RAN`` once the command has run
        (and its client has its status), else ``REFUSED`` or ``STALE``: nothing ran. A runner
        forked ahead (``hand``) first takes its client from the socket itself (``ahead``)."""
        status = REFUSED
        try:
            self.detach()
            if hand is not None:
                conn = self.ahead_of(hand)
            self.listener.close()
            if conn is not None:
                status = self.serve(conn)
        except KeyboardInterrupt:  # Ctrl-C before the command started: die by it, as the interpreter
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:
            traceback.print_exc()
        os._exit(status)

    def ahead_of(self, hand: socket.socket) -> socket.socket | None:
        """The runner forked ahead: it copies the pages commands write while it waits
        (``cmdpages``), takes the next client of its user from the socket, and gives the
        server a copy of it (``hand``) before it answers ``P``, so that the server watches
        it as it watches every command's client. None (nothing to run) when the server
        closes ``hand``, has gone, or takes no more commands."""
        if self.taught < TEACHERS:
            self.ranges = writable_ranges()
        watched = [self.listener, hand]
        if not select.select(watched, [], [], POPULATE_AFTER)[0]:
            populate(self.hot)  # not in a quick succession of commands: it would slow them
        self.listener.setblocking(False)
        while True:
            if hand in select.select(watched, [], [])[0]:
                return None  # the server leaves (or has gone)
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                continue  # the server took it
            conn.setblocking(True)
            if peer_of(conn)[1:] != (os.geteuid(), os.getegid()):
                conn.close()  # never serve, nor answer, another user
                continue
            try:
                socket.send_fds(hand, [b"c"], [conn.fileno()], socket.MSG_DONTWAIT)
                conn.sendall(b"P" + PID.pack(os.getpid()))  # the client's "G" is on its way
            except OSError:
                conn.close()  # EOF before "P": the client runs the command itself
                return None
            hand.close()
            return conn

    def serve(self, conn: socket.socket) -> int:
        """Take the client's command, and run it once the client says so (``G``): a client
        that waited for its answer in vain has run the command itself, and closes instead."""
        conn.settimeout(CHECK)
        try:
            req = read_request(conn)
            if place(peer_of(conn)[0]) != self.place:
                raise Refused("another namespace or root directory")
            if stale(self.prints):
                raise Stale("muster's code changed")
            check(req, self.env)
        except (Refused, OSError, ValueError) as e:
            with contextlib.suppress(OSError):
                conn.sendall(b"F")
                drain(conn)
            return STALE if isinstance(e, Stale) else REFUSED
        conn.settimeout(None)
        fds = take_go(conn)
        if fds is None:
            return REFUSED  # the client gave up on us: nothing ran
        req.fds = fds
        become(req)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})  # ignored now where the client ignores it
        status = run(req.command)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # done: its client leaving now hangs up on nothing
        null = os.open(os.devnull, os.O_RDWR)  # the client's streams are its own again before it
        for fd in range(3):  # hears the end: a caller reading them to their end waits for no runner's exit
            os.dup2(null, fd)
        try:
            conn.sendall(b"X" + PID.pack(status << 8))  # a wait status: the client need not wait for our exit
        except OSError:
            pass
        if self.ranges:  # what it wrote, for the next runners to copy while waiting (``cmdpages``)
            with contextlib.suppress(OSError):
                pages = array.array("Q", written_pages(self.ranges)[:HOT_MAX])
                self.reports.send(pages.tobytes(), socket.MSG_DONTWAIT)
        return RAN

    # --- the server -------------------------------------------------------------------------

    def accept(self) -> None:
        """Each waiting client: forked a runner, or, over ``runners``, told to run its command
        itself (``F``) at once; another user's is never answered. None while a runner waits
        ahead: the clients are its to take."""
        while self.ahead is None:
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors, say: the client waits, or runs it itself
                return
            conn.setblocking(True)
            if peer_of(conn)[1:] != (os.geteuid(), os.getegid()):
                conn.close()  # never serve, nor answer, another user
                continue
            if len(self.running) >= self.runners:
                with contextlib.suppress(OSError):
                    conn.send(b"F", socket.MSG_DONTWAIT)
                conn.close()
                continue
            try:
                pid = os.fork()
            except OSError:
                conn.close()  # EOF before "P": the client runs the command itself
                continue
            if pid == 0:
                self.runner(conn)
            # "P" said by the server: the client's "G" is on its way while the runner starts
            with contextlib.suppress(OSError):
                conn.send(b"P" + PID.pack(pid), socket.MSG_DONTWAIT)
            self.watch(pid, conn)  # and a runner forked ahead, which takes the next clients

    def watch(self, pid: int, conn: socket.socket) -> None:
        """Runner ``pid`` runs ``conn``'s command: its client is watched, and the next
        runner forked ahead."""
        self.running[pid] = conn
        self.poller.register(conn, select.POLLRDHUP)  # not POLLIN: the client's bytes are the runner's
        self.fork_ahead()

    def fork_ahead(self) -> None:
        """Fork the runner of the next client now, while none waits and the bound allows one
        more command: the fork, off the command's path, is paid between commands."""
        if self.ahead is not None or self.leaving or len(self.running) >= self.runners:
            return
        try:
            mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except OSError:
            return
        try:
            pid = os.fork()
        except OSError:
            mine.close()
            theirs.close()
            return
        if pid == 0:
            mine.close()
            self.runner(None, theirs)
        theirs.close()
        self.ahead = (pid, mine)
        self.poller.register(mine, select.POLLIN)
        self.poller.unregister(self.listener)  # the runner ahead's now

    def taken(self) -> None:
        """What the runner ahead says: the client it took (now a running command's, and the
        next runner forked ahead), or nothing, where it ended (the server takes the socket
        back)."""
        if self.ahead is None:
            return
        pid, hand = self.ahead
        hand.setblocking(False)  # (recv_fds drops its flags in Python 3.11)
        try:
            _msg, fds, _flags, _addr = socket.recv_fds(hand, 1, 1)
        except BlockingIOError:
            return  # it waits still
        except OSError:
            fds = []
        self.ahead = None
        self.poller.unregister(hand)
        hand.close()
        if not self.leaving:
            self.poller.register(self.listener, select.POLLIN)
        if fds:
            self.watch(pid, socket.socket(fileno=fds[0]))

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.ahead is not None and self.ahead[0] == pid:
                # The client it took, if it took one (it says so before "P"); where it ended
                # waiting (killed), another is forked after the next command, not in a loop.
                self.taken()
            conn = self.running.pop(pid, None)
            if conn is None:
                continue
            with contextlib.suppress(KeyError):  # not watched where it hung up already
                self.poller.unregister(conn)
            if os.WIFEXITED(status) and os.WEXITSTATUS(status) in (REFUSED, STALE):
                self.leaving |= os.WEXITSTATUS(status) == STALE
                conn.close()  # nothing ran: the client has its "F", or runs it itself at EOF
                continue
            self.last = time.monotonic()  # a command has run (or died of a signal)
            report(conn, status)
            self.fork_ahead()  # where the bound held it back

    def ours(self) -> bool:
        try:
            return os.stat(self.path).st_ino == self.inode
        except OSError:
            return False

    def loop(self) -> None:
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "leaving", True))
        self.poller.register(self.listener, select.POLLIN)
        self.poller.register(self.wake_r, select.POLLIN)
        self.poller.register(self.control, select.POLLIN)
        gc.disable()
        gc.freeze()  # the runners share the server's objects: no collection copies their pages
        limit = idle_limit()
        self.fork_ahead()
        while not (self.leaving and not self.running):
            for fd, _events in self.poller.poll(CHECK * 1000):
                if fd == self.listener.fileno():
                    if not self.leaving:
                        self.accept()
                elif fd == self.wake_r:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_r, 4096)
                elif fd == self.control.fileno():
                    self.learn()
                elif self.ahead is not None and fd == self.ahead[1].fileno():
                    self.taken()
                else:  # a running command's client
                    self.hang_up(fd)
            self.reap()
            # Idle: no command running, none run for ``limit`` seconds (a server that only
            # refuses, one of an environment no longer used, leaves).
            if (not self.running and time.monotonic() - self.last > limit) or not self.ours():
                self.leaving = True
            if self.leaving:
                self.shutdown()

    def learn(self) -> None:
        """The pages the runners' commands wrote (``cmdpages``)."""
        while True:
            try:
                msg = self.control.recv(8 * HOT_MAX)
            except OSError:
                return
            self.hot.update(array.array("Q", msg[: len(msg) // 8 * 8]))
            self.taught += 1

    def hang_up(self, fd: int) -> None:
        """A running command's client has gone: hang up on the command, as a terminal does."""
        for pid, conn in self.running.items():
            if conn.fileno() == fd:
                self.poller.unregister(fd)
                os.kill(pid, signal.SIGHUP)
                return

    def shutdown(self) -> None:
        """Take the socket away; the commands running end as they would (the loop waits)."""
        if self.ahead is not None:  # the runner forked ahead leaves, having run nothing,
            self.taken()  # once the server has what it took
        if self.ahead is not None:
            self.poller.unregister(self.ahead[1])
            self.ahead[1].close()
            self.ahead = None
        if self.listener.fileno() < 0:
            return
        with contextlib.suppress(KeyError):  # the runner ahead's, if one waited
            self.poller.unregister(self.listener)
        if self.ours():
            try:
                os.unlink(self.path)
            except OSError:
                pass
        self.listener.close()  # the clients still queued find it closed and run their commands themselves


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: cmdserver SOCKET (started by the commands' client)\n")
        return 2
    Server(args[0]).loop()
    return 0
