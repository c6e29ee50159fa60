"""``scontrol create|update|delete reservation``: administrators only; each change is
committed to the store before memory takes it. The reservations themselves (their window,
flags, who may use them) are ``reservations.Reservation``."""

from __future__ import annotations

from typing import Any

from muster.core.errors import InvalidPartition, InvalidRequest, PermissionDenied
from muster.ctld.identity import Identity
from muster.ctld.reservations import Reservation, check_flags, check_window
from muster.ctld.state import ClusterState


class ReservationBook:
    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def create(self, who: Identity, req: dict[str, Any]) -> Reservation:
        """``scontrol create reservation``: administrators only."""
        if not who.admin:
            raise PermissionDenied()
        now = self.state.clock.now()
        name = req.get("name") or self._reservation_name(who)
        if name in self.state.reservations:
            raise InvalidRequest("Error creating the reservation: Reservation name in use")
        flags = check_flags(req.get("flags") or [])
        start = req.get("start_time")
        start = now if start is None else float(start)
        end = req.get("end_time")
        if end is None:
            if req.get("duration") is None:
                raise InvalidRequest("Error creating the reservation: Duration or EndTime must be given")
            end = start + int(req["duration"])
        check_window(start, float(end))
        users = list(req.get("users") or [])
        accounts = list(req.get("accounts") or [])
        if not users and not accounts:
            raise InvalidRequest("Error creating the reservation: Either Users or Accounts must be specified")
        res = Reservation(name, start, float(end), [], users, accounts, flags, req.get("partition"))
        res.nodes = self._reservation_nodes(res, req.get("nodes"), req.get("node_cnt"))
        self.state.store.put_reservation(name, res.to_dict())  # committed first: memory follows
        self.state.reservations[name] = res
        return res

    def _reservation_name(self, who: Identity) -> str:
        n = 1
        while f"{who.user}_{n}" in self.state.reservations:
            n += 1
        return f"{who.user}_{n}"

    def _busy_during(self, node: str, res: Reservation) -> bool:
        """A job on ``node`` that may still run when the window opens."""
        for job in self.state.jobs.values():
            if job.is_active and node in job.nodes:
                end = job.expected_end()
                if end is None or end > res.start:
                    return True
        return False

    def _reservation_nodes(self, res: Reservation, nodes: list[str] | None, count: int | None) -> list[str]:
        ignore_jobs = "IGNORE_JOBS" in res.flags or "MAINT" in res.flags
        others = [
            r
            for r in self.state.reservations.values()
            if r.name != res.name and r.start < res.end and res.start < r.end
        ]
        taken = {n for r in others for n in r.nodes}
        pool = [n.name for n in self.state.nodes.values()]
        if res.partition:
            part = self.state.config.partition(res.partition)
            if part is None:
                raise InvalidPartition()
            pool = [n for n in pool if n in part.nodes]
        if nodes:
            for n in nodes:
                if n not in self.state.nodes:
                    raise InvalidRequest(f"Error creating the reservation: Invalid node name specified: {n}")
            if "OVERLAP" not in res.flags and any(n in taken for n in nodes):
                raise InvalidRequest("Error creating the reservation: Requested nodes are busy")
            if not ignore_jobs and any(self._busy_during(n, res) for n in nodes):
                raise InvalidRequest("Error creating the reservation: Requested nodes are busy")
            return list(nodes)
        if not count or count < 1:
            raise InvalidRequest("Error creating the reservation: Nodes or NodeCnt must be given")
        free = [n for n in pool if n not in taken and (ignore_jobs or not self._busy_during(n, res))]
        if len(free) < count:
            raise InvalidRequest("Error creating the reservation: Requested nodes are busy")
        return free[:count]  # node order: contiguous where possible

    def update(self, who: Identity, name: str, req: dict[str, Any]) -> Reservation:
        if not who.admin:
            raise PermissionDenied()
        res = self.state.reservations.get(name)
        if res is None:
            raise InvalidRequest(f"Reservation {name} not found")
        new = Reservation.from_dict(res.to_dict())
        if req.get("start_time") is not None:
            new.start = float(req["start_time"])
        if req.get("end_time") is not None:
            new.end = float(req["end_time"])
        elif req.get("duration") is not None:
            new.end = new.start + int(req["duration"])
        check_window(new.start, new.end)
        for key in ("users", "accounts"):
            if req.get(key) is not None:
                setattr(new, key, list(req[key]))
        if req.get("flags") is not None:
            new.flags = check_flags(req["flags"])
        if req.get("nodes") is not None or req.get("node_cnt") is not None:
            new.nodes = self._reservation_nodes(new, req.get("nodes"), req.get("node_cnt"))
        self.state.store.put_reservation(name, new.to_dict())
        self.state.reservations[name] = new
        return new

    def delete(self, who: Identity, name: str) -> None:
        if not who.admin:
            raise PermissionDenied()
        if name not in self.state.reservations:
            raise InvalidRequest(f"Reservation {name} not found")
        for job in self.state.jobs.values():
            if job.is_active and job.spec.reservation == name:
                raise InvalidRequest("Reservation request has jobs running: delete refused")
        self.state.store.put_reservation(name, None)
        del self.state.reservations[name]
