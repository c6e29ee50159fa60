"""What a step's launch asks of this node, planned per task before anything is forked.

srun's launch request (``agent.stepapi``) and the controller's grant give, for each task
here, a ``TaskPlan``: its command line, its environment (``agent.taskenv``), its working
directory and identity, and where its fd 0, 1 and 2 go (``Stdio``: a pipe to the agent, a
file opened as the user, srun's terminal, or nothing). ``child_spec`` turns a plan into the
recipe ``agent.spawn`` follows in the forked child. Nothing here forks or reads a clock;
``open_terminal`` is the one system call (a pseudo-terminal for ``srun --pty``).
``StepLaunchError`` is a refused launch: its message, HTTP status and code go to srun.
"""

from __future__ import annotations

import fcntl
import os
import struct
import termios
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from muster.agent import nodeident, rlimits, spawn
from muster.agent.affinity import CpuLedger, binding_env
from muster.agent.env import EnvContext
from muster.agent.localstep import Step
from muster.agent.taskenv import task_environment
from muster.core import outputs
from muster.core.cpubind import CpuBind, mask_text

__all__ = [
    "StepLaunchError",
    "Stdio",
    "TaskPlan",
    "child_spec",
    "open_terminal",
    "pin_tasks",
    "pty_size",
    "shares_files",
    "task_groups",
    "task_plans",
]


class StepLaunchError(Exception):
    def __init__(self, message: str, status: int = 400, code: str = "invalid") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(slots=True)
class Stdio:
    """Where one task's fd 0, 1 or 2 goes: a pipe to the agent, a file, or /dev/null."""

    mode: str  # "pipe", "file", "null", "same" (stderr to stdout's file), "pty" (srun --pty)
    path: str = ""
    flags: int = 0


@dataclass(slots=True)
class TaskPlan:
    task: int
    local: int
    argv: list[str]
    env: dict[str, str]
    cwd: str
    uid: int
    gid: int
    groups: list[int] | None
    umask: int | None
    stdin: Stdio
    stdout: Stdio
    stderr: Stdio
    node: str = ""
    cpus: tuple[int, ...] | None = None  # pinned to these (``--cpu-bind``, task/affinity)
    bind_verbose: bool = False
    pty_size: tuple[int, int] | None = None  # srun --pty: the terminal's rows and columns
    cgroup_procs: tuple[str, ...] = ()  # the step's cgroups, joined before exec (``agent.cgroupfs``)
    rlimits: tuple[tuple[int, int, int], ...] = ()  # srun's shell's limits (``agent.rlimits``)
    private_dirs: tuple[tuple[str, str], ...] = ()  # the job's private /tmp (``agent.jobcontainer``)
    container: bool = False  # argv runs the task's container as root (``agent.containers``)
    hide: tuple[str, ...] = ()  # what the container runtime must not see (``containers.hide``)
    task_prologs: tuple[str, ...] = ()  # TaskProlog, then srun --task-prolog (``agent.taskprolog``)
    task_epilogs: tuple[str, ...] = ()  # srun --task-epilog, then TaskEpilog (``agent.stepd``)


def task_plans(
    body: Mapping[str, Any],
    grant: Mapping[str, Any],
    node: str,
    *,
    argv: list[str],
    task_argv: Mapping[str, Any],
    env: dict[str, str],
    cwd: str,
    uid: int,
    gid: int,
    groups: list[int] | None,
    umask: int | None,
    ctx: EnvContext,
) -> list[TaskPlan]:
    """The plan of each task of the step on ``node``: its command line (``--multi-prog``
    gives one per task), environment (``agent.taskenv``), stdio and terminal."""
    index = list(grant["step"]["nodes"]).index(node)
    layout = grant["step"]
    launch = {
        "launch_host": body.get("launch_host"),
        "srun_port": body.get("srun_port"),
        "umask": body.get("umask"),
        "torch_env": body.get("torch_env", True) is not False,
        "preserve_env": body.get("preserve_env"),  # srun -E (taskenv keeps only counts)
        "het": body.get("het"),  # one component's part of a het step (cli.hetstep)
    }
    append = body.get("open_mode") == "append"
    limits = rlimits.plan(body.get("rlimits"), f"step {grant.get('job_id')}.{grant.get('step_id')}")
    plans = []
    for local, task in enumerate(layout["tasks"][index]):

        def expand(pattern: str, task: int = task) -> str:
            # The same resolver as the batch script's output (core.outputs).
            fields = outputs.fields_for_task(grant, node, index, task)
            return os.path.normpath(os.path.join(cwd, outputs.expand_pattern(pattern, fields)))

        stdout = stdio_for(
            body.get("stdout"), task, expand, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
        )
        stderr_spec = body.get("stderr")
        if not stderr_spec and stdout.mode == "file":
            stderr = Stdio("same")
        else:
            stderr = stdio_for(
                stderr_spec, task, expand, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
            )
        stdin = stdio_for(body.get("stdin"), task, expand, os.O_RDONLY, default="null")
        if body.get("pty"):  # srun --pty: task 0 in a terminal, the others' output dropped
            if task == 0:
                stdin = stdout = stderr = Stdio("pty")
            else:
                stdout, stderr = Stdio("null"), Stdio("same")
        own = task_argv.get(str(task))
        if own is not None and (not isinstance(own, list) or not own):
            raise StepLaunchError(f"malformed command line for task {task}")
        plans.append(
            TaskPlan(
                task=task,
                local=local,
                argv=argv if own is None else [str(a) for a in own],
                env=task_environment(env, grant, node, local, ctx, launch),
                cwd=cwd,
                uid=uid,
                gid=gid,
                groups=groups,
                umask=umask,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                node=node,
                pty_size=pty_size(body.get("pty_size")) if stdin.mode == "pty" else None,
                rlimits=limits,
            )
        )
    return plans


def task_groups(uid: int, gid: int) -> list[int]:
    """The groups a task of ``uid`` gets (an agent running as root): the user's, or only
    ``gid`` when the user is unknown here."""
    try:
        import pwd

        name = pwd.getpwuid(uid).pw_name
        return os.getgrouplist(name, gid)
    except (KeyError, OSError):
        return [gid]


def pin_tasks(
    ledger: CpuLedger,
    step: Step,
    plans: list[TaskPlan],
    grant: Mapping[str, Any],
    bind: CpuBind,
    bind_default: str,
    node: str,
) -> bool:
    """Choose each task's CPUs (when they are bound) among the job's CPUs on ``node``, in
    ``ledger``; True when the step now holds CPUs there (to release at its end)."""
    if not plans or (not bind.given and bind_default == "none"):
        return False
    job, layout = grant.get("job") or {}, grant["step"]
    per_task = int(layout.get("cpus_per_task") or 1)
    job_nodes, job_cpus = list(job.get("nodes") or []), list(job.get("cpus") or [])
    if node in job_nodes and len(job_cpus) == len(job_nodes):
        count = int(job_cpus[job_nodes.index(node)])
    else:
        count = per_task * len(plans)
    sets = ledger.step_cpus(step.job_id, step.step_id, count, [per_task] * len(plans), bind, bind_default)
    if sets:
        extra = binding_env(bind, sets)
        for plan, cpus in zip(plans, sets, strict=True):
            plan.cpus, plan.bind_verbose = cpus, bind.verbose
            plan.env.update(extra)
    return True


def stdio_for(spec: Any, task: int, expand: Callable[[str], str], flags: int, default: str = "pipe") -> Stdio:
    """``{"mode": "stream"|"file"|"none", "tasks": [ids] or None, "path": pattern}``."""
    if not isinstance(spec, dict):
        return Stdio(default)
    mode = spec.get("mode") or "stream"
    tasks = spec.get("tasks")
    if tasks is not None and task not in tasks:
        return Stdio("null")
    if mode == "none":
        return Stdio("null")
    if mode == "file":
        return Stdio("file", expand(str(spec.get("path") or "")), flags)
    return Stdio("pipe")


def shares_files(plans: list[TaskPlan]) -> bool:
    seen: set[str] = set()
    for p in plans:
        for s in (p.stdout, p.stderr):
            if s.mode == "file":
                if s.path in seen:
                    return True
                seen.add(s.path)
    return False


def pty_size(value: Any) -> tuple[int, int] | None:
    try:
        rows, cols = (int(v) for v in value)
    except (TypeError, ValueError):
        return None
    return (rows, cols) if 0 < rows < 65536 and 0 < cols < 65536 else None


def open_terminal(plan: TaskPlan) -> tuple[int, int]:
    """A pseudo-terminal for ``srun --pty``: (master, slave), the slave owned by the task's
    user (as a login terminal is) and sized like srun's."""
    master, slave = os.openpty()
    if os.geteuid() == 0:
        os.fchown(slave, plan.uid, plan.gid)
    if plan.pty_size:
        rows, cols = plan.pty_size
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    return master, slave


TASK_WORDS = spawn.Wording(  # Slurm's names for the steps of a task's start
    session="setsid()",
    identity="switching to uid {uid}",
    chdir="chdir(): {cwd}",
    stdio="dup2()",
    exec="execve(): {exe}",
)


def child_spec(
    plan: TaskPlan, pipes: dict[int, tuple[int, int]], terminal: tuple[int, int] | None, close_first: tuple[int, ...]
) -> spawn.ChildSpec:
    """How a forked child becomes the task (``agent.spawn``): stdio from the agent's pipes,
    files opened as the user, a terminal or nothing; ``/tmp`` when the working directory
    cannot be entered; the errno as the exit code of a failed start."""
    streams = []
    for fd, stdio in ((0, plan.stdin), (1, plan.stdout), (2, plan.stderr)):
        if stdio.mode == "pipe":
            streams.append(spawn.Stream(fd=pipes[fd][0] if fd == 0 else pipes[fd][1]))
        elif stdio.mode == "file":
            streams.append(spawn.Stream(path=stdio.path, flags=stdio.flags, label=f"open(): {stdio.path}"))
        elif stdio.mode == "same":
            streams.append(spawn.Stream(same=True))
        elif stdio.mode == "pty":
            assert terminal is not None
            streams.append(spawn.Stream(fd=terminal[1]))
        else:
            streams.append(spawn.Stream(path=os.devnull, flags=os.O_RDWR, label=f"open(): {os.devnull}"))
    bind_note = None
    if plan.bind_verbose and plan.cpus:
        mask = mask_text(plan.cpus)

        def bind_note(pid: int) -> str:
            return f"cpu-bind=MASK - {plan.node}, task {plan.task:2d} {plan.local:2d} [{pid}]: mask {mask} set\n"

    return spawn.ChildSpec(
        exe=plan.argv[0],
        argv=plan.argv,
        env=plan.env,
        uid=plan.uid,
        gid=plan.gid,
        umask=plan.umask,
        cwd=plan.cwd,
        groups=plan.groups if plan.uid != os.geteuid() else None,  # already the user: as is
        stdin=streams[0],
        stdout=streams[1],
        stderr=streams[2],
        words=TASK_WORDS,
        reset=spawn.ignored_signals(),
        cpus=plan.cpus,
        bind_note=bind_note,
        cwd_fallback="/tmp",
        warn_fd=pipes[2][1] if 2 in pipes else 2,
        terminal=None if terminal is None else terminal[1],
        close_first=close_first if terminal is None else (*close_first, terminal[0]),
        close_after=tuple(fd for pair in pipes.values() for fd in pair),
        search_path=True,
        failure_exit=None,
        identity=nodeident.for_node(plan.node),
        cgroup_procs=plan.cgroup_procs,
        rlimits=plan.rlimits,
        private_dirs=plan.private_dirs,
        exec_as_root=plan.container,
        hide=plan.hide,
        task_prologs=plan.task_prologs,
        task_epilogs=plan.task_epilogs,
    )
