"""``scontrol update job``'s request: ``JobId=N Key=Value ...`` words into the job ids and
the body of ``POST /v1/jobs/{id}/update``; ``scontrol update NodeName=...`` sent as is.

Keys are case-blind and limited to what the controller can change (``_UPDATE_KEYS``);
values are checked here with Slurm's messages (``Invalid TimeLimit value: x``, ``Nice
value out of range``) so a bad request never reaches the controller. ``now`` is a
parameter: ``StartTime=now+1hour`` is read against it (the wall clock only when the
caller gives none).
"""

from __future__ import annotations

from muster.cli.common import CommandError, split_ids
from muster.client.controller import connect, connect_message

PROG = "scontrol"


def split_job_ids(text: str) -> list[str]:
    """``common.split_ids`` with each id stripped."""
    return [i.strip() for i in split_ids(text)]


# update keys (lower case) -> body field
_UPDATE_KEYS = {
    "timelimit": "time_limit",
    "priority": "priority",
    "nice": "nice",
    "name": "name",
    "jobname": "name",
    "partition": "partition",
    "comment": "comment",
    "starttime": "begin_time",
    "begintime": "begin_time",
    "numnodes": "min_nodes",
    "minnodes": "min_nodes",
    "reqnodes": "min_nodes",
    "arraytaskthrottle": "array_throttle",
}


def parse_update(words: list[str], now: float | None = None) -> tuple[list[str], dict[str, object]]:
    """``jobid=N key=value ...`` -> (job ids, update body). Keys are case-blind."""
    ids: list[str] = []
    body: dict[str, object] = {}
    for word in words:
        key, eq, value = word.partition("=")
        k = key.lower()
        if not eq:
            raise CommandError(f"Invalid input: {word}\n{PROG}: error: Request aborted")
        if k in ("jobid", "job"):
            ids.extend(split_job_ids(value))
            continue
        field = _UPDATE_KEYS.get(k)
        if field is None:
            raise CommandError(f"Update of this parameter is not supported: {word}\n{PROG}: error: Request aborted")
        body[field] = _update_value(field, key, value, now)
    if not ids:
        raise CommandError("No job ID specified\nscontrol: error: Request aborted")
    if not body:
        raise CommandError("No changes specified\nscontrol: error: Request aborted")
    return ids, body


_NICE_RANGE = 2147483645  # Slurm's NICE_OFFSET - 3


def _update_value(field: str, key: str, value: str, now: float | None) -> object:
    if field == "time_limit":
        from muster.core.timefmt import MAX_TIME_LIMIT, TimeFormatError, parse_time_limit

        try:
            seconds = parse_time_limit(value)
        except TimeFormatError:
            raise CommandError(f"Invalid TimeLimit value: {value}") from None
        if not seconds:
            raise CommandError("TimeLimit=UNLIMITED is not supported by muster's update")
        if seconds > MAX_TIME_LIMIT:
            raise CommandError("Invalid time limit specification")
        return seconds
    if field in ("priority", "nice", "array_throttle"):
        text = value.strip()
        digits = text[1:] if text[:1] in "+-" else text
        if not (digits.isascii() and digits.isdigit()):
            raise CommandError(f"Invalid {key} value: {value}")
        number = int(text)
        if field == "nice" and abs(number) > _NICE_RANGE:
            raise CommandError(f"Nice value out of range (+/- {_NICE_RANGE}). Value ignored")
        if field == "priority" and not 0 <= number < 2**32 - 1:
            raise CommandError(f"Invalid {key} value: {value}")
        if field == "array_throttle" and not 0 <= number <= 2**31 - 1:
            raise CommandError(f"Invalid {key} value: {value}")
        return number
    if field == "min_nodes":
        lo = value.split("-", 1)[0]
        if not (lo.isascii() and lo.isdigit()) or not 1 <= int(lo) <= 2**31 - 1:
            raise CommandError(f"Invalid {key} value: {value}")
        return int(lo)
    if field == "begin_time":
        from muster.core.timefmt import TimeFormatError, parse_timestamp

        if now is None:
            from muster.core.clock import SystemClock

            now = SystemClock().now()
        try:
            return parse_timestamp(value, now)
        except TimeFormatError:
            raise CommandError(f"Invalid StartTime value: {value}") from None
    return value


def update_nodes(words: list[str]) -> int:
    """``scontrol update NodeName=node[1-2] State=DRAIN Reason="disk"``."""
    from muster.core.hostlist import HostlistError, expand
    from muster.protocol.client import ApiError, ConnectError

    body: dict[str, object] = {}
    for word in words:
        key, eq, value = word.partition("=")
        k = key.lower()
        if not eq:
            raise CommandError(f"Invalid input: {word}", 1)
        if k in ("nodename", "node"):
            try:
                body["names"] = expand(value)
            except HostlistError as e:
                raise CommandError(str(e)) from None
        elif k == "state":
            body["state"] = value
        elif k == "reason":
            body["reason"] = value
        else:
            raise CommandError(f"Update of {key} is not supported by muster", 1)
    try:
        connect(PROG).post("/v1/nodes/update", body)
    except ConnectError as e:
        raise CommandError(f"slurm_update error: {connect_message(e)}", 1, raw=True) from None
    except ApiError as e:
        raise CommandError(f"slurm_update error: {e.message}", 1, raw=True) from None
    return 0
