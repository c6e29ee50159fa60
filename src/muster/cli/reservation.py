"""``scontrol create|update|delete|show reservation``: holding capacity for a team.

Arguments are Slurm's ``Key=Value`` words (keys case-blind, any unambiguous prefix:
``start=now``): ``ReservationName``, ``StartTime`` (``now``, ``now+1hour``, ``teatime``,
``2026-12-24T08:00`` ...), ``EndTime``, ``Duration`` (minutes or Slurm's time forms, seconds
rounded up to a minute, ``UNLIMITED`` a year), ``Nodes`` (a hostlist or ``ALL``), ``NodeCnt``
(``2``, ``1k``), ``Features`` (``a&b``, ``a|b``; empty: none), ``Users``, ``Accounts``,
``Flags`` (MAINT, IGNORE_JOBS, OVERLAP, REPLACE, REPLACE_DOWN, STATIC_ALLOC, DAILY ...),
``PartitionName``. Slurm's other keys (CoreCnt, Licenses, TRES ...) get a clear refusal.
"""

from __future__ import annotations

import sys

from muster.cli.common import CommandError
from muster.client.controller import connect, connect_message

TYPE_CHECKING = False  # typing costs a command milliseconds to import
if TYPE_CHECKING:
    from typing import Any

PROG = "scontrol"

# Slurm's keys in the order scontrol(1) lists them; a key may be given in full, by an
# alias, or by any unambiguous prefix (``start=``, ``user=``, ``partition=``), case-blind.
_KEYS = {
    "reservationname": "name",
    "accounts": "accounts",
    "duration": "duration",
    "endtime": "end_time",
    "features": "features",
    "flags": "flags",
    "nodecnt": "node_cnt",
    "nodes": "nodes",
    "partitionname": "partition",
    "starttime": "start_time",
    "users": "users",
}
_ALIASES = {
    "reservation": "name",
    "nodelist": "nodes",
    "nodecount": "node_cnt",
    "node": "nodes",
    "user": "users",
    "account": "accounts",
    "partition": "partition",
    "feature": "features",
}
# Documented keys muster does not implement: a clear error rather than "Invalid input".
_UNSUPPORTED = (
    "allowedpartitions",
    "burstbuffer",
    "corecnt",
    "groups",
    "licenses",
    "maxstartdelay",
    "qos",
    "skip",
    "tres",
    "trespernode",
)
# Slurm stores an UNLIMITED duration as a year (the reservation then shows its end).
UNLIMITED_DURATION = 365 * 86400


def _field(key: str) -> str | None:
    low = key.lower()
    if low in _ALIASES:
        return _ALIASES[low]
    if low in _KEYS:
        return _KEYS[low]
    hits = {f for k, f in _KEYS.items() if len(low) >= 2 and k.startswith(low)}
    if len(hits) == 1:
        return hits.pop()
    if any(u.startswith(low) for u in _UNSUPPORTED) and len(low) >= 2:
        raise CommandError(f"{key} is not supported by muster's reservations", 1)
    return None


def parse_node_cnt(value: str) -> int:
    """``NodeCnt``: a positive number, ``k``/``K`` multiplying it by 1024."""
    text = value.strip()
    mult = 1
    if text[-1:] in ("k", "K"):
        text, mult = text[:-1], 1024
    if not text.isdigit() or int(text) < 1:
        raise CommandError(f"Invalid node count: {value}", 1)
    return int(text) * mult


def parse_duration(value: str) -> int:
    """``Duration``: Slurm's time forms in seconds, rounded up to a whole minute;
    ``UNLIMITED`` (or ``INFINITE``) a year, as Slurm keeps it."""
    from muster.core.timefmt import MAX_TIME_LIMIT, parse_time_limit

    secs = parse_time_limit(value)
    if secs is None:
        return UNLIMITED_DURATION
    secs = -(-secs // 60) * 60
    if secs < 60 or secs > MAX_TIME_LIMIT:
        raise CommandError(f"Invalid duration: {value}", 1)
    return secs


def parse_words(words: list[str], now: float) -> dict[str, object]:
    """Turn ``Key=Value`` words into the API body; raise CommandError on bad input."""
    from muster.core.hostlist import HostlistError, expand
    from muster.core.timefmt import TimeFormatError, parse_timestamp

    body: dict[str, object] = {}
    for word in words:
        key, eq, value = word.partition("=")
        field = _field(key) if eq else None
        if field is None:
            raise CommandError(f"Invalid input: {word}", 1)
        try:
            if field in ("start_time", "end_time"):
                body[field] = parse_timestamp(value, now)
            elif field == "duration":
                body[field] = parse_duration(value)
            elif field == "node_cnt":
                body[field] = parse_node_cnt(value)
            elif field == "nodes":
                if value.upper() == "ALL":
                    body[field] = None
                    body["node_cnt"] = -1
                elif value:
                    body[field] = expand(value)
            elif field in ("users", "accounts", "flags"):
                body[field] = [v for v in value.split(",") if v]
            elif field == "features":
                body[field] = value
            else:
                body[field] = value
        except (TimeFormatError, HostlistError) as e:
            raise CommandError(f"Invalid {key} value: {value} ({e})", 1) from None
    return body


def _api_error(verb: str, err: Exception) -> CommandError:
    from muster.protocol.client import ConnectError

    if isinstance(err, ConnectError):
        return CommandError(f"slurm_{verb}_reservation error: {connect_message(err)}", 1, raw=True)
    message = getattr(err, "message", str(err))
    if message.startswith("Error "):
        return CommandError(message, 1, raw=True)
    return CommandError(f"Error {verb}ing the reservation: {message}", 1, raw=True)


def _now() -> float:
    from muster.core.clock import SystemClock

    return SystemClock().now()


def spec_words(words: list[str]) -> list[str]:
    """``create`` words without the bare keyword (``reservation``, ``res``) before the
    specification; ``create ReservationName=x ...`` has none (its first word is a key)."""
    if words and "=" not in words[0] and words[0].lower().startswith("res"):
        return words[1:]
    return words


def create(words: list[str]) -> int:
    from muster.protocol.client import ApiError, ConnectError

    body = parse_words(spec_words(words), _now())
    ctl = connect(PROG)
    if body.get("node_cnt") == -1:  # Nodes=ALL
        try:
            body["nodes"] = [n["name"] for n in ctl.get("/v1/nodes").get("nodes", [])]
        except (ApiError, ConnectError) as e:
            raise _api_error("creat", e) from None
        del body["node_cnt"]
    try:
        answer = ctl.post("/v1/reservations", body)
    except (ApiError, ConnectError) as e:
        raise _api_error("creat", e) from None
    sys.stdout.write(f"Reservation created: {answer['name']}\n")
    return 0


def update(words: list[str]) -> int:
    from muster.protocol.client import ApiError, ConnectError

    body = parse_words(words, _now())
    name = body.pop("name", None)
    if not name:
        raise CommandError("Reservation must be given.  No reservation update.", 1, raw=True)
    try:
        connect(PROG).post(f"/v1/reservations/{name}/update", body)
    except (ApiError, ConnectError) as e:
        raise _api_error("updat", e) from None
    sys.stdout.write("Reservation updated.\n")
    return 0


def delete(words: list[str]) -> int:
    from muster.protocol.client import ApiError, ConnectError

    names = [w.partition("=")[2] if "=" in w else w for w in words]
    if not names:
        raise CommandError("Reservation name must be given", 1)
    for name in names:
        try:
            connect(PROG).post(f"/v1/reservations/{name}/delete", {})
        except (ApiError, ConnectError) as e:
            raise CommandError(f"delete_reservation {name}: {getattr(e, 'message', e)}", 1, raw=True) from None
    return 0


def record(res: dict[str, Any]) -> list[str]:
    from muster.core.timefmt import format_hms, format_timestamp

    def null(v: object) -> str:
        return ",".join(v) if isinstance(v, list) and v else (str(v) if v else "(null)")

    duration = format_hms(int(res["end"] - res["start"]))
    return [
        f"ReservationName={res['name']} StartTime={format_timestamp(res['start'])} "
        f"EndTime={format_timestamp(res['end'])} Duration={duration}",
        f"Nodes={res['nodelist'] or '(null)'} NodeCnt={res['node_cnt']} CoreCnt={res['core_cnt']} "
        f"Features={res.get('features') or '(null)'} PartitionName={null(res.get('partition'))} Flags={','.join(res['flags'])}",
        f"TRES=cpu={res['core_cnt']}" + (f",gres/gpu={res['gpu_cnt']}" if res.get("gpu_cnt") else ""),
        f"Users={null(res['users'])} Groups=(null) Accounts={null(res['accounts'])} Licenses=(null) "
        f"State={res['state']} BurstBuffer=(null) Watts=n/a",
        "MaxStartDelay=(null)",
    ]


def show(target: str | None, oneliner: bool) -> int:
    from muster.protocol.client import ApiError, ConnectError

    try:
        items = connect(PROG).get("/v1/reservations").get("reservations") or []
    except (ApiError, ConnectError) as e:
        raise CommandError(f"slurm_load_reservations error: {getattr(e, 'message', e)}", 1, raw=True) from None
    if target:
        items = [r for r in items if r["name"] == target]
        if not items:
            sys.stdout.write(f"Reservation {target} not found\n")
            return 1
    if not items:
        sys.stdout.write("No reservations in the system\n")
        return 0
    out = []
    for res in items:
        lines = record(res)
        out.append(
            " ".join(lines) + "\n" if oneliner else lines[0] + "\n" + "".join(f"   {x}\n" for x in lines[1:]) + "\n"
        )
    sys.stdout.write("".join(out))
    return 0
