"""The per-node ``Key=Value`` files beside slurm.conf (oci.conf, job_container.conf): which
of their settings apply to one node. Pure.

A line without ``NodeName=`` holds for every node; a line with one holds where its host
list names the node, and wins over the lines for every node. Keys are case-insensitive
(returned in lower case); values may be quoted where the file allows it (``quoted``).
"""

from __future__ import annotations

import shlex

from muster.core.conftext import strip_comment
from muster.core.hostlist import HostlistError, expand

__all__ = ["NodeConfError", "node_settings"]


class NodeConfError(ValueError):
    """A line that cannot be read: ``line`` is its number, ``str()`` says why."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line


def node_settings(text: str, node: str, quoted: bool = False) -> dict[str, tuple[str, int]]:
    """The settings of ``text`` that apply to ``node``: each lower-case key's value and the
    number of the line it came from. Raises ``NodeConfError``."""
    every: dict[str, tuple[str, int]] = {}
    mine: dict[str, tuple[str, int]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = strip_comment(raw).strip()
        if not line:
            continue
        try:
            words = shlex.split(line) if quoted else line.split()
        except ValueError as exc:
            raise NodeConfError(number, str(exc)) from None
        pairs: dict[str, str] = {}
        for word in words:
            key, eq, value = word.partition("=")
            if not eq:
                raise NodeConfError(number, f"expected Key=Value, not {word!r}")
            pairs[key.lower()] = value
        target = every
        if "nodename" in pairs:
            try:
                names = expand(pairs.pop("nodename"))
            except HostlistError as exc:
                raise NodeConfError(number, f"bad NodeName: {exc}") from None
            if node not in names:
                continue
            target = mine
        for key, value in pairs.items():
            target[key] = (value, number)
    return {**every, **mine}
