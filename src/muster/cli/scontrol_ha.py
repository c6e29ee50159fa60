"""``scontrol ping`` and ``scontrol takeover``: the controllers, primary and backups.

``ping`` asks every ``SlurmctldHost`` in turn and prints one line each, as Slurm does, and
marks the active controller (the one serving) when there are several::

    Slurmctld(primary) at head1 is DOWN
    Slurmctld(backup) at head2 is UP (active)

(a backup in standby answers, so it is UP; one that does not answer, or is hung, is DOWN;
with three or more controllers the backups are ``backup1``, ``backup2``... as in Slurm). It
works from any host: over TCP it proves the caller with a credential as every command does.
The status is 1 when no controller answers.

``takeover [INDEX]`` asks controller ``INDEX`` (default 1, the first backup; 0, the
primary, fails back to it) to take over from the active controller and waits, up to
``SlurmctldTimeout``, until it serves.
"""

from __future__ import annotations

import sys

from muster.cli.common import CommandError
from muster.client.controller import user_credential
from muster.client.failover import ask_one, mode
from muster.client.settings import load_settings

PROG = "scontrol"
PING_TIMEOUT = 3.0  # a controller that accepted but says nothing this long is DOWN (hung)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def role_name(index: int, count: int) -> str:
    """Slurm's name of controller ``index``: primary, backup (the one backup), backupN."""
    if index == 0:
        return "primary"
    return "backup" if count == 2 else f"backup{index}"


def ping_lines(settings: Any) -> tuple[list[str], int]:
    """One line per controller, and how many answered. A controller that answers at all is
    UP (a refusal is an answer). With several controllers the active one, the one that
    serves commands, is marked ``(active)``; the others are backups in standby."""
    from muster.protocol.client import ApiError, ConnectError

    hosts = settings.controllers
    lines, up = [], 0
    for index, (host, _addr) in enumerate(hosts):
        active = False
        try:
            answer = ask_one(settings, index, "GET", "/v1/ping", PING_TIMEOUT, user_credential)
            state = "UP"
            active = not (isinstance(answer, dict) and answer.get("mode") == "standby")
        except ApiError as e:
            state = "UP"
            active = e.code != "standby"
        except (ConnectError, OSError):
            state = "DOWN"
        up += state == "UP"
        mark = " (active)" if active and len(hosts) > 1 else ""
        lines.append(f"Slurmctld({role_name(index, len(hosts))}) at {host} is {state}{mark}")
    return lines, up


def ping() -> int:
    lines, up = ping_lines(load_settings(PROG))
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0 if up else 1


def takeover(words: list[str]) -> int:
    import time

    from muster.protocol.client import ApiError, ConnectError

    settings = load_settings(PROG)
    count = len(settings.controllers)
    raw = words[0] if words else "1"
    if count < 2:
        raise CommandError("takeover: no backup controller is configured (one SlurmctldHost line)")
    if not raw.isdigit() or not 0 <= int(raw) < count:
        raise CommandError(f"takeover: invalid controller index {raw!r}: expected 0 to {count - 1}")
    index = int(raw)
    try:
        ask_one(settings, index, "POST", "/v1/ha/takeover", 10.0, user_credential)
    except ApiError as e:
        raise CommandError(f"slurm_takeover error: {e.message}", 1) from None
    except ConnectError as e:
        raise CommandError(f"slurm_takeover error: {e}", 1) from None
    deadline = time.monotonic() + settings.slurmctld_timeout
    while time.monotonic() < deadline:
        if mode(settings, index, user_credential) == "active":
            return 0
        time.sleep(0.2)
    host = settings.controllers[index][0]
    raise CommandError(f"takeover: {host} did not become active within SlurmctldTimeout", 1)
