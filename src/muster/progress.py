"""Tell muster how a training job advances: ``step(n)``, ``checkpoint(n)``, ``section(name)``.

    from muster import progress
    for step in range(start, steps):
        train_one_step()
        progress.step(step)
        if step % 100 == 0:
            with progress.section("checkpoint"):  # slow on purpose: not a hang
                save_checkpoint()
            progress.checkpoint(step)

The node agent gives every batch script and srun task ``MUSTER_PROGRESS``: a file it
watches. Each call appends one line, ``step N TIME`` or ``checkpoint N TIME`` (TIME: seconds
since the epoch; a step line also says ``rank=R``, from ``RANK`` or ``SLURM_PROCID``, and
``busy=SECONDS`` when given: the agent times each rank's steps to find stragglers), which is
also the shell form for jobs not written in Python::

    echo "step $i" >> "$MUSTER_PROGRESS"          # the time is optional
    muster-progress checkpoint "$i"               # the same, as a command
    muster-progress begin eval; evaluate; muster-progress end eval

The agent forwards the latest step and checkpoint of each job with its heartbeats; the
controller uses them for hang detection (``--hang-timeout``) and goodput accounting
(``sacct -o Goodput,LostTime,...``). Outside a muster job (no ``MUSTER_PROGRESS``) every call
does nothing, so a script runs unchanged on a laptop. Any rank may report; reporting from
every rank lets muster tell which node hosted a rank that stopped.

A declared section (``with section("eval"):``, or lines ``begin NAME`` / ``end NAME``) is
time the job knows to be slow: the controller judges no hang while a section is open.

Hang evidence: the first report of a process installs a ``faulthandler`` handler for
SIGUSR1 (unless the process already handles SIGUSR1) that writes the stacks of all its
threads to ``$MUSTER_PROGRESS.stacks``. When the controller judges the job hung, the agent
sends SIGUSR1 only to processes that catch it, so reporting progress never makes the
diagnostic signal fatal (see ``muster.agent.hangevidence``).

Preemption (the checkpoint handshake, docs/preemption.md): a job chosen to make room for
another gets SIGTERM and a deadline; ``preempt_deadline()`` says when (seconds since the
epoch, None while the job is not asked to leave) and ``should_checkpoint()`` whether it is
asked. A job that then saves and calls ``checkpoint(step)`` is stopped at once (its GPUs go
to the preemptor), having lost nothing; one that does not answer is stopped at the deadline::

    signal.signal(signal.SIGTERM, lambda *_: None)  # or set a flag; the loop polls anyway
    for step in range(start, steps):
        train_one_step()
        if progress.should_checkpoint():
            save_checkpoint()
            progress.checkpoint(step)
            break

This module uses only the standard library (os, sys, time; faulthandler and signal once, at
the first report) and never raises into the training loop: a report that cannot be written
is dropped.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "ENV",
    "allocation",
    "begin",
    "checkpoint",
    "end",
    "main",
    "path",
    "preempt_deadline",
    "section",
    "should_checkpoint",
    "step",
]

ENV = "MUSTER_PROGRESS"
_fd: int | None = None
_fd_path: str | None = None
_handler_for: tuple[int, str] | None = None  # (pid, progress file) the stacks handler serves


def _install_stacks_handler(target: str) -> None:
    """SIGUSR1 -> every thread's Python stack into ``<target>.stacks`` (see the module
    docstring); only where SIGUSR1 has its default action and the agent made that file."""
    global _handler_for
    if _handler_for == (os.getpid(), target):
        return
    _handler_for = (os.getpid(), target)
    try:
        import faulthandler
        import signal

        if signal.getsignal(signal.SIGUSR1) is not signal.SIG_DFL:
            return  # the program handles SIGUSR1 itself
        fd = os.open(target + ".stacks", os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        faulthandler.register(signal.SIGUSR1, file=fd, all_threads=True, chain=False)
    except (OSError, ValueError, RuntimeError, AttributeError):
        pass  # no stacks file (an older agent), or no signals here: evidence from outside only


def path() -> str | None:
    """The file this process reports to, or None outside a muster job."""
    return os.environ.get(ENV) or None


def _rank() -> str:
    """This process's rank (``RANK``, else ``SLURM_PROCID``), as a ``rank=R`` word, or ''."""
    rank = os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or ""
    return f" rank={rank}" if rank.isdigit() else ""


def _write(kind: str, n: int | str, extra: str = "") -> bool:
    global _fd, _fd_path
    target = path()
    if target is None:
        return False
    word = n if isinstance(n, str) else str(int(n))
    line = f"{kind} {word} {time.time():.3f}{extra}\n".encode()
    try:
        if _fd is None or _fd_path != target:
            if _fd is not None:
                os.close(_fd)
                _fd = None
            _fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            _fd_path = target
        os.write(_fd, line)  # one short O_APPEND write: lines of ranks never interleave
        _install_stacks_handler(target)
        return True
    except (OSError, ValueError):
        return False


def step(n: int, busy: float | None = None) -> bool:
    """Step ``n`` is done. Returns whether the report was written.

    The line names this process's rank (``rank=R``), so that the agent times each rank's
    steps (straggler detection, docs/training.md). ``busy``: the seconds this rank itself
    worked on the step, without the time it waited for the others in collectives; pass it
    in synchronous data-parallel training, where every rank's step takes as long as the
    slowest one's and only the busy time shows which node is slow."""
    extra = _rank()
    if busy is not None:
        try:
            extra += f" busy={max(0.0, float(busy)):.4f}"
        except (TypeError, ValueError):
            pass
    return _write("step", n, extra)


def checkpoint(n: int) -> bool:
    """A checkpoint holding the work up to step ``n`` is written (call it once the file is
    safely on disk). Returns whether the report was written."""
    return _write("checkpoint", n)


def allocation() -> dict[str, Any] | None:
    """The job's allocation after a failed node of it was replaced in the running job
    (``sbatch --spare-nodes``, docs/recovery.md): ``{"nodes": [...], "nodelist": "...",
    "replaced": {"old", "new", "cause", "time"}}`` as the node's agent was told, or None
    (no replacement since this attempt started, or outside a muster job)."""
    target = path()
    if target is None:
        return None
    import json

    try:
        with open(target + ".allocation", "rb") as f:  # written by the node agent
            data = json.loads(f.read(1 << 20))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def preempt_deadline() -> float | None:
    """When this job will be stopped because it is preempted (seconds since the epoch), or
    None: not preempted, or outside a muster job. Cheap enough to call at every step (one
    failed ``open`` while not preempted)."""
    target = path()
    if target is None:
        return None
    try:
        with open(target + ".preempt", "rb") as f:  # written by the node agent
            return float(f.read(64).split()[0])
    except (OSError, ValueError, IndexError):
        return None


def should_checkpoint() -> bool:
    """Whether this job is asked to save a checkpoint and leave (it is preempted): save,
    then call ``checkpoint(step)``, which stops it at once instead of at its deadline."""
    return preempt_deadline() is not None


def _name(name: str) -> str:
    word = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(name))[:64]
    return word or "section"


def begin(name: str) -> bool:
    """A slow section (checkpoint save, evaluation) starts: no hang is judged until ``end``."""
    return _write("begin", _name(name))


def end(name: str) -> bool:
    """The section ``name`` that ``begin`` opened is over."""
    return _write("end", _name(name))


@contextmanager
def section(name: str) -> Iterator[None]:
    """``with progress.section("checkpoint"): save()``: ``begin`` and ``end`` around a block."""
    begin(name)
    try:
        yield
    finally:
        end(name)


def main(argv: list[str] | None = None) -> int:
    """``muster-progress step|checkpoint N`` or ``muster-progress begin|end NAME``."""
    args = sys.argv[1:] if argv is None else argv
    if args in (["-V"], ["--version"]):
        from muster import VERSION_STRING

        print(VERSION_STRING)
        return 0
    sections = len(args) == 2 and args[0] in ("begin", "end") and bool(args[1])
    if not sections and (len(args) != 2 or args[0] not in ("step", "checkpoint") or not args[1].lstrip("-").isdigit()):
        print("usage: muster-progress step|checkpoint N  or  muster-progress begin|end NAME", file=sys.stderr)
        return 2
    if path() is None:
        print(f"muster-progress: {ENV} is not set (not inside a muster job); nothing reported", file=sys.stderr)
        return 0
    written = step(int(args[1])) if args[0] == "step" else _write(args[0], _name(args[1]) if sections else int(args[1]))
    if not written:
        print(f"muster-progress: cannot write to {path()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
