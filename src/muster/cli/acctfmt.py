"""What the accounting commands share: Slurm's ``print_fields`` output and controller reads.

sacct, sacctmgr, sshare and sreport print columns the same way: each value padded to its
width (right-justified, or left for a negative width) and cut to the width with a ``+``
in the last place; a header and a dashed line unless ``-n``; with ``-p`` every value is
followed by ``|`` (or ``--delimiter``), with ``-P`` values are only separated by it.
"""

from __future__ import annotations

import sys

from muster.cli.common import (
    CommandError,
    argv_or_sys,
    connect,
    connect_message,
    usage_error,
    version_line,
)
from muster.cli.options import Opt, OptionError, OptionTable, getopt


def cell(value: str, width: int) -> str:
    """One fixed-width value: cut with ``+``, right-justified (left for negative width)."""
    w = abs(width)
    if len(value) > w:
        value = value[: w - 1] + "+" if w > 0 else value
    return value.ljust(w) if width < 0 else value.rjust(w)


class Printer:
    """Rows of columns, fixed width or parsable."""

    __slots__ = ("parsable", "delimiter", "trailing", "header")

    def __init__(self, parsable: bool = False, trailing: bool = False, delimiter: str = "|",
                 header: bool = True) -> None:
        self.parsable = parsable
        self.trailing = trailing
        self.delimiter = delimiter
        self.header = header

    def lines(self, columns: list[tuple[str, int]], rows: list[list[str]]) -> list[str]:
        out: list[str] = []
        if self.parsable:
            end = self.delimiter if self.trailing else ""
            if self.header:
                out.append(self.delimiter.join(name for name, _ in columns) + end)
            out += [self.delimiter.join(row) + end for row in rows]
            return out
        if self.header:
            out.append("".join(cell(name, w) + " " for name, w in columns))
            out.append("".join("-" * abs(w) + " " for _, w in columns))
        for row in rows:
            out.append("".join(cell(v, w) + " " for v, (_, w) in zip(row, columns, strict=False)))
        return out


def read_options(
    prog: str, argv: list[str] | None, options: tuple[Opt, ...], doc: str | None
) -> dict[str, str | None] | int:
    """sprio's or sshare's options as ``{key: value}`` (operands are ignored); instead an
    exit status when getopt refused them or ``--version``/``--help``/``--usage`` was answered
    (the help is ``doc``)."""
    try:
        parsed, _operands = getopt(argv_or_sys(argv), OptionTable(options))
    except OptionError as e:
        return usage_error(prog, str(e))
    opts = {o.key: v for o, v in parsed}
    if "version" in opts:
        sys.stdout.write(version_line() + "\n")
        return 0
    if "help" in opts or "usage" in opts:
        sys.stdout.write(doc or "")
        return 0
    return opts


def call(prog: str, method: str, path: str, body: object = None) -> dict:
    """One request to the controller; a CommandError with Slurm's words when it fails."""
    from muster.protocol.client import ApiError, ConnectError

    ctl = connect(prog)
    try:
        return ctl.call(method, path, body)
    except ConnectError as e:
        raise CommandError(connect_message(e)) from None
    except ApiError as e:
        raise CommandError(e.message) from None


_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789,_.:-~")


def quote(text: str) -> str:
    """Percent-encode a query value (urllib.parse costs ~30 ms of start-up)."""
    # A raw byte from the command line (a surrogate) is sent as that byte, not a crash.
    return "".join(
        c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogateescape"))
        for c in text
    )


def query_string(params: dict[str, object]) -> str:
    parts = []
    for key, value in params.items():
        if value is None or value == "" or value == []:
            continue
        if isinstance(value, list | tuple):
            value = ",".join(str(v) for v in value)
        parts.append(f"{key}={quote(str(value))}")
    return "?" + "&".join(parts) if parts else ""
