"""Advance reservations as the controller keeps them (``scontrol create|update|delete
reservation``). The scheduler sees them as ``ReservationView``s and keeps other jobs off
their nodes during their windows (see ``muster.sched.reservations``).

Validation here is about the request itself: a name, a window that ends after it starts,
nodes that exist (or a count that can be met), users or accounts to let in, known flags.
Without ``IGNORE_JOBS`` (or ``MAINT``, which Slurm lets overlap running work) the chosen
nodes must not be running jobs that may still run when the window opens.

Flags, as scontrol(1) documents them: ``SPEC_NODES`` (output only) marks a reservation whose
nodes were named; one chosen by count replaces its DOWN or DRAINED nodes with idle ones
(``REPLACE_DOWN``, the default), ``REPLACE`` also those allocated to jobs, ``MAINT`` and
``STATIC_ALLOC`` never (``replaceable``). ``Features`` restricts the nodes chosen by count:
``a&b`` needs every feature, ``a|b`` any (``features_match``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from muster.core.errors import InvalidRequest

FLAGS = {
    "MAINT",
    "IGNORE_JOBS",
    "DAILY",
    "WEEKLY",
    "HOURLY",
    "FLEX",
    "OVERLAP",
    "SPEC_NODES",
    "REPLACE",
    "REPLACE_DOWN",
    "STATIC_ALLOC",
}


@dataclass(slots=True)
class Reservation:
    name: str
    start: float
    end: float
    nodes: list[str]
    users: list[str] = field(default_factory=list)
    accounts: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    partition: str | None = None
    features: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if not data["features"]:
            del data["features"]  # as releases before Features= stored it: they read it back
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Reservation:
        """Read a stored reservation; fields a newer release added are left out."""
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})

    def active(self, now: float) -> bool:
        return self.start <= now < self.end

    def replaceable(self) -> bool:
        """Its nodes were chosen by count and may be swapped for idle ones."""
        return not {"SPEC_NODES", "MAINT", "STATIC_ALLOC"} & set(self.flags)


def check_features(text: str) -> str:
    """``Features=``: names joined by ``&`` (all) or ``|`` (any), not both; empty clears."""
    import re

    value = text.strip()
    if not value:
        return ""
    if ("&" in value and "|" in value) or not re.fullmatch(r"[A-Za-z0-9_.\-]+(?:[&|][A-Za-z0-9_.\-]+)*", value):
        raise InvalidRequest(
            f"Error creating the reservation: Invalid feature specification: {text} "
            "(muster takes a&b or a|b, without brackets or counts)"
        )
    return value


def features_match(spec: str, features: tuple[str, ...] | list[str]) -> bool:
    if not spec:
        return True
    have = set(features)
    if "|" in spec:
        return any(f in have for f in spec.split("|"))
    return all(f in have for f in spec.split("&"))


def check_flags(flags: list[str]) -> list[str]:
    out = []
    for f in flags:
        up = f.strip().upper()
        if up not in FLAGS:
            raise InvalidRequest(f"Error creating the reservation: Invalid flag: {f}")
        if up not in out:
            out.append(up)
    return out


def check_window(start: float, end: float) -> None:
    if end <= start:
        raise InvalidRequest("Error creating the reservation: Invalid time specification (end before start)")
