"""Resource vocabulary: memory sizes, GRES requests and TRES strings.

A GRES request names a generic resource per node (``gpu:2``, ``gpu:a100:4``); only GPUs
are scheduled today, other names are rejected at submit like Slurm does for a GresType it
does not know.
"""

from __future__ import annotations

import re

from muster.core.memtext import format_mem  # noqa: F401 - re-exported: resources is where callers look

_MEM_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)B?\s*$", re.IGNORECASE)
_MEM_FACTORS = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, "P": 1024**3}


def parse_mem_mb(text: str) -> int:
    """Slurm memory sizes: a number with an optional K/M/G/T suffix; default unit MB."""
    m = _MEM_RE.match(text)
    if not m:
        raise ValueError(f"Invalid memory specification: {text}")
    value = float(m.group(1)) * _MEM_FACTORS[m.group(2).upper()]
    return int(-(-value // 1))  # round up: never give less than asked for


class GresRequest:
    """One generic resource asked for per node: name, optional type, count."""

    __slots__ = ("name", "type", "count")

    def __init__(self, name: str, type: str | None, count: int) -> None:
        self.name = name
        self.type = type
        self.count = count

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GresRequest) and (self.name, self.type, self.count) == (
            other.name,
            other.type,
            other.count,
        )

    def __repr__(self) -> str:
        return f"GresRequest({self.name!r}, {self.type!r}, {self.count})"

    def __str__(self) -> str:
        return ":".join(p for p in (self.name, self.type, str(self.count)) if p)


# The one reader of GRES text (``name[[:type]:count]``): job requests (``--gres``, the API's
# ``gres``) call ``parse_gres``/``gpu_request``, slurm.conf's ``Gres=`` calls ``parse_gres_entry``.
_GRES_NAME_RE = r"^[A-Za-z][A-Za-z0-9_\-]*$"
# A type: letters, digits, "_", "." or "-", not starting with a sign and not a number
# ("a100", "1g.5gb" for MIG slices; "-2" or "1.5" is a bad count, not a type).
_GRES_TYPE_RE = r"^(?![0-9.]+$)[A-Za-z0-9][A-Za-z0-9_.\-]*$"
_GRES_COUNT_RE = r"^([0-9]+)([KMGTkmgt]?)$"  # ASCII digits only: int() would take "\u0663"
_GRES_FACTORS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_MAX_GRES_COUNT = 2**64 - 1  # gres.conf's Count is 64 bits (bandwidth:lustre:4G is a node's)
_MAX_REQUEST_COUNT = 2**31 - 1  # a request's count: never a real one above this
GRES_SPEC_ERROR = "Invalid generic resource (gres) specification"


class GresError(ValueError):
    """Malformed GRES text. ``str()`` is Slurm's message; ``count`` says whether the count
    (rather than the entry's shape or name) was what was wrong, for callers that say more."""

    def __init__(self, entry: str, count: bool = False, message: str = GRES_SPEC_ERROR) -> None:
        super().__init__(message)
        self.entry = entry
        self.count = count


def parse_gres_entry(entry: str, max_count: int = _MAX_GRES_COUNT) -> GresRequest:
    """One ``name[[:type]:count]``: ``gpu``, ``gpu:2``, ``gpu:a100``, ``gpu:a100:4``, ``nic:1k``.

    The count defaults to 1 and may carry Slurm's K/M/G/T suffix (times 1024 each), up to
    ``max_count``. Raises GresError on anything else.
    """
    fields = entry.split(":")
    if len(fields) > 3 or not re.match(_GRES_NAME_RE, fields[0]):
        raise GresError(entry)
    count_match = re.match(_GRES_COUNT_RE, fields[-1]) if len(fields) > 1 else None
    if count_match is not None:
        count = int(count_match.group(1)) * _GRES_FACTORS[count_match.group(2).upper()]
        gtype = fields[1] if len(fields) == 3 else None
    elif len(fields) == 3:
        raise GresError(entry, count=True)  # "gpu:a100:x", "gpu:a100:-1"
    else:
        count, gtype = 1, (fields[1] if len(fields) == 2 else None)
    if gtype is not None and not re.match(_GRES_TYPE_RE, gtype):
        raise GresError(entry, count=True)  # "gpu:-2", "gpu:1.5": a count that is not one, not a type
    if count > max_count:
        raise GresError(entry, count=True)
    return GresRequest(fields[0], gtype, count)


def parse_gres(text: str) -> list[GresRequest]:
    """A request's comma separated list: ``gpu:2``, ``gpu:a100:4,nic``; each entry may carry
    the ``gres/`` (or older ``gres:``) prefix Slurm writes in TRES strings.

    Raises GresError("Invalid generic resource (gres) specification") on malformed text.
    """
    out: list[GresRequest] = []
    for item in text.split(","):
        item = item.strip()
        for prefix in ("gres/", "gres:"):
            if item.startswith(prefix):
                item = item[len(prefix) :]
        out.append(parse_gres_entry(item, _MAX_REQUEST_COUNT))
    return out


def gpu_request(text: str) -> tuple[int, str | None]:
    """A job's ``--gres`` as the GPUs it asks for on each node: ``(count, type or None)``.

    ``none`` asks for none (Slurm's ``--gres=none``). Only GPUs are scheduled: another name
    is refused as Slurm refuses a GresType it does not know, and so is a second GPU entry
    (``gpu:a100:1,gpu:v100:1``), since a job runs on one GPU type here.
    """
    if text.strip().lower() == "none":
        return 0, None
    requests = parse_gres(text)
    if any(r.name != "gpu" for r in requests):
        raise GresError(text)
    if len(requests) > 1:
        raise GresError(text, message=f"{GRES_SPEC_ERROR}: one GPU type per job")
    return requests[0].count, requests[0].type


def parse_gpus(text: str) -> tuple[str | None, int]:
    """``--gpus``/``--gpus-per-node``/``--gpus-per-task``: ``4`` or ``a100:4``."""
    parts = text.strip().split(":")
    try:
        if len(parts) == 1:
            return None, int(parts[0])
        if len(parts) == 2:
            return parts[0], int(parts[1])
    except ValueError:
        pass
    raise ValueError(f"Invalid GPU specification: {text}")


def format_tres(cpus: int, mem_mb: int, nodes: int, gpus: int = 0, billing: int | None = None) -> str:
    """``cpu=2,mem=2000M,node=2,billing=2,gres/gpu=4`` in Slurm's order."""
    parts = [f"cpu={cpus}", f"mem={format_mem(mem_mb)}", f"node={nodes}"]
    parts.append(f"billing={cpus if billing is None else billing}")
    if gpus:
        parts.append(f"gres/gpu={gpus}")
    return ",".join(parts)
