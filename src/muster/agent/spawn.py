"""Becoming the user: the one place where a forked child turns into a job's process.

The batch script (``launcher``: forked by the job's monitor) and each task of a job step
(``steps``: forked by the agent) both call ``become(spec, report_fd)`` in the fresh child,
which never returns. It does, in this order, and nothing else:

1. closes ``close_first`` (descriptors of the parent's that the child must not hold);
2. ``setsid()``: the child leads its own session and process group (pid = pgid = sid), so
   that signals reach the whole job and the agent's own signals never do; with
   ``terminal`` (``srun --pty``) it then takes that terminal as its controlling one; with
   ``identity`` (an emulated node's, ``agent.nodeident``) it enters namespaces of its own
   where the host name and /etc/hosts are the node's; with ``private_dirs`` a mount
   namespace where /tmp is the job's (``agent.jobcontainer``); before that it joins the
   cgroups of ``cgroup_procs`` (``agent.cgroupfs``), so that all it forks is born confined
   and tracked; with ``hide`` (a container task) a mount namespace where those paths are
   empty (``agent.containers``);
3. ``setgroups``, ``setgid``, ``setuid`` when ``groups`` is set (the agent is root and the
   user is another); from here on it cannot regain root, except with ``exec_as_root`` (a
   container task: the OCI runtime runs as root and makes the user's process), where the
   saved ids stay root's and root is taken back just before exec;
4. ``umask`` when one is given, the submit shell's soft resource limits (``rlimits``,
   planned by ``agent.rlimits`` within the node's hard limits: one that fails anyway is
   left as the node's, never a launch failure), and ``chdir(cwd)`` as the user: a
   directory the user cannot enter is refused or, with ``cwd_fallback``, replaced by that
   one after Slurm's warning (``slurmstepd: error: couldn't chdir to ...``) on ``warn_fd``;
5. creates the missing directories of ``make_dirs``, then opens stdin, stdout and stderr
   (``Stream``: a descriptor the agent prepared, a file, or stdout's), all *as the user*: the
   user cannot make root create or truncate a file they could not write themselves;
6. the ``dup2``s onto 0/1/2, closing the originals and ``close_after``; default dispositions
   for the signals in ``reset`` (an ignored disposition survives exec: see
   ``ignored_signals``), an empty signal mask and, when ``cpus`` are given, the pinning to
   them (``agent.affinity``; ``bind_note`` then says so on stderr);
7. ``execve`` (``execvpe`` with ``search_path``), with ``SLURM_TASK_PID`` set to its pid.

A failure before exec is written to ``report_fd`` (a close-on-exec pipe: it closes with
nothing written when exec succeeds) as one line ``fault|step: detail`` and the child exits
with ``failure_exit`` (or, when that is None, the errno, as Slurm's tasks do). ``fault``
says whose fault it is: ``JOB_FAULT`` for the job's own paths (working directory, output
directories and files, a command that is not the agent's own spooled script) unless the
error says the node's file system is broken (``NODE_ERRNOS``), ``NODE_FAULT`` otherwise.
``failure(message)`` reads that line back. The steps' names in the line come from the
caller's ``Wording``.
"""

from __future__ import annotations

import _signal
import errno
import fcntl
import os
import resource
import signal
import termios
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from muster.agent import affinity, containers, jobcontainer, nodeident, taskprolog

__all__ = [
    "JOB_FAULT",
    "NODE_FAULT",
    "ChildSpec",
    "Stream",
    "Wording",
    "become",
    "failure",
    "ignored_signals",
    "parse_umask",
]

NODE_FAULT = "node"  # the node cannot launch (its spool, its users, a spawn error): drain it
JOB_FAULT = "job"  # the job's own (its directories, its files, its command): the job fails

OPEN_MODE = 0o644  # the umask applies on top, as for any file the user creates

# Errors that say the node's file system is broken, whatever path the job named: a job on
# another node would not meet them.
NODE_ERRNOS = frozenset(
    {
        errno.EIO,
        errno.ESTALE,
        errno.ENOTCONN,
        errno.EROFS,
        errno.ENOSPC,
        errno.ENOMEM,
        errno.EAGAIN,
        errno.EMFILE,
        errno.ENFILE,
    }
)


@dataclass(frozen=True, slots=True)
class Wording:
    """How the failing step is named in the report (``str.format`` templates)."""

    session: str  # setsid
    identity: str  # setgroups/setgid/setuid: {uid}, {gid}
    chdir: str  # {cwd}
    stdio: str  # the dup2s
    exec: str  # {exe}


@dataclass(frozen=True, slots=True)
class Stream:
    """What one of fd 0, 1 and 2 becomes: ``fd`` (a pipe's end or a terminal the agent
    opened), else the file ``path`` opened as the user with ``flags`` (``label`` names that
    step), or, with ``same``, whatever stdout became."""

    fd: int = -1
    path: str = ""
    flags: int = os.O_RDONLY
    label: str = ""
    same: bool = False


@dataclass(frozen=True, slots=True)
class ChildSpec:
    """Everything ``become`` needs, computed by the caller before the fork."""

    exe: str
    argv: list[str]
    env: dict[str, str]
    uid: int
    gid: int
    groups: list[int] | None  # None: keep the agent's identity
    umask: int | None
    cwd: str
    stdin: Stream
    stdout: Stream
    stderr: Stream
    words: Wording
    reset: Sequence[signal.Signals] = ()  # back to their default dispositions
    cpus: Sequence[int] | None = None
    bind_note: Callable[[int], str] | None = None  # stderr line once pinned, given the pid
    cwd_fallback: str | None = None  # None: a working directory it cannot enter fails
    warn_fd: int = 2  # where the fallback's warning goes
    make_dirs: tuple[str, ...] = ()  # create the missing directories of these paths
    terminal: int | None = None  # become this terminal's session leader (srun --pty)
    close_first: tuple[int, ...] = ()
    close_after: tuple[int, ...] = ()
    search_path: bool = False  # execvpe (the env's PATH) rather than execve
    exec_own: bool = True  # a failing exec is the job's fault (not the agent's own script)
    failure_exit: int | None = 127  # None: the errno
    identity: nodeident.NodeIdentity | None = None  # an emulated node's host name (as root)
    cgroup_procs: tuple[str, ...] = ()  # cgroup.procs files to join, as root (``agent.cgroupfs``)
    rlimits: tuple[tuple[int, int, int], ...] = ()  # (resource, soft, hard) to set (``agent.rlimits``)
    private_dirs: tuple[tuple[str, str], ...] = ()  # the job's private /tmp (``agent.jobcontainer``), as root
    task_prologs: tuple[str, ...] = ()  # TaskProlog, srun --task-prolog: run before exec (``agent.taskprolog``)
    task_epilogs: tuple[str, ...] = ()  # srun --task-epilog, TaskEpilog: run once the task ended (``agent.stepd``)
    # A container task (``agent.containers``): the OCI runtime is exec'd as root (it makes the
    # container, whose process is the user's); the user's identity is taken only for the
    # working directory and the stdio files, and given back before exec.
    exec_as_root: bool = False
    hide: tuple[str, ...] = ()  # paths the runtime must not see (``containers.hide``), as root


def ignored_signals() -> list[signal.Signals]:
    """Signals this process ignores (Python ignores SIGPIPE and SIGXFSZ; ``nohup`` adds
    SIGHUP): an ignored disposition survives exec, and a job must not inherit it."""
    out = []
    for num in _signal.valid_signals():  # ints: signal's own wrapper makes an enum of each (~0.1 ms)
        try:
            if _signal.getsignal(num) == _signal.SIG_IGN:
                out.append(_as_signal(num))
        except (OSError, ValueError):
            continue
    return out


def _as_signal(num: int) -> signal.Signals:
    try:
        return signal.Signals(num)
    except ValueError:  # a real-time signal has no name
        return num  # type: ignore[return-value]


def parse_umask(text: object) -> int | None:
    """An octal umask (``SLURM_UMASK``, srun's), or None when absent or not one."""
    if text is None or text == "":
        return None
    try:
        value = int(str(text), 8)
    except ValueError:
        return None
    return value if 0 <= value <= 0o777 else None


def _join(procs: str) -> None:
    """Move this process into a cgroup (``0``: the writer), before it may fork."""
    fd = os.open(procs, os.O_WRONLY)
    try:
        os.write(fd, b"0")
    finally:
        os.close(fd)


def failure(message: bytes) -> tuple[str, str] | None:
    """What a child reported before dying: (fault, "step: detail"); None when it said
    nothing (exec succeeded)."""
    if not message:
        return None
    fault, _, text = message.decode(errors="replace").partition("|")
    return (fault if fault in (NODE_FAULT, JOB_FAULT) else NODE_FAULT), text


def become(spec: ChildSpec, report_fd: int) -> NoReturn:
    """In the forked child: become the user's process, or report why not and exit."""
    words = spec.words
    step = "starting"
    own = False  # whether the step works on the job's own paths
    try:
        for fd in spec.close_first:
            os.close(fd)
        step = words.session
        os.setsid()
        for path in spec.cgroup_procs:
            step = f"joining the cgroup {os.path.dirname(path)}"
            _join(path)
        if spec.terminal is not None:
            step = "taking the terminal"
            fcntl.ioctl(spec.terminal, termios.TIOCSCTTY, 0)
        if spec.identity is not None:
            step = f"taking the host name {spec.identity.hostname}"
            nodeident.enter(spec.identity)
        if spec.private_dirs:
            step = "making the job's private directories"
            jobcontainer.enter(spec.private_dirs)
        if spec.hide:
            step = "preparing the container runtime's namespace"
            containers.hide(spec.hide)
        if spec.groups is not None:
            step = words.identity.format(uid=spec.uid, gid=spec.gid)
            os.setgroups(spec.groups)
            if spec.exec_as_root:  # the saved ids stay root's, to be taken back before exec
                os.setresgid(spec.gid, spec.gid, 0)
                os.setresuid(spec.uid, spec.uid, 0)
            else:
                os.setgid(spec.gid)
                os.setuid(spec.uid)
        if spec.umask is not None:
            os.umask(spec.umask)
        for number, soft, hard in spec.rlimits:
            try:
                resource.setrlimit(number, (soft, hard))
            except (OSError, ValueError):
                pass  # the node's limit stays (the agent logged what it could not give)
        own = True
        step = words.chdir.format(cwd=spec.cwd)
        try:
            os.chdir(spec.cwd)
        except OSError as e:
            if spec.cwd_fallback is None:
                raise
            os.write(
                spec.warn_fd,
                (
                    f"slurmstepd: error: couldn't chdir to `{spec.cwd}': {e.strerror}: "
                    f"going to {spec.cwd_fallback} instead\n"
                ).encode(),
            )
            os.chdir(spec.cwd_fallback)
        for path in spec.make_dirs:
            # Missing directories of the output files are made, as the user (tools such
            # as submitit and dask-jobqueue name a log folder that may not exist yet).
            step = f"creating the directory of {path}"
            os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
        fds: list[int] = []
        for stream in (spec.stdin, spec.stdout, spec.stderr):
            if stream.same:
                fds.append(fds[1])
            elif stream.fd >= 0:
                fds.append(stream.fd)
            else:
                step = stream.label
                fds.append(os.open(stream.path, stream.flags, OPEN_MODE))
        own = False
        step = words.stdio
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in {*fds, *spec.close_after}:
            if fd > 2:
                os.close(fd)
        for sig in spec.reset:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        env = dict(spec.env)
        env["SLURM_TASK_PID"] = str(os.getpid())
        for program in spec.task_prologs:
            step = f"running the task prolog {program}"
            env = taskprolog.run(program, env)
        if affinity.apply(spec.cpus) and spec.bind_note is not None:
            os.write(2, spec.bind_note(os.getpid()).encode())
        if spec.exec_as_root and spec.groups is not None:
            step = "taking root back for the container runtime"
            os.setresuid(0, 0, 0)
            os.setresgid(0, 0, 0)
            os.setgroups([0])
        step = words.exec.format(exe=spec.exe)
        own = spec.exec_own
        if spec.search_path:
            os.execvpe(spec.exe, spec.argv, env)
        else:
            os.execve(spec.exe, spec.argv, env)
    except BaseException as exc:  # noqa: B036 - the child must never return to the agent
        code = spec.failure_exit
        try:
            if isinstance(exc, OSError):
                detail = exc.strerror or str(exc)
                if code is None:
                    code = exc.errno or 1
            else:
                detail = str(exc)
            broken = isinstance(exc, OSError) and exc.errno in NODE_ERRNOS
            fault = JOB_FAULT if own and not broken else NODE_FAULT
            os.write(report_fd, f"{fault}|{step}: {detail}".encode(errors="replace")[:4000])
        finally:
            os._exit(code if code is not None and 0 < code < 256 else 1)
    os._exit(1)  # unreachable: exec does not return
