"""What the accounting commands share besides their columns: reading sprio's and sshare's
options, and asking the controller (one request, failures in Slurm's words; query strings
without ``urllib``). Their columns (Slurm's ``print_fields``: ``Name%width`` lists, values
cut with ``+``, ``-p``/``-P``) are ``muster.slurm.columns``'s.
"""

from __future__ import annotations

import sys

from muster.cli.common import CommandError, argv_or_sys, usage_error, version_line
from muster.client.controller import connect, connect_message
from muster.slurm.options import Opt, OptionError, OptionTable, getopt

TYPE_CHECKING = False  # typing costs a command milliseconds to import
if TYPE_CHECKING:
    from typing import Any


def read_options(
    prog: str, argv: list[str] | None, options: tuple[Opt, ...], doc: str | None, usage: str | None = None
) -> dict[str, str | None] | int:
    """sprio's or sshare's options as ``{key: value}`` (operands are ignored); instead an
    exit status when getopt refused them or ``--version``/``--help``/``--usage`` was answered
    (the help is ``doc``; ``--usage`` prints ``usage`` where one is given)."""
    try:
        parsed, _operands = getopt(argv_or_sys(argv), OptionTable(options))
    except OptionError as e:
        return usage_error(prog, str(e))
    opts = {o.key: v for o, v in parsed}
    if "version" in opts:
        sys.stdout.write(version_line() + "\n")
        return 0
    if "usage" in opts and usage is not None and "help" not in opts:
        sys.stdout.write(usage)
        return 0
    if "help" in opts or "usage" in opts:
        sys.stdout.write(doc or "")
        return 0
    return opts


def call(prog: str, method: str, path: str, body: object = None) -> dict[str, Any]:
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
        c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogateescape")) for c in text
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
