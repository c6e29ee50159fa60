"""Advance reservations as the controller keeps them (``scontrol create|update|delete
reservation``). The scheduler sees them as ``ReservationView``s and keeps other jobs off
their nodes during their windows (see ``muster.sched.reservations``).

Validation here is about the request itself: a name, a window that ends after it starts,
nodes that exist (or a count that can be met), users or accounts to let in, known flags.
Without ``IGNORE_JOBS`` (or ``MAINT``, which Slurm lets overlap running work) the chosen
nodes must not be running jobs that may still run when the window opens.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from muster.core.errors import InvalidRequest

FLAGS = {"MAINT", "IGNORE_JOBS", "DAILY", "WEEKLY", "HOURLY", "FLEX", "OVERLAP", "SPEC_NODES"}


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Reservation:
        return cls(**data)

    def active(self, now: float) -> bool:
        return self.start <= now < self.end


def check_flags(flags: list[str]) -> list[str]:
    out = []
    for f in flags:
        up = f.strip().upper()
        if up not in FLAGS:
            raise InvalidRequest(f"Error creating the reservation: Invalid flag: {f}")
        out.append(up)
    return out


def check_window(start: float, end: float) -> None:
    if end <= start:
        raise InvalidRequest("Error creating the reservation: Invalid time specification (end before start)")
