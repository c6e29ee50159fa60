"""srun's heterogeneous steps: ``--het-group`` and ``A : B``.

Inside a heterogeneous job's allocation ``srun --het-group=0,1 cmd`` runs ``cmd`` over
components 0 and 1; ``srun [opts A] cmdA : [opts B] cmdB`` runs each part on its own
component (the k-th part on component k, or on the ones its ``--het-group`` names; a part
without a command runs the next part's). A plain ``srun cmd`` runs on component 0 only,
as in Slurm, and is not a het step. Outside any allocation, ``srun A : B`` first gets a
het allocation shaped by its parts (``allocate_and_run``), as ``salloc A : B`` would.

Each (component, part) becomes a step of that component's job, run by a child srun whose
environment describes that component (its ``SLURM_*_HET_GROUP_<k>`` values become the
plain names); the options Slurm carries from a part to the next (``hetargs.PROPAGATED``:
``-l``, ``-o``, ``--export``...) are carried. Task ranks run across the components in
order: the child is told its first rank, the step's total and the component
(``MUSTER_HET_STEP``, read by ``srun.build`` and sent to the agents, which set
``SLURM_PROCID`` from it, ``SLURM_NTASKS`` to the total and ``SLURM_HET_SIZE``; ``-l``
labels use the same ranks). srun's exit status is the highest of its children's. Only
``os`` and the small CLI modules are imported (``signal`` when a het step runs).
"""

from __future__ import annotations

import os
import sys

from muster.cli.common import CommandError
from muster.cli.hetargs import PROPAGATED
from muster.client.controller import connect
from muster.core.hetjob import split_components
from muster.slurm.options import OptionTable, getopt

TYPE_CHECKING = False  # collections.abc costs a command milliseconds to import
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["HET_STEP_VAR", "NeedsAllocation", "Part", "allocate_and_run", "plan", "run"]

HET_STEP_VAR = "MUSTER_HET_STEP"  # "first rank:total tasks:components:this component"
_GROUP_OPTIONS = ("--het-group", "--pack-group")
# The plain names a component's values replace in its child's environment.
_PER_COMPONENT = (
    "SLURM_JOB_ID",
    "SLURM_JOBID",
    "SLURM_JOB_NAME",
    "SLURM_JOB_PARTITION",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_JOB_NUM_NODES",
    "SLURM_NNODES",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_JOB_CPUS_PER_NODE",
    "SLURM_CPUS_PER_TASK",
    "SLURM_MEM_PER_NODE",
    "SLURM_MEM_PER_CPU",
    "SLURM_JOB_GPUS",
)

_SAME_AS = {
    "SLURM_JOBID": "SLURM_JOB_ID",
    "SLURM_NODELIST": "SLURM_JOB_NODELIST",
    "SLURM_NNODES": "SLURM_JOB_NUM_NODES",
    "SLURM_NPROCS": "SLURM_NTASKS",
}


class Part:
    """One child srun: its component, its arguments (options and command) and tasks."""

    __slots__ = ("group", "argv", "ntasks")

    def __init__(self, group: int, argv: list[str], ntasks: int) -> None:
        self.group = group
        self.argv = argv
        self.ntasks = ntasks


class NeedsAllocation(Exception):
    """``srun A : B`` outside any allocation: srun first gets a het allocation."""


def plan(argv: list[str], environ: dict[str, str], table: OptionTable) -> list[Part] | None:
    """The children of a het step, or None when ``argv`` is an ordinary srun."""
    parts = split_components(argv)
    if len(parts) == 1 and not any(a.startswith(_GROUP_OPTIONS) for a in parts[0]):
        return None
    size = int(environ.get("SLURM_HET_SIZE") or "0") if (environ.get("SLURM_HET_SIZE") or "").isdigit() else 0
    if size == 0 and len(parts) > 1:
        if not (environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")):
            raise NeedsAllocation()
        raise CommandError("a heterogeneous step needs a heterogeneous job allocation", 1)
    read = _read(parts, table)
    out: list[Part] = []
    for k in range(len(read) - 1, -1, -1):
        options, groups, command = read[k]
        for group in groups if groups is not None else [k if len(read) > 1 else 0]:
            if group >= max(size, 1):
                raise CommandError(
                    f"Attempt to run a job step with het group value of {group}, "
                    f"but the job allocation has maximum value of {max(size - 1, 0)}",
                    1,
                )
            out.append(Part(group, options + command, _ntasks(options, group, environ, table)))
    out.reverse()
    out.sort(key=lambda p: p.group)  # ranks run across the components in order
    return out


def _read(parts: list[list[str]], table: OptionTable) -> list[tuple[list[str], list[int] | None, list[str]]]:
    """Each part's options (with those carried from the parts before it), the groups its
    ``--het-group`` names, and its command (a part without one runs the next one's)."""
    read: list[tuple[list[str], list[int] | None, list[str]]] = []
    carried: list[str] = []  # options a part passes on to the next ones (Slurm's list)
    for part in parts:
        options, groups = _take_groups(part)
        try:
            parsed, command = getopt(options, table, permute=False)
        except Exception:  # noqa: BLE001 - the child srun reports a malformed option itself
            parsed, command = [], []
        read.append((carried + options[: len(options) - len(command)], groups, command))
        carried += [
            f"--{opt.longs[0]}" if value is None else f"--{opt.longs[0]}={value}"
            for opt, value in parsed
            if opt.key in PROPAGATED and opt.longs
        ]
    following: list[str] = []
    for k in range(len(read) - 1, -1, -1):
        options, groups, command = read[k]
        if command:
            following = command
        elif not following:
            raise CommandError("No command given to execute.", 1)
        read[k] = (options, groups, following)
    return read


def allocate_and_run(
    argv: list[str], environ: dict[str, str], cwd: str, table: OptionTable, build: Callable[..., object]
) -> int:
    """``srun A : B cmd`` outside an allocation: a heterogeneous allocation shaped by the
    parts (``build`` is ``srun.build``; as ``salloc A : B`` would ask), the het step in it,
    then the allocation given back with the step's status."""
    from muster.cli import alloc, salloc

    specs: list[dict[str, object]] = []
    for options, _groups, command in _read(split_components(argv), table):
        built = build(options + command, environ, cwd)
        if isinstance(built, str):  # --help or --usage in a part: nothing to run
            raise CommandError("No command given to execute.", 1)
        specs.append(dict(getattr(built, "spec", {})))
    ctl = connect("srun")
    job_id: int | None = alloc.request(ctl, "srun", specs[0], specs[1:])
    try:
        assert job_id is not None
        job = alloc.wait_running(ctl, "srun", job_id, quiet=False)
        env = salloc.allocation_environment(job, specs[0], environ)
        env.update(salloc.het_environment(ctl, job_id, specs))
        parts = plan(argv, env, table)
        rc = run(parts or [], env)
        alloc.release(ctl, job_id, rc if rc < 128 else 0, rc - 128 if rc > 128 else 0)
        job_id = None
        return rc
    finally:
        if job_id is not None:
            alloc.revoke(ctl, job_id)


def _take_groups(part: list[str]) -> tuple[list[str], list[int] | None]:
    """The part's arguments without ``--het-group``, and the groups it named."""
    rest: list[str] = []
    groups: list[int] | None = None
    i = 0
    while i < len(part):
        arg = part[i]
        value: str | None = None
        if arg in _GROUP_OPTIONS and i + 1 < len(part):
            value, i = part[i + 1], i + 2
        elif arg.startswith(tuple(g + "=" for g in _GROUP_OPTIONS)):
            value, i = arg.split("=", 1)[1], i + 1
        else:
            rest.append(arg)
            i += 1
            continue
        groups = (groups or []) + _group_list(value)
    return rest, groups


def _group_list(text: str) -> list[int]:
    """``0,1`` or ``0-2``."""
    out: list[int] = []
    for item in text.split(","):
        lo, dash, hi = item.strip().partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise CommandError(f"Invalid hetjob group specification: {text}", 1)
        out.extend(range(int(lo), int(hi if dash else lo) + 1))
    return out


def _ntasks(options: list[str], group: int, environ: dict[str, str], table: OptionTable) -> int:
    """How many tasks the child will run: ``-n``, else ``-N`` x ``--ntasks-per-node`` or
    one per node, else the component's own task count."""
    try:
        parsed, _ = getopt(options, table, permute=False)
    except Exception:  # noqa: BLE001 - the child reports it
        parsed = []
    given = {opt.key: value for opt, value in parsed}

    def number(text: str | None) -> int | None:
        head = (text or "").split("-")[0].strip()
        return int(head) if head.isdigit() and int(head) > 0 else None

    if number(given.get("ntasks")):
        return number(given.get("ntasks")) or 1
    nodes = number(given.get("nodes"))
    per_node = number(given.get("ntasks-per-node"))
    if nodes:
        return nodes * (per_node or 1)
    suffix = f"_HET_GROUP_{group}"
    own = number(environ.get("SLURM_NTASKS" + suffix)) or number(environ.get("SLURM_JOB_NUM_NODES" + suffix))
    if per_node:
        return per_node * (number(environ.get("SLURM_JOB_NUM_NODES" + suffix)) or 1)
    return own or 1


def child_environment(environ: dict[str, str], part: Part, first: int, total: int, size: int) -> dict[str, str]:
    """srun's environment as the child for ``part`` sees it: its component's values under
    the plain names, and where its ranks start."""
    env = dict(environ)
    suffix = f"_HET_GROUP_{part.group}"
    for name in _PER_COMPONENT:
        value = environ.get(name + suffix)
        if value is None and name in _SAME_AS:  # the other name of the same value
            value = environ.get(_SAME_AS[name] + suffix)
        if value is not None:
            env[name] = value
        elif name not in ("SLURM_JOB_ID", "SLURM_JOBID"):
            env.pop(name, None)
    env[HET_STEP_VAR] = f"{first}:{total}:{size}:{part.group}"
    return env


def run(parts: list[Part], environ: dict[str, str]) -> int:
    """Start one child srun per part, pass signals on, and return the highest status."""
    import signal  # here: it brings enum, which a plain srun does not need

    size = int(environ.get("SLURM_HET_SIZE") or "1")
    total = sum(p.ntasks for p in parts)
    pids: list[int] = []
    first = 0
    entry = "import sys; from muster.cli.srun import main; sys.exit(main())"
    for part in parts:
        env = child_environment(environ, part, first, total, size)
        pids.append(os.posix_spawn(sys.executable, [sys.executable, "-c", entry, *part.argv], env))
        first += part.ntasks

    def forward(signum: int, _frame: object) -> None:
        for pid in pids:
            try:
                os.kill(pid, signum)
            except OSError:
                pass

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT):
        signal.signal(sig, forward)
    # Ctrl-C reaches the children from the terminal: srun's own counting applies there
    signal.signal(signal.SIGINT, lambda _s, _f: None)
    worst = 0
    for pid in pids:
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
        code = os.waitstatus_to_exitcode(status)
        worst = max(worst, code if code >= 0 else 128 - code)  # killed by signal N: 128+N
    return worst
