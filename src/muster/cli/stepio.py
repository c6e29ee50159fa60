"""srun's own input and output around a step: writing to its terminal or files without
losing bytes, the files srun opens itself (a pattern that names no task or node: one file
for all tasks, stdin read once and sent to every task), and the raw terminal of ``srun
--pty``. Standard library only: srun starts fast."""

from __future__ import annotations

import os
import select

TYPE_CHECKING = False  # typing is not imported on the commands' hot path
if TYPE_CHECKING:
    from typing import Any

    from muster.protocol.stream import ChunkedSender, StreamClient

__all__ = ["Link", "RawTerminal", "StepNode", "local_path", "noop", "terminal_size", "write_all"]


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [])
            continue
        except BrokenPipeError:
            return
        view = view[n:]


def noop(signum: int, frame: object) -> None:
    """Signals are read from the wake-up pipe; the handler itself does nothing."""


def terminal_size() -> list[int] | None:
    try:
        size = os.get_terminal_size(0)
    except OSError:
        return None
    return [size.lines, size.columns]


class RawTerminal:
    """srun's own terminal in raw mode while a --pty step runs, restored after."""

    def __init__(self) -> None:
        self.saved: Any = None

    def enter(self) -> None:
        if not os.isatty(0):
            return
        import termios
        import tty

        self.saved = termios.tcgetattr(0)
        tty.setraw(0)

    def leave(self) -> None:
        if self.saved is not None:
            import termios

            termios.tcsetattr(0, termios.TCSADRAIN, self.saved)
            self.saved = None


_PER_TASK_RE = None


def local_path(spec: dict[str, object] | None, grant: dict[str, object], cwd: str) -> str | None:
    """The file srun itself opens for an ``-i/-o/-e`` spec, or None (the terminal, ``none``,
    one task's stream, or a pattern the nodes expand per task or node: ``%t %n %N``)."""
    global _PER_TASK_RE
    if not spec or spec.get("mode") != "file":
        return None
    pattern = str(spec["path"])
    if _PER_TASK_RE is None:
        import re

        _PER_TASK_RE = re.compile(r"(?<!%)(?:%%)*%\d*[tnN]")
    if "\\" not in pattern and _PER_TASK_RE.search(pattern):
        return None
    from muster.core.outputs import expand_pattern, fields_for_task

    if "job_id" in grant and "step_id" in grant:
        pattern = expand_pattern(pattern, fields_for_task(grant, "", 0, 0))
    return os.path.normpath(os.path.join(cwd, pattern))


class StepNode:
    """One node of a running step as srun sees it: where its agent is, its tasks, the
    stream to it."""

    __slots__ = ("name", "addr", "port", "tasks", "token", "stdin", "done", "tls", "seen", "retry_at", "until", "why")

    def __init__(self, info: dict[str, Any], tasks: list[int], tls_ca: str | None) -> None:
        self.name = str(info["name"])
        self.tls = (tls_ca, self.name) if tls_ca else None  # TLSType=tls/muster: the CA, the name to check
        self.addr = str(info["addr"])
        self.port = int(info["port"])
        self.tasks = tasks
        self.token = ""
        self.stdin: ChunkedSender | None = None
        self.done = False
        # Resuming the node's stream after its agent restarted (``/v1/steps/attach``): the
        # frames of the step's log had so far, when to try again, until when, and why
        self.seen = 0
        self.retry_at: float | None = None
        self.until: float | None = None
        self.why = ""


class Link:
    """srun's connection to the head of one subtree of the launch tree (``core.launchtree``):
    the head's own frames come plain, those of the nodes below it ``t``-wrapped
    (``agent.steptree``). ``deadline``: when the head must have answered (a stopped agent
    accepts connections and says nothing)."""

    __slots__ = ("conn", "nodes", "deadline", "closed", "attach")

    def __init__(self, conn: StreamClient, nodes: list[StepNode], deadline: float, attach: bool = False) -> None:
        self.conn = conn
        self.nodes = nodes  # the head first
        self.deadline = deadline
        self.closed = False
        self.attach = attach  # a resumed stream of one node (no launch tree below it)

    @property
    def head(self) -> StepNode:
        return self.nodes[0]

    @property
    def answered(self) -> bool:
        return self.conn.status != 0
