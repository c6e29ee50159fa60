"""Start a batch script as its user: spool the script, fork, drop privileges, exec.

``prepare(job, ...)`` (in the agent, as root) checks the user, writes the script into the
job's spool directory and returns a ``LaunchPlan``. ``start(plan)`` forks; the child does, in
this order, and nothing else:

1. ``setsid()``: the job leads its own session and process group (pid = pgid = sid), so
   that signals reach the whole job and the agent's own signals never do;
2. ``setgroups(getgrouplist(user))``, ``setgid``, ``setuid`` (only when the agent is root and
   the job's uid differs from the agent's); from here on it cannot regain root;
3. ``umask`` from ``SLURM_UMASK`` when sbatch captured one, and ``chdir(workdir)`` (as the
   user: a directory the user cannot enter is refused);
4. creates missing directories of the output files, then opens stdin, stdout and stderr
   (absolute paths), all *as the user*: the user cannot make root create or truncate a
   file they could not write themselves;
5. the ``dup2``s onto 0/1/2, default dispositions for every signal the agent ignores
   (SIGPIPE and SIGXFSZ by Python, SIGHUP under nohup), an empty signal mask and, when the
   plan names CPUs (``agent.affinity``), the pinning to them;
6. ``execve`` of the script itself, so the kernel honours its ``#!`` line (a script without
   one is run by ``/bin/sh``, as ``execvp`` would), with ``SLURM_TASK_PID`` set to its pid.

Any failure in the child is written, as one line naming the step, to a close-on-exec pipe
and the child exits 127; the parent reads the pipe until it closes (exec succeeded: nothing
was written) and raises ``LaunchError`` with that line. The parent waits for the child
without blocking the event loop.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from muster.agent import affinity
from muster.core import outputs

__all__ = ["LaunchError", "LaunchPlan", "prepare", "start", "start_blocking"]

SCRIPT_NAME = "slurm_script"
EXEC_TIMEOUT = 30.0  # a child that neither execs nor fails by then is killed
_OPEN_MODE = 0o644  # the umask applies on top, as for any file the user creates


class LaunchError(Exception):
    """The batch script could not be started; ``str()`` says what and why."""


@dataclass(slots=True)
class LaunchPlan:
    job_id: int
    uid: int
    gid: int
    groups: list[int] | None  # None: keep the agent's identity
    exe: str
    argv: list[str]
    env: dict[str, str]
    workdir: str
    stdin: str
    stdout: str
    stderr: str
    append: bool
    umask: int | None = None
    spool: str = ""
    cpus: list[int] | None = None  # the job's CPUs on this node, when it is pinned to them


def user_entry(job: Mapping[str, Any]) -> pwd.struct_passwd:
    uid = job.get("uid")
    try:
        if uid is not None:
            return pwd.getpwuid(int(uid))
        return pwd.getpwnam(str(job["user"]))
    except (KeyError, ValueError):
        who = uid if uid is not None else job.get("user")
        raise LaunchError(f"user {who} is unknown on this node") from None


def prepare(
    job: Mapping[str, Any],
    env: dict[str, str],
    spool: str,
    node: str,
    node_index: int = 0,
) -> LaunchPlan:
    """Resolve the user, write the script, compute paths. Raises ``LaunchError``."""
    spec: Mapping[str, Any] = job.get("spec") or {}
    entry = user_entry(job)
    uid = entry.pw_uid
    gid = int(job.get("gid", entry.pw_gid))
    me = os.geteuid()
    if uid != me and me != 0:
        raise LaunchError(
            f"musterd runs as uid {me} and cannot start a job of uid {uid} (run it as root)"
        )
    groups: list[int] | None = None
    if me == 0:
        try:
            groups = os.getgrouplist(entry.pw_name, gid)
        except OSError as exc:
            raise LaunchError(f"cannot list the groups of user {entry.pw_name}: {exc}") from None

    workdir = str(spec.get("workdir") or entry.pw_dir or "/")
    stdout, stderr = outputs.output_paths(job, node, node_index)
    stdin = spec.get("stdin")
    stdin_path = os.path.normpath(os.path.join(workdir, stdin)) if stdin else os.devnull
    script = spec.get("script")
    user_argv = [str(a) for a in spec.get("argv") or []]
    if script:
        path = _spool_script(spool, str(script), uid, gid, chown=me == 0)
        if str(script).startswith("#!"):
            exe, argv = path, [path, *user_argv]
        else:
            exe, argv = "/bin/sh", ["/bin/sh", path, *user_argv]
    elif user_argv:
        exe = _which(user_argv[0], env.get("PATH", ""))
        argv = user_argv
    else:
        raise LaunchError("the job has neither a batch script nor a command to run")

    restarts = int(job.get("restart_count") or 0)
    append = spec.get("open_mode") == "append" or restarts > 0
    umask = _parse_umask(env.get("SLURM_UMASK"))
    return LaunchPlan(
        job_id=int(job["job_id"]),
        uid=uid,
        gid=gid,
        groups=groups,
        exe=exe,
        argv=argv,
        env=env,
        workdir=workdir,
        stdin=stdin_path,
        stdout=stdout,
        stderr=stderr,
        append=append,
        umask=umask,
        spool=spool,
    )


def _spool_script(spool: str, script: str, uid: int, gid: int, chown: bool) -> str:
    """Write the script into a fresh spool directory the user owns (0700, script 0500).

    The directory stays root's until the script is in place, so the user never gets to
    race root inside it."""
    if os.path.lexists(spool):
        shutil.rmtree(spool, ignore_errors=True)
    try:
        os.mkdir(spool, 0o700)
        path = os.path.join(spool, SCRIPT_NAME)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o700)
        with os.fdopen(fd, "w") as f:
            f.write(script)
            if chown:
                os.fchown(f.fileno(), uid, gid)
            os.fchmod(f.fileno(), 0o500)
        if chown:
            os.chown(spool, uid, gid)
    except OSError as exc:
        raise LaunchError(f"cannot write the batch script into {spool}: {exc}") from None
    return path


def _which(name: str, path: str) -> str:
    if "/" in name:
        return name
    found = shutil.which(name, path=path or None)
    if found is None:
        raise LaunchError(f"{name}: command not found")
    return found


def _parse_umask(text: str | None) -> int | None:
    if not text:
        return None
    try:
        value = int(text, 8)
    except ValueError:
        return None
    return value if 0 <= value <= 0o777 else None


# --- the fork --------------------------------------------------------------------------


def _ignored_signals() -> list[signal.Signals]:
    """Signals this process ignores (Python ignores SIGPIPE and SIGXFSZ; ``nohup`` adds
    SIGHUP): an ignored disposition survives exec, and the job must not inherit it."""
    out = []
    for sig in signal.valid_signals():
        try:
            if signal.getsignal(sig) == signal.SIG_IGN:
                out.append(sig)
        except (OSError, ValueError):
            continue
    return out


def _fork(plan: LaunchPlan) -> tuple[int, int]:
    """Fork the child; return (pid, read end of its error pipe)."""
    ignored = _ignored_signals()
    env_items = dict(plan.env)
    read_fd, write_fd = os.pipe()  # both close-on-exec
    pid = os.fork()
    if pid == 0:  # child: never returns
        step = "starting"
        try:
            os.close(read_fd)
            step = "creating a new session"
            os.setsid()
            if plan.groups is not None:
                step = f"switching to uid {plan.uid} gid {plan.gid}"
                os.setgroups(plan.groups)
                os.setgid(plan.gid)
                os.setuid(plan.uid)
            if plan.umask is not None:
                os.umask(plan.umask)
            step = f"changing to the working directory {plan.workdir}"
            os.chdir(plan.workdir)
            for path in dict.fromkeys((plan.stdout, plan.stderr)):
                # Missing directories of the output files are made, as the user (tools such
                # as submitit and dask-jobqueue name a log folder that may not exist yet).
                step = f"creating the directory of {path}"
                os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
            step = f"opening stdin {plan.stdin}"
            fd_in = os.open(plan.stdin, os.O_RDONLY)
            # Always O_APPEND (truncating first unless appending): every writer, including
            # the agent's own "CANCELLED" line, then adds at the end instead of overwriting.
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if plan.append else os.O_TRUNC)
            step = f"opening the output file {plan.stdout}"
            fd_out = os.open(plan.stdout, flags, _OPEN_MODE)
            fd_err = fd_out
            if plan.stderr != plan.stdout:
                step = f"opening the error file {plan.stderr}"
                fd_err = os.open(plan.stderr, flags, _OPEN_MODE)
            step = "setting up stdio"
            os.dup2(fd_in, 0)
            os.dup2(fd_out, 1)
            os.dup2(fd_err, 2)
            for fd in {fd_in, fd_out, fd_err}:
                if fd > 2:
                    os.close(fd)
            for sig in ignored:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            affinity.apply(plan.cpus)
            env_items["SLURM_TASK_PID"] = str(os.getpid())
            step = f"executing {plan.exe}"
            os.execve(plan.exe, plan.argv, env_items)
        except BaseException as exc:  # noqa: B036 - the child must never return to the agent
            try:
                detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                os.write(write_fd, f"{step}: {detail}".encode(errors="replace")[:4000])
            finally:
                os._exit(127)
        os._exit(127)  # unreachable: execve does not return
    os.close(write_fd)
    return pid, read_fd


def _failed(pid: int, message: str) -> LaunchError:
    try:
        os.waitpid(pid, 0)  # the child exits 127 right after writing
    except ChildProcessError:
        pass
    return LaunchError(message)


async def start(plan: LaunchPlan) -> int:
    """Fork and exec the plan; return the pid once the script runs. Raises ``LaunchError``."""
    loop = asyncio.get_running_loop()
    pid, read_fd = _fork(plan)
    chunks: list[bytes] = []
    closed = loop.create_future()

    def readable() -> None:
        try:
            data = os.read(read_fd, 4096)
        except BlockingIOError:
            return
        if data:
            chunks.append(data)
        elif not closed.done():
            closed.set_result(None)

    os.set_blocking(read_fd, False)
    loop.add_reader(read_fd, readable)
    try:
        await asyncio.wait_for(closed, EXEC_TIMEOUT)
    except TimeoutError:
        os.kill(pid, signal.SIGKILL)
        raise _failed(pid, f"the job did not start within {EXEC_TIMEOUT:.0f}s (stuck opening files?)") from None
    finally:
        loop.remove_reader(read_fd)
        os.close(read_fd)
    if chunks:
        raise _failed(pid, b"".join(chunks).decode(errors="replace"))
    return pid


def start_blocking(plan: LaunchPlan) -> int:
    """``start`` for callers without an event loop (tests and tools)."""
    pid, read_fd = _fork(plan)
    with os.fdopen(read_fd, "rb") as f:
        data = f.read()
    if data:
        raise _failed(pid, data.decode(errors="replace"))
    return pid
