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


_MAX_GRES_COUNT = 2**31 - 1


def parse_gres(text: str) -> list[GresRequest]:
    """Parse ``gpu:2``, ``gpu:a100:4``, ``gpu``, ``gres/gpu:2``, comma separated lists.

    Raises ValueError("Invalid generic resource (gres) specification") on malformed text.
    """
    out: list[GresRequest] = []
    for item in text.split(","):
        item = item.strip()
        if item.startswith("gres/"):
            item = item[5:]
        if not item:
            raise ValueError("Invalid generic resource (gres) specification")
        parts = item.split(":")
        name = parts[0]
        gtype: str | None = None
        count = 1
        if len(parts) == 2:
            if parts[1].isascii() and parts[1].isdigit():
                count = int(parts[1])
            else:
                gtype = parts[1]
        elif len(parts) == 3:
            gtype = parts[1]
            if not (parts[2].isascii() and parts[2].isdigit()):
                raise ValueError("Invalid generic resource (gres) specification")
            count = int(parts[2])
        elif len(parts) > 3:
            raise ValueError("Invalid generic resource (gres) specification")
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_\-]*", name) or (
            gtype is not None and not re.fullmatch(r"[A-Za-z0-9_\-\.]+", gtype)
        ):
            raise ValueError("Invalid generic resource (gres) specification")
        if count > _MAX_GRES_COUNT:  # Slurm keeps the count in 32 bits: never a real request
            raise ValueError("Invalid generic resource (gres) specification")
        out.append(GresRequest(name, gtype, count))
    return out


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
