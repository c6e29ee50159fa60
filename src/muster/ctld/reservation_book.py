"""``scontrol create|update|delete reservation``: administrators only; each change is
committed to the store before memory takes it. The reservations themselves (their window,
flags, who may use them) are ``reservations.Reservation``. ``replace_nodes`` swaps the DOWN or
DRAINED nodes of a reservation chosen by count for idle ones (the controller calls it each
second, with its node checks)."""

from __future__ import annotations

from typing import Any

from muster.core.errors import InvalidPartition, InvalidRequest, PermissionDenied
from muster.core.states import NodeState
from muster.ctld.identity import Identity
from muster.ctld.reservations import Reservation, check_features, check_flags, check_window, features_match
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
        features = check_features(req.get("features") or "")
        if req.get("nodes") and "SPEC_NODES" not in flags:
            flags.append("SPEC_NODES")  # Slurm's mark of named nodes (output only)
        res = Reservation(name, start, float(end), [], users, accounts, flags, req.get("partition"), features)
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

    def _taken(self, res: Reservation) -> set[str]:
        """Nodes of the other reservations whose windows meet ``res``'s."""
        return {
            n
            for r in self.state.reservations.values()
            if r.name != res.name and r.start < res.end and res.start < r.end
            for n in r.nodes
        }

    def _pool(self, res: Reservation) -> list[str]:
        """The nodes ``res`` may be given by count: in service, in its partition, with its
        features, in node order."""
        nodes = list(self.state.nodes.values())
        if res.partition:
            part = self.state.config.partition(res.partition)
            if part is None:
                raise InvalidPartition()
            nodes = [n for n in nodes if n.name in part.nodes]
        return [n.name for n in nodes if n.available and features_match(res.features, n.features)]

    def _reservation_nodes(self, res: Reservation, nodes: list[str] | None, count: int | None) -> list[str]:
        ignore_jobs = "IGNORE_JOBS" in res.flags or "MAINT" in res.flags
        may_overlap = "OVERLAP" in res.flags or "MAINT" in res.flags
        taken = self._taken(res)
        if nodes:
            for n in nodes:
                if n not in self.state.nodes:
                    raise InvalidRequest(f"Error creating the reservation: Invalid node name specified: {n}")
            if not may_overlap and any(n in taken for n in nodes):
                raise InvalidRequest("Error creating the reservation: Requested nodes are busy")
            if not ignore_jobs and any(self._busy_during(n, res) for n in nodes):
                raise InvalidRequest("Error creating the reservation: Requested nodes are busy")
            return list(nodes)
        pool = self._pool(res)
        if not count and res.partition:
            count = len(pool)  # PartitionName alone: all of its nodes
        if not count or count < 1:
            raise InvalidRequest("Error creating the reservation: Nodes or NodeCnt must be given")
        free = [n for n in pool if n not in taken and (ignore_jobs or not self._busy_during(n, res))]
        if may_overlap and len(free) < count:
            free += [n for n in pool if n in taken and n not in free and (ignore_jobs or not self._busy_during(n, res))]
        if len(free) < count:
            raise InvalidRequest("Error creating the reservation: Requested nodes are busy")
        return free[:count]  # node order: contiguous where possible

    def replace_nodes(self, now: float) -> list[str]:
        """Swap each replaceable reservation's DOWN or DRAINED nodes (``REPLACE``: also those
        running jobs) for idle nodes that no other reservation holds; return the names of the
        reservations changed. Nodes are swapped only while some idle one is there to take."""
        changed = []
        for res in list(self.state.reservations.values()):
            if res.end <= now or not res.replaceable():
                continue
            replace_busy = "REPLACE" in res.flags
            # DOWN or DRAINED, not merely unheard of yet (a controller just restarted, an
            # agent not registered again): those keep their place
            bad = [
                n
                for n in res.nodes
                if (node := self.state.nodes.get(n)) is None
                or node.drain
                or node.base_state() is NodeState.DOWN
                or (replace_busy and bool(node.allocs))
            ]
            if not bad:
                continue
            try:
                pool = self._pool(res)
            except InvalidPartition:
                continue  # its partition is gone: nothing to choose from
            taken = self._taken(res) | set(res.nodes)
            idle = [n for n in pool if n not in taken and not self.state.nodes[n].allocs]
            swaps = dict(zip(bad, idle, strict=False))
            if not swaps:
                continue
            new = Reservation.from_dict(res.to_dict())
            new.nodes = sorted(
                [swaps.get(n, n) for n in res.nodes],
                key=lambda n: self.state.nodes[n].index if n in self.state.nodes else 0,
            )
            self.state.store.put_reservation(res.name, new.to_dict())
            self.state.reservations[res.name] = new
            changed.append(res.name)
        return changed

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
            new.flags = check_flags(req["flags"]) + (["SPEC_NODES"] if "SPEC_NODES" in new.flags else [])
        if req.get("features") is not None:
            new.features = check_features(req["features"])
        if req.get("nodes") and "SPEC_NODES" not in new.flags:
            new.flags.append("SPEC_NODES")
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
