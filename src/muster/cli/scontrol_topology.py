"""``scontrol show topology [NAME]``: the network topology as the controller reads it
(topology.conf): one line per switch, or per block and aggregated block, as Slurm
prints them; NAME keeps the lines of that switch or block, or of those holding that
node. The lines are ``core.topoconf.show_topology``'s, sent with ``/v1/config``."""

from __future__ import annotations

import sys

from muster.cli.common import CommandError, write_out
from muster.client.controller import connect, connect_message

PROG = "scontrol"


def show_topology(target: str | None) -> int:
    from muster.protocol.client import ApiError, ConnectError

    try:
        answer = connect(PROG).get("/v1/config")
    except (ApiError, ConnectError) as e:
        text = connect_message(e) if isinstance(e, ConnectError) else getattr(e, "message", str(e))
        raise CommandError(f"slurm_load_topo error: {text}", 1, raw=True) from None
    lines = answer.get("topology")
    if not lines:
        sys.stdout.write("No topology information available\n")
        return 0
    if target:
        wanted = [line for line in lines if _names(line, target)]
        if not wanted:
            sys.stdout.write(f"No topology information available for {target}\n")
            return 1
        lines = wanted
    write_out("".join(f"{line}\n" for line in lines))
    return 0


def _names(line: str, target: str) -> bool:
    """Whether ``line`` is the switch or block ``target`` or holds node ``target``."""
    from muster.core.hostlist import HostlistError, expand

    fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
    name = fields.get("SwitchName") or fields.get("BlockName") or fields.get("AggregatedBlock")
    if name == target:
        return True
    try:
        return target in expand(fields.get("Nodes", ""))
    except HostlistError:
        return False
