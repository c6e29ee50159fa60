"""Start a batch script as its user: spool the script, fork, drop privileges, exec.

``prepare(job, ...)`` (in the agent, as root) checks the user, writes the script into the
job's spool directory and returns a ``LaunchPlan``. ``start(plan, spawner)`` has the job's
*monitor* (``agent.monitor``) forked, by the agent's small spawner process (``agent.zygote``:
a fork of the large agent costs several ms of CPU) or by the agent itself. The monitor forks
the job and outlives the agent if need be (slurmstepd's role in Slurm): it leads a session
of its own, ignores the agent's signals, holds none of its files, is the child subreaper of
the job's processes (an orphan of the job becomes the monitor's child, not init's, so
``Started.alone`` tells with one read whether the job left anything behind, and orphans that
end while the job runs are reaped), waits for the job's end without reaping it
(``waitid(WNOWAIT)``), writes the raw wait status
to the job's exit file (``StateDir.exit_path``, for an agent that restarted meanwhile) and to
a pipe the agent reads, and reaps the job only when the agent lets it (closing the release
pipe; an agent that died closes it too). While the agent runs, a finished job therefore stays
a zombie until the agent has swept its leftovers, so its pid, group and session cannot be
reused meanwhile. The job, forked by the monitor, becomes the user's script through
``agent.spawn`` (its one become-the-user sequence) with the batch script's choices:

* a working directory the user cannot enter is refused (the job's fault);
* missing directories of the output files are created, as the user; stdin is a file
  (``/dev/null`` by default), stdout and stderr files opened ``O_APPEND`` (truncated first
  unless appending), stderr sharing stdout's descriptor when both name one file;
* default dispositions for every signal the agent ignores and for those the monitor
  ignores (SIGTERM, SIGINT, SIGHUP); the pinning to the plan's CPUs (``agent.affinity``);
* ``execve`` of the script itself, so the kernel honours its ``#!`` line (a script without
  one is run by ``/bin/sh``, as ``execvp`` would), or of the resolved ``--wrap`` command.

Any failure in the job before exec is written, as one line naming the step and whose fault
it is, to a close-on-exec pipe and the job exits 127; the agent reads the pipe until it
closes (exec succeeded: nothing was written) and raises ``LaunchError`` with that line. The
agent waits without blocking its event loop (``Started.status``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import signal
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from muster.agent import monitor, nodeident, rlimits, spawn
from muster.agent.pipes import read_pipe
from muster.agent.spawn import JOB_FAULT, NODE_FAULT
from muster.agent.zygote import Zygote
from muster.core import outputs

__all__ = [
    "JOB_FAULT",
    "NODE_FAULT",
    "PROLOG_FAULT",
    "STALE",
    "LaunchError",
    "LaunchPlan",
    "Started",
    "append_to_output",
    "prepare",
    "start",
]

SCRIPT_NAME = "slurm_script"
EXEC_TIMEOUT = 30.0  # a child that neither execs nor fails by then is killed

# Whose fault a failed launch is: ``NODE_FAULT`` and ``JOB_FAULT`` (``agent.spawn`` tells
# them apart for the child's own steps), and two outcomes decided before any fork.
STALE = "stale"  # the launch conflicts with what runs here (an older attempt, a cancel)
PROLOG_FAULT = "prolog"  # the site's Prolog failed: drain the node, requeue the job held


class LaunchError(Exception):
    """The batch script could not be started; ``str()`` says what and why, ``fault`` whose
    fault it is (``NODE_FAULT``, the default, or ``JOB_FAULT``)."""

    def __init__(self, message: str, fault: str = NODE_FAULT) -> None:
        super().__init__(message)
        self.fault = fault


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
    exit_path: str = ""  # where the monitor leaves the exit status (``StateDir.exit_path``)
    node: str = ""
    cgroup_procs: tuple[str, ...] = ()  # the job's cgroups the script joins (``agent.cgroupfs``)
    rlimits: tuple[tuple[int, int, int], ...] = ()  # the submit shell's limits (``agent.rlimits``)
    private_dirs: tuple[tuple[str, str], ...] = ()  # the job's private /tmp (``agent.jobcontainer``)
    # sbatch --container / --container-image: ``exe`` is the OCI runtime, exec'd as root,
    # which runs the script in its container (``agent.containers``)
    container: bool = False
    hide: tuple[str, ...] = ()  # what the runtime must not see (``containers.hide``)


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
        raise LaunchError(f"musterd runs as uid {me} and cannot start a job of uid {uid} (run it as root)")
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
        raise LaunchError("the job has neither a batch script nor a command to run", JOB_FAULT)

    restarts = int(job.get("restart_count") or 0)
    append = spec.get("open_mode") == "append" or restarts > 0
    umask = spawn.parse_umask(env.get("SLURM_UMASK"))
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
        node=node,
        rlimits=rlimits.plan(spec.get("rlimits"), f"job {job['job_id']}"),
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
        raise LaunchError(f"{name}: command not found", JOB_FAULT)
    return found


def append_to_output(path: str, uid: int, text: str) -> None:
    """Add a line of the agent's to a job's output file without trusting its path: only to
    an existing regular file that the job's user owns, never following a symlink."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_uid == uid:
            os.write(fd, text.encode())
    except OSError:
        pass
    finally:
        os.close(fd)


# --- the fork --------------------------------------------------------------------------


class Started:
    """A started batch script: its pid, and the monitor that holds its exit status.

    The monitor (see the module docstring) is this agent's child; the script is the
    monitor's. ``status()`` waits for the script's raw wait status (the script is then a
    zombie: its pid, group and session are still reserved, so leftovers can be swept
    safely); ``release()`` lets the monitor reap it and exit."""

    def __init__(self, pid: int, monitor: int, status_fd: int, release_fd: int, subreaper: bool = False) -> None:
        self.pid = pid
        self.monitor = monitor
        # The monitor is the child subreaper of the script's processes: whatever the script
        # leaves behind (a daemon that double-forked and setsid-ed away included) becomes
        # the monitor's child when its parent dies, never init's.
        self.subreaper = subreaper
        self._status_fd = status_fd
        self._release_fd = release_fd
        self._read = b""
        # After release: the script's resource use (``getrusage`` of it and the children
        # it waited for): {"max_rss_kb", "user_cpu", "system_cpu"}; None if unknown.
        self.usage: dict[str, float] | None = None

    async def status(self) -> int | None:
        """The script's raw wait status; None if the monitor died without one."""
        self._read = await read_pipe(self._status_fd, line=True, close=False)
        try:
            return int(self._read.split(b"\n", 1)[0].decode())
        except ValueError:
            return None

    def alone(self) -> bool:
        """Whether the ended script left no process behind: the monitor, its processes'
        subreaper, has no child but the script (a zombie until released). One small read
        instead of a walk over ``/proc``; False whenever that cannot be told."""
        if not self.subreaper:
            return False
        try:
            with open(f"/proc/{self.monitor}/task/{self.monitor}/children", "rb") as f:
                return f.read().split() == [str(self.pid).encode()]
        except OSError:  # no CONFIG_PROC_CHILDREN, or the monitor is gone
            return False

    async def release(self) -> None:
        """Let the monitor reap the script and exit (telling its resource use), and reap it.
        The agent's loop goes on meanwhile (the monitor may still be syncing the exit file)."""
        if self._release_fd >= 0:
            os.close(self._release_fd)
            self._release_fd = -1
        if self._status_fd >= 0:
            fd, self._status_fd = self._status_fd, -1
            self.usage = _parse_usage(self._read + await read_pipe(fd))
        _reap_soon(self.monitor)  # it exits right after closing the pipe


def _fork(plan: LaunchPlan, spawner: Zygote | None) -> tuple[int, int, int, int, int]:
    """Have the monitor forked (by the spawner when there is one that takes it, else here),
    which forks the job. Returns (the monitor's pid when forked here, else 0; read end of
    the pipe that brings the job's and the monitor's pids, read end of the job's error pipe,
    read end of the monitor's status pipe, write end of the release pipe)."""
    err_r, err_w = os.pipe()  # all close-on-exec
    st_r, st_w = os.pipe()
    rel_r, rel_w = os.pipe()
    pid_r, pid_w = os.pipe()
    fds = (err_w, st_w, rel_r, pid_w)
    here = 0
    if spawner is None or not spawner.send(plan.exit_path, _job_spec(plan, close_first=()), fds):
        monitor.prctl()
        job = _job_spec(plan, close_first=(pid_w, st_w, rel_r))  # those are the monitor's
        here = os.fork()
        if here == 0:  # the monitor: never returns
            try:
                monitor.run(plan.exit_path, job, *fds)
            finally:
                os._exit(1)
    for fd in fds:
        os.close(fd)
    return here, pid_r, err_r, st_r, rel_w


def _job_spec(plan: LaunchPlan, close_first: tuple[int, ...]) -> spawn.ChildSpec:
    """How the monitor's child becomes the batch script (see the module docstring)."""
    # Always O_APPEND (truncating first unless appending): every writer, including the
    # agent's own "CANCELLED" line, then adds at the end instead of overwriting.
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if plan.append else os.O_TRUNC)
    stdout = spawn.Stream(path=plan.stdout, flags=flags, label=f"opening the output file {plan.stdout}")
    if plan.stderr == plan.stdout:
        stderr = spawn.Stream(same=True)
    else:
        stderr = spawn.Stream(path=plan.stderr, flags=flags, label=f"opening the error file {plan.stderr}")
    return spawn.ChildSpec(
        exe=plan.exe,
        argv=plan.argv,
        env=plan.env,
        uid=plan.uid,
        gid=plan.gid,
        groups=plan.groups,
        umask=plan.umask,
        cwd=plan.workdir,
        stdin=spawn.Stream(path=plan.stdin, flags=os.O_RDONLY, label=f"opening stdin {plan.stdin}"),
        stdout=stdout,
        stderr=stderr,
        words=BATCH_WORDS,
        # The monitor ignores these too (see ``_monitor``): the script must not.
        reset=_batch_reset(),
        cpus=plan.cpus,
        make_dirs=tuple(dict.fromkeys((plan.stdout, plan.stderr))),
        close_first=close_first,
        # not our script, nor the node's runtime: a failing exec is the job's fault
        exec_own=not (plan.container or (plan.spool and plan.exe.startswith(plan.spool + os.sep))),
        failure_exit=127,
        identity=nodeident.for_node(plan.node),
        cgroup_procs=plan.cgroup_procs,
        rlimits=plan.rlimits,
        private_dirs=plan.private_dirs,
        exec_as_root=plan.container,
        hide=plan.hide,
    )


_reset: list[signal.Signals] = []


def _batch_reset() -> list[signal.Signals]:
    """The signals a batch script gets back at their defaults: those the agent ignores
    (looked up once: walking every signal's disposition per launch costs) and those the
    monitor ignores."""
    if not _reset:
        _reset.extend(dict.fromkeys([*spawn.ignored_signals(), signal.SIGTERM, signal.SIGINT, signal.SIGHUP]))
    return _reset


BATCH_WORDS = spawn.Wording(
    session="creating a new session",
    identity="switching to uid {uid} gid {gid}",
    chdir="changing to the working directory {cwd}",
    stdio="setting up stdio",
    exec="executing {exe}",
)


def _reap_soon(pid: int) -> None:
    """Reap a monitor of the agent's own that is exiting, without waiting for it here (one
    the spawner forked is not the agent's child: the spawner reaps it)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return
    except ChildProcessError:
        return
    asyncio.get_running_loop().call_later(0.05, _reap_soon, pid)


def _parse_usage(data: bytes) -> dict[str, float] | None:
    lines = data.decode(errors="replace").splitlines()
    try:
        rss, user, system = lines[1].split()
        return {"max_rss_kb": int(rss), "user_cpu": float(user), "system_cpu": float(system)}
    except (IndexError, ValueError):
        return None


async def start(plan: LaunchPlan, spawner: Zygote | None = None) -> Started:
    """Fork the monitor and the job; return once the script runs. Raises ``LaunchError``."""
    here, pid_r, err_r, st_r, rel_w = _fork(plan, spawner)
    try:
        said = (await read_pipe(pid_r)).decode().split()
        pid, subreaper, mon = int(said[0]), said[1] == "1", int(said[2])
    except (ValueError, IndexError):
        for fd in (err_r, st_r, rel_w):
            os.close(fd)
        if here:
            os.waitpid(here, 0)
        raise LaunchError("the job's monitor failed before starting it") from None
    started = Started(pid, mon, st_r, rel_w, subreaper)
    try:
        message = await asyncio.wait_for(read_pipe(err_r), EXEC_TIMEOUT)
    except TimeoutError:
        os.kill(pid, signal.SIGKILL)
        await started.release()
        raise LaunchError(f"the job did not start within {EXEC_TIMEOUT:.0f}s (stuck opening files?)") from None
    failed = spawn.failure(message)
    if failed is not None:
        await started.status()  # it exits 127 right after writing
        await started.release()
        if plan.exit_path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(plan.exit_path)
        fault, text = failed
        raise LaunchError(text, fault)
    return started
