"""The agent's spawner: a small process that forks the batch scripts' monitors.

Forking costs in proportion to the forking process's memory: the kernel copies its page
tables, and the child's exit (or exec) tears them down again. The agent holds tens of MB
(its web stack, TLS, its records), so a monitor forked from it per job, and the script the
monitor forks in turn, cost several ms of CPU each before the script even runs. The
spawner is a fresh interpreter that imports only ``agent.monitor`` (and ``agent.spawn``):
started once by the agent (``Zygote``, one per agent process however many nodes it hosts),
it receives each launch over a private ``SOCK_SEQPACKET`` socket pair (the monitor's
``ChildSpec``, pickled, with the four pipe ends the agent made, passed as descriptors)
and forks the monitor, which runs exactly as if the agent had forked it (``monitor.run``):
the agent talks to it through the same pipes and learns its pid from it. The spawner reaps
the monitors it forked; it exits when the agent's end of the socket closes (the agent
stopped or died), and the monitors then live on, as they would have anyway.

Nothing but the agent holds the other end of the socket (a socket pair, not a path), so
what arrives there is the agent's own; the agent falls back to forking a monitor itself
when the spawner cannot take a launch (gone, its socket full, a launch too big for one
message).
"""

from __future__ import annotations

import array
import dataclasses
import gc
import logging
import os
import pickle
import signal
import socket
import sys

from muster.agent import monitor

__all__ = ["Zygote", "main"]

log = logging.getLogger(__name__)

MAX_MESSAGE = 256 * 1024
MAX_FAILURES = 3
FDS = 4  # the job's error pipe, the status pipe, the release pipe, the pid pipe


class Zygote:
    """The agent's side: starts the spawner on first use, hands it launches."""

    _shared: Zygote | None = None

    @classmethod
    def shared(cls) -> Zygote:
        """The one spawner of this agent process."""
        if cls._shared is None:
            cls._shared = cls()
        return cls._shared

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self.pid = 0
        self.failures = 0  # after MAX_FAILURES, monitors are forked by the agent for good

    def start(self) -> None:
        """Start the spawner now rather than at the first launch (see ``send``)."""
        if self._sock is None and self.failures < MAX_FAILURES:
            try:
                self._start()
            except OSError as exc:
                self._failed(exc)

    def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setblocking(False)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, MAX_MESSAGE * 4)
        # The agent's import path, without its working directory (``-m`` put it first; a
        # root process must not import from a directory users may write to: ``-P``).
        here = os.getcwd()
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        paths = [package_root, *(p for p in sys.path if p and os.path.abspath(p) != here)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(dict.fromkeys(paths)))
        try:
            theirs.set_inheritable(True)
            argv = [sys.executable, "-P", "-m", "muster.agent.zygote", str(theirs.fileno())]
            self.pid = os.posix_spawn(sys.executable, argv, env)
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        return ours

    def send(self, exit_path: str, spec: object, fds: tuple[int, int, int, int]) -> bool:
        """Hand a launch to the spawner; False when it cannot take it: the caller forks the
        monitor itself. A spawner that is gone is started again at the next launch (given
        up after ``MAX_FAILURES``); launches it held unforked fail as the monitor's."""
        if self.failures >= MAX_FAILURES:
            return False
        try:
            data = pickle.dumps((exit_path, spec), protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError):
            return False
        if len(data) > MAX_MESSAGE:
            return False
        try:
            sock = self._sock or self._start()
            sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        except BlockingIOError:
            return False  # it is behind: this launch does not wait for it
        except OSError as exc:
            self._failed(exc)
            return False
        return True

    def _failed(self, exc: OSError) -> None:
        self.failures += 1
        log.warning(
            "the spawner process failed (%s): %s",
            exc,
            "started again at the next launch" if self.failures < MAX_FAILURES else "musterd forks monitors itself",
        )
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.pid = 0


def _reap_monitors(*_: object) -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(fd: int) -> None:
    """The spawner's loop on the socket ``fd``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # it goes when the agent does
    signal.signal(signal.SIGCHLD, _reap_monitors)
    monitor.prctl()  # looked up here, once, not in each monitor
    # No collections: one in a forked monitor or job would touch every object and so copy
    # the spawner's every page (what it allocates per launch holds no cycles).
    gc.freeze()
    gc.disable()
    sock = socket.socket(fileno=fd)
    size = socket.CMSG_LEN(FDS * array.array("i").itemsize)
    while True:
        # close-on-exec, as the agent made them: the job's error pipe must close at its exec
        data, ancdata, _flags, _addr = sock.recvmsg(MAX_MESSAGE, size, socket.MSG_CMSG_CLOEXEC)
        if not data:
            return  # the agent is gone
        fds = array.array("i")
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        if len(fds) != FDS:
            for extra in fds:
                os.close(extra)
            continue
        err_w, st_w, rel_r, pid_w = fds
        try:
            exit_path, spec = pickle.loads(data)
            spec = dataclasses.replace(spec, close_first=(pid_w, st_w, rel_r))  # the monitor's
            pid = os.fork()
        except Exception:  # noqa: BLE001 - the agent sees the pid pipe close and says so
            pid = -1
        if pid == 0:
            try:
                sock.close()
                monitor.run(exit_path, spec, err_w, st_w, rel_r, pid_w)
            finally:
                os._exit(1)
        for own in fds:
            os.close(own)


if __name__ == "__main__":
    main(int(sys.argv[1]))
