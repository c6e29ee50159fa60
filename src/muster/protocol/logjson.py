"""How both daemons log: Slurm-like text lines (the default), or one JSON object per line
with ``LogFormat=json`` (muster's own key; docs/metrics.md, "Structured logs").

A JSON line carries ``time`` (ISO 8601, UTC, milliseconds), ``level``, ``logger``,
``message`` (the formatted text, as the text format prints it), ``daemon`` (and ``node``
for an agent), and the structured fields known for the event: ``job_id``, ``node``,
``pass_id``, and any others a caller passes with ``extra={"fields": {...}}``. Fields
passed explicitly win; otherwise ``job_id`` and ``node`` are read from the message when it
names them the way muster's log lines do ("job 12: ...", "JobId=12", "node gpu3 not
responding"), so
every existing line gains them. A traceback goes into ``exc_info`` as text.

A log file (``--log-file``) is ``PrivateFileHandler``'s: created 0600 whatever the umask
(a daemon's lines name users, jobs and their environments; an existing file keeps the mode
its administrator gave it), and reopened by name on SIGUSR2 (``reopen_logs``), as Slurm's
daemons reopen theirs for logrotate (``protocol.daemonsignals``).
"""

from __future__ import annotations

import json
import logging
import os
import re
from datetime import UTC, datetime
from io import TextIOWrapper
from typing import Any

__all__ = ["LOG_FORMATS", "JsonFormatter", "PrivateFileHandler", "reopen_logs", "setup_logging"]

LOG_FORMATS = ("text", "json")
_JOB_RE = re.compile(r"\b(?:job |JobId=)(\d+)\b")
_NODE_RE = re.compile(r"\bnode ([A-Za-z0-9][A-Za-z0-9_.\-\[\],]*)")
_KNOWN = ("job_id", "node", "pass_id")


class JsonFormatter(logging.Formatter):
    def __init__(self, daemon: str, node: str | None = None) -> None:
        super().__init__()
        self.daemon = daemon
        self.node = node

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": message,
            "daemon": self.daemon,
        }
        if self.node is not None:
            out["node"] = self.node
        m = _JOB_RE.search(message)
        if m:
            out["job_id"] = int(m.group(1))
        m = _NODE_RE.search(message)
        if m and self.node is None:
            out["node"] = m.group(1).rstrip(".,:;")
        for key in _KNOWN:
            value = record.__dict__.get(key)
            if value is not None:
                out[key] = value
        fields = record.__dict__.get("fields")
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, separators=(",", ":"))


class PrivateFileHandler(logging.FileHandler):
    """Appends to a file created with mode 0600; ``reopen`` opens the path again (logrotate
    moved the file away: the next lines go to a new file of that name)."""

    def _open(self) -> TextIOWrapper:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        return open(fd, "a", encoding=self.encoding, errors=self.errors)  # noqa: SIM115  # the handler keeps it

    def reopen(self) -> None:
        """The file at the path now; on failure (its directory gone) the old file stays in
        use and ``OSError`` is raised."""
        self.acquire()
        try:
            fresh = self._open()
            old, self.stream = self.stream, fresh
            if old is not None:
                old.close()
        finally:
            self.release()


def reopen_logs() -> list[str]:
    """Reopen every log file of this process (SIGUSR2); the paths reopened."""
    done = []
    for handler in logging.getLogger().handlers:
        if isinstance(handler, PrivateFileHandler):
            handler.reopen()
            done.append(handler.baseFilename)
    return done


def setup_logging(
    log_format: str | None,
    *,
    daemon: str,
    node: str | None = None,
    filename: str | None = None,
    level: int = logging.INFO,
    text_format: str = "%(asctime)s %(name)s %(levelname)s %(message)s",
) -> None:
    """Configure the root logger once for a daemon: ``log_format`` is LogFormat's value
    (``text`` when unset; ``ConfigError`` was raised at parse time for anything else)."""
    handler: logging.Handler = PrivateFileHandler(filename) if filename else logging.StreamHandler()
    if (log_format or "text").lower() == "json":
        handler.setFormatter(JsonFormatter(daemon, node))
    else:
        handler.setFormatter(logging.Formatter(text_format))
    # Neither format names a source line, a thread or a process: a record need not look
    # them up (walking the stack for the caller costs more than the rest of a record).
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None  # type: ignore[attr-defined]  # the documented off switch
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
