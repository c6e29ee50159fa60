"""A batch script's monitor, the process that forks it and outlives the agent if need be
(slurmstepd's role in Slurm; see ``launcher`` for the whole story).

``run`` is the monitor's whole life, in a freshly forked process (forked by the agent's
spawner, ``agent.zygote``, or by the agent itself): it leads a session of its own, ignores
the agent's signals, holds none of its files and is the child subreaper of the script's
processes; it forks the script (``spawn.become``), says the script's pid, its own and
whether it is the subreaper, waits for the script's end without reaping it (reaping the
script's orphans that end meanwhile), writes the raw wait status to the status pipe and to
the exit file, then reaps the script once the agent closes the release pipe and says its
resource use. This module imports little: the spawner that forks monitors stays small, so
that each fork copies little.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import signal

from muster.agent import spawn

__all__ = ["prctl", "raw_status", "run"]

_PR_SET_CHILD_SUBREAPER = 36
_prctl_fn: object = None


def prctl() -> object:
    """libc's ``prctl``, looked up once per process before any fork (never in a forked
    monitor); None where there is none."""
    global _prctl_fn
    if _prctl_fn is None:
        try:
            _prctl_fn = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            _prctl_fn = False
    return _prctl_fn or None


def run(exit_path: str, job_spec: spawn.ChildSpec, err_w: int, st_w: int, rel_r: int, pid_w: int) -> None:
    """The monitor (see the module docstring). Never returns."""
    gc.disable()  # a collection would touch, and so copy, every page of the forking process
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the spawner's reaper must not run here
    os.setsid()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    fn = prctl()
    subreaper = callable(fn) and fn(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    keep = {err_w, st_w, rel_r, pid_w}
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    low = 3
    for fd in sorted(keep):  # close_range(2) underneath: no walk over /proc/self/fd
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))
    job = os.fork()
    if job == 0:  # the job: never returns
        spawn.become(job_spec, err_w)
    os.close(err_w)
    os.write(pid_w, f"{job} {int(subreaper)} {os.getpid()}".encode())
    os.close(pid_w)
    status = raw_status(_wait_script(job))
    try:
        os.write(st_w, f"{status}\n".encode())  # first: the agent reports it at once
    except OSError:
        pass  # the agent is gone
    if exit_path:  # then for an agent that restarts before it has reported; no fsync:
        try:  # it must outlive the agent, not the machine (the job would not either)
            tmp = f"{exit_path}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.write(fd, f"{status}\n".encode())
            os.close(fd)
            os.rename(tmp, exit_path)
        except OSError:
            pass
    while True:  # the agent releases the script once it has swept its leftovers
        try:
            if not os.read(rel_r, 64):
                break
        except InterruptedError:
            continue
    _, _, usage = os.wait4(job, 0)  # the script and the children it waited for
    try:
        os.write(st_w, f"{usage.ru_maxrss} {usage.ru_utime:.3f} {usage.ru_stime:.3f}\n".encode())
    except OSError:
        pass
    os.close(st_w)
    os._exit(0)


def _wait_script(job: int) -> os.waitid_result:
    """Wait for the script's end without reaping it. The script's orphans, reparented to
    the monitor (its subreaper), that end meanwhile are reaped on the way, so a long job
    that leaves many behind does not fill the process table with zombies."""
    while True:
        info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
        if info is not None and info.si_pid == job:
            return info
        if info is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(info.si_pid, 0)


def raw_status(info: os.waitid_result) -> int:
    """``waitid``'s answer as the raw status ``waitpid`` would have given."""
    if info.si_code == os.CLD_EXITED:
        return (info.si_status & 0xFF) << 8
    core = 0x80 if info.si_code == os.CLD_DUMPED else 0
    return (info.si_status & 0x7F) | core
