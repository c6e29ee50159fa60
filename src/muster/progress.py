"""Tell muster how a training job advances: ``step(n)`` and ``checkpoint(n)``.

    from muster import progress
    for step in range(start, steps):
        train_one_step()
        progress.step(step)
        if step % 100 == 0:
            save_checkpoint()
            progress.checkpoint(step)

The node agent gives every batch script and srun task ``MUSTER_PROGRESS``: a file it
watches. Each call appends one line, ``step N TIME`` or ``checkpoint N TIME`` (TIME: seconds
since the epoch), which is also the shell form for jobs not written in Python::

    echo "step $i" >> "$MUSTER_PROGRESS"          # the time is optional
    muster-progress checkpoint "$i"               # the same, as a command

The agent forwards the latest step and checkpoint of each job with its heartbeats; the
controller uses them for hang detection (``--hang-timeout``) and goodput accounting
(``sacct -o Goodput,LostTime,...``). Outside a muster job (no ``MUSTER_PROGRESS``) every call
does nothing, so a script runs unchanged on a laptop. Any rank may report; reporting from
every rank lets muster tell which node hosted a rank that stopped.

This module uses only the standard library (os, sys, time) and never raises into the
training loop: a report that cannot be written is dropped.
"""

from __future__ import annotations

import os
import sys
import time

__all__ = ["ENV", "checkpoint", "main", "path", "step"]

ENV = "MUSTER_PROGRESS"
_fd: int | None = None
_fd_path: str | None = None


def path() -> str | None:
    """The file this process reports to, or None outside a muster job."""
    return os.environ.get(ENV) or None


def _write(kind: str, n: int) -> bool:
    global _fd, _fd_path
    target = path()
    if target is None:
        return False
    line = f"{kind} {int(n)} {time.time():.3f}\n".encode()
    try:
        if _fd is None or _fd_path != target:
            if _fd is not None:
                os.close(_fd)
                _fd = None
            _fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            _fd_path = target
        os.write(_fd, line)  # one short O_APPEND write: lines of ranks never interleave
        return True
    except (OSError, ValueError):
        return False


def step(n: int) -> bool:
    """Step ``n`` is done. Returns whether the report was written."""
    return _write("step", n)


def checkpoint(n: int) -> bool:
    """A checkpoint holding the work up to step ``n`` is written (call it once the file is
    safely on disk). Returns whether the report was written."""
    return _write("checkpoint", n)


def main(argv: list[str] | None = None) -> int:
    """``muster-progress step|checkpoint N``."""
    args = sys.argv[1:] if argv is None else argv
    if args in (["-V"], ["--version"]):
        from muster import VERSION_STRING

        print(VERSION_STRING)
        return 0
    if len(args) != 2 or args[0] not in ("step", "checkpoint") or not args[1].lstrip("-").isdigit():
        print("usage: muster-progress step|checkpoint N", file=sys.stderr)
        return 2
    if path() is None:
        print(f"muster-progress: {ENV} is not set (not inside a muster job); nothing reported", file=sys.stderr)
        return 0
    if not _write(args[0], int(args[1])):
        print(f"muster-progress: cannot write to {path()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
