"""The controller's state and every change to it.

``Controller`` holds jobs and nodes in memory, persists each accepted change to the
``Store`` before returning, and never performs I/O towards agents itself: methods return
``Action`` objects (launch, terminate, signal) that ``app`` hands to ``dispatch``. This
keeps "decide" apart from "do" and makes the controller testable on a manual clock.
"""

from __future__ import annotations

import grp
import pwd
from dataclasses import dataclass, field
from typing import Any

from muster.core import lifecycle
from muster.core.arrays import JobRef
from muster.core.clock import Clock
from muster.core.config import Config
from muster.core.errors import (
    InvalidJobId,
    InvalidPartition,
    InvalidRequest,
    MusterError,
    PermissionDenied,
    Unsatisfiable,
)
from muster.core.job import Job, JobSpec, compute_shape
from muster.core.lifecycle import JobEvent
from muster.core.signals import parse_signal as core_parse_signal
from muster.core.states import JobState, Reason
from muster.ctld.accounting import Accounting
from muster.ctld.arrays import ArrayIndex, array_spec, make_tasks
from muster.ctld.nodes import NodeRuntime
from muster.ctld.reservations import Reservation, check_flags, check_window
from muster.ctld.store import Store
from muster.ctld.view import node_views, partition_views, reservation_views
from muster.sched.dependencies import parse_dependency
from muster.sched.filters import BAD_PARTITION, NO_PARTITION, check_submit

DEPENDENCY_ERROR = "Job dependency problem"  # Slurm's text for ESLURM_DEPENDENCY


@dataclass(frozen=True, slots=True)
class Identity:
    """Who is calling, as proven by the transport (never taken from a request body)."""

    uid: int
    gid: int
    user: str
    group: str
    host: str
    admin: bool


@dataclass(slots=True)
class Launch:
    job: Job


@dataclass(slots=True)
class Terminate:
    job_id: int
    attempt: int
    nodes: list[str]
    reason: str


@dataclass(slots=True)
class SignalJob:
    job_id: int
    nodes: list[str]
    signal: int
    batch_only: bool


@dataclass(slots=True)
class NewLimit:
    """A running job's time limit changed: its batch host enforces the new one."""

    job_id: int
    node: str
    time_limit: int | None


Action = Launch | Terminate | SignalJob | NewLimit

def parse_signal(text: str | int) -> int:
    """A signal by name or number, as scancel and the API take it."""
    try:
        return core_parse_signal(text)
    except ValueError:
        raise InvalidRequest(f"Invalid signal: {text}") from None


def _usage(value: Any) -> dict[str, float] | None:
    """An agent's report of a script's resource use, checked: numbers, not negative."""
    if not isinstance(value, dict):
        return None
    try:
        out = {k: float(value[k]) for k in ("max_rss_kb", "user_cpu", "system_cpu")}
    except (KeyError, TypeError, ValueError):
        return None
    return out if all(v >= 0 for v in out.values()) else None


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


@dataclass(slots=True)
class _LostWatch:
    since: float


@dataclass
class Controller:
    config: Config
    store: Store
    clock: Clock
    jobs: dict[int, Job] = field(default_factory=dict)
    nodes: dict[str, NodeRuntime] = field(default_factory=dict)
    next_job_id: int = 1
    started_at: float = 0.0
    launching: set[int] = field(default_factory=set)
    lost: dict[int, _LostWatch] = field(default_factory=dict)
    # job_id -> final state, for jobs purged from memory (dependencies use it later)
    finished: dict[int, str] = field(default_factory=dict)
    reservations: dict[str, Reservation] = field(default_factory=dict)
    arrays: ArrayIndex = field(default_factory=ArrayIndex)
    # Associations, QOS, fair-share and limits (muster.ctld.accounting); set by load().
    accounting: Accounting | None = None
    # node -> out of service as last recorded in the store's node_events (sreport's Down)
    out_of_service: dict[str, bool] = field(default_factory=dict)

    # --- start-up -------------------------------------------------------------------

    def load(self) -> None:
        """Build memory from the configuration and the store (after a crash too)."""
        now = self.clock.now()
        self.started_at = now
        part_of: dict[str, list[str]] = {}
        for p in self.config.partitions:
            for n in p.nodes:
                part_of.setdefault(n, []).append(p.name)
        saved = self.store.load_nodes()
        for i, nc in enumerate(self.config.nodes):
            node = NodeRuntime(
                name=nc.name,
                index=i,
                addr=nc.addr,
                port=nc.port,
                cpus=nc.cpus,
                real_memory=nc.real_memory,
                gpus=nc.gpus,
                gpu_type=nc.gpu_type,
                gres=nc.gres,
                features=tuple(nc.features),
                weight=nc.weight,
                partitions=part_of.get(nc.name, []),
            )
            for k, v in saved.get(nc.name, {}).items():
                setattr(node, k, v)
            if nc.state.upper() in ("DOWN", "DRAIN") and nc.name not in saved:
                node.admin_down = nc.state.upper() == "DOWN"
                node.drain = nc.state.upper() == "DRAIN"
                node.reason = nc.reason or "configured"
            self.nodes[nc.name] = node
        for job in self.store.load_jobs(ended_after=now - self.config.min_job_age):
            self.jobs[job.job_id] = job
            if job.is_active:
                self._hold_resources(job)
        self.arrays.add(self.jobs.values())
        for name, data in self.store.load_reservations().items():
            self.reservations[name] = Reservation.from_dict(data)
        stored_next = int(self.store.get_meta("next_job_id", "0") or 0)
        self.next_job_id = max(self.config.first_job_id, stored_next, self.store.max_job_id() + 1)
        # Nodes with work on them are presumed alive until SlurmdTimeout says otherwise.
        for node in self.nodes.values():
            if node.allocs:
                node.last_seen = now
                node.responding = True
        self.accounting = Accounting.load(self.config, self.store, now)
        self.out_of_service = self.store.last_node_states()

    def _hold_resources(self, job: Job) -> None:
        for a in job.alloc:
            node = self.nodes.get(a.node)
            if node is not None:
                node.allocs[(job.job_id, job.restart_count)] = (a.cpus, a.mem, tuple(a.gpu_ids))

    def _release_resources(self, job: Job, attempt: int | None = None) -> None:
        key = (job.job_id, job.restart_count if attempt is None else attempt)
        for node in self.nodes.values():
            node.allocs.pop(key, None)

    # --- identity ---------------------------------------------------------------------

    def identity(self, uid: int, gid: int, host: str = "localhost") -> Identity:
        user = user_name(uid)
        admin = uid == 0 or user == self.config.slurm_user or user in self.config.admin_users
        return Identity(uid, gid, user, group_name(gid), host, admin)

    # --- submission -------------------------------------------------------------------

    def submit(self, spec: JobSpec, who: Identity) -> Job:
        """Accept a job (an array: all its tasks) durably; returns the (first) job."""
        now = self.clock.now()
        array = array_spec(spec, self.config.max_array_size)
        unknown_deps = self._unknown_dependencies(spec)
        partition = self._resolve_partition(spec)
        candidates = [self.config.partition(p) for p in (spec.partitions or [partition])]
        node_names = {n for p in candidates if p is not None for n in p.nodes}
        max_cpus = max((self.nodes[n].cpus for n in node_names if n in self.nodes), default=0)
        try:
            shape = compute_shape(spec, max_cpus, self.config.def_mem_per_cpu)
        except ValueError as e:
            raise InvalidRequest(str(e)) from None
        if spec.nodelist and len(spec.nodelist) > shape.nodes:
            shape.nodes = len(spec.nodelist)
        rejection = check_submit(
            spec,
            shape,
            partition_views(self.config),
            node_views(self.nodes.values()),
            reservation_views(self.reservations.values()),
            user=who.user,
            group=who.group,
            enforce_part_limits=(self.config.get("EnforcePartLimits") or "NO").upper(),
        )
        if rejection is not None:
            err: MusterError
            if rejection.message in (BAD_PARTITION, NO_PARTITION):
                err = InvalidPartition(rejection.message)
            else:
                err = Unsatisfiable(rejection.message)
            err.detail = rejection.detail
            raise err
        part_conf = self.config.partition(partition)
        assert part_conf is not None
        if self.accounting is not None:  # account, QOS and submit limits; may set spec's
            self.accounting.check_submit(
                spec, who, partition, self.jobs.values(),
                part_conf.default_time if part_conf.default_time is not None else part_conf.max_time,
            )
        time_limit = spec.time_limit
        if time_limit is None:
            time_limit = part_conf.default_time if part_conf.default_time is not None else part_conf.max_time
        job = Job(
            job_id=self.next_job_id,
            spec=spec,
            shape=shape,
            user=who.user,
            uid=who.uid,
            group=who.group,
            gid=who.gid,
            submit_time=now,
            submit_host=who.host,
            partition=partition,
            time_limit=time_limit,
            eligible_time=spec.begin_time if spec.begin_time and spec.begin_time > now else now,
        )
        if spec.hold:
            job.hold = "user"
            job.reason = Reason.HELD_USER
        job.unknown_deps = unknown_deps
        jobs = make_tasks(job, array) if array is not None else [job]
        self.next_job_id += len(jobs)
        self.store.record(
            now,
            [(j, "submit", {"uid": who.uid, "host": who.host}) for j in jobs],
            meta={"next_job_id": str(self.next_job_id)},
        )
        for j in jobs:
            self.jobs[j.job_id] = j
        self.arrays.add(jobs)
        return jobs[0]

    def _unknown_dependencies(self, spec: JobSpec) -> list[int]:
        """Check ``--dependency``'s syntax (Slurm's "Job dependency problem" otherwise) and
        list the ids that name no job, in memory or in the store: Slurm 22.05 accepts such
        a job and leaves it pending for ever (DependencyNeverSatisfied)."""
        if not spec.dependency:
            return []
        try:
            dep = parse_dependency(spec.dependency)
        except ValueError:
            raise InvalidRequest(DEPENDENCY_ERROR) from None
        return [
            job_id
            for job_id in dep.job_ids()
            if job_id not in self.jobs
            and job_id not in self.finished
            and job_id not in self.arrays.tasks
            and self.store.get_job(job_id) is None
        ]

    def _resolve_partition(self, spec: JobSpec) -> str:
        if not spec.partitions:
            default = self.config.default_partition()
            if default is None:
                raise InvalidPartition(NO_PARTITION)
            return default.name
        for name in spec.partitions:
            if self.config.partition(name) is None:
                raise InvalidPartition()
        return spec.partitions[0]

    # --- queries ------------------------------------------------------------------------

    def get_job(self, job_id: int) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise InvalidJobId()
        return job

    def resolve(self, ref: JobRef) -> list[Job]:
        """The jobs in memory a user's job id names: ``A`` (every task when A is an array),
        ``A_i``, ``A_[i-j]``."""
        return self.arrays.resolve(ref, self.jobs)

    def job_ids(self, refs: list[JobRef]) -> list[int]:
        """Job ids for references, arrays expanded to their tasks (for filters)."""
        return list(dict.fromkeys(i for ref in refs for i in self.arrays.job_ids(ref)))

    # --- user actions on jobs ----------------------------------------------------------

    def _check_owner(self, job: Job, who: Identity) -> None:
        if not who.admin and job.uid != who.uid:
            raise PermissionDenied()

    def select_jobs(
        self,
        job_ids: list[int] | None,
        users: list[str] | None = None,
        name: str | None = None,
        partitions: list[str] | None = None,
        states: list[str] | None = None,
    ) -> list[Job]:
        """Jobs in memory matching every given filter (states by long or short name)."""
        pool = [self.jobs[i] for i in job_ids if i in self.jobs] if job_ids else list(self.jobs.values())
        out = []
        for job in pool:
            if users and job.user not in users:
                continue
            if name is not None and job.spec.name != name:
                continue
            if partitions and job.partition not in partitions:
                continue
            if states:
                code = "CG" if job.completing else job.state.short
                if code not in states and str(job.state) not in states:
                    continue
            out.append(job)
        return out

    def cancel(self, job: Job, who: Identity) -> list[Action]:
        self._check_owner(job, who)
        if job.state.is_terminal:
            return []  # scancel of a finished job is silent success in Slurm
        now = self.clock.now()
        was_running = job.state is JobState.RUNNING
        attempt = job.restart_count
        lifecycle.end(job, JobEvent.CANCEL, now, completing=was_running)
        job.cancelled_by = who.uid
        self.store.record(now, [(job, "cancel", {"by": who.uid})])
        if was_running:
            return [Terminate(job.job_id, attempt, job.nodes, "cancel")]
        return []

    def cancel_all(self, jobs: list[Job], who: Identity) -> tuple[list[Action], list[dict[str, Any]]]:
        """``cancel`` for many jobs (a whole array) in one transaction; per-job results as
        the signal API answers them."""
        now = self.clock.now()
        actions: list[Action] = []
        results: list[dict[str, Any]] = []
        changes = []
        for job in jobs:
            try:
                self._check_owner(job, who)
            except MusterError as e:
                results.append({"job_id": job.job_id, "ok": False, "error": str(e), "code": e.code})
                continue
            results.append({"job_id": job.job_id, "ok": True})
            if job.state.is_terminal:
                continue
            was_running = job.state is JobState.RUNNING
            attempt = job.restart_count
            lifecycle.end(job, JobEvent.CANCEL, now, completing=was_running)
            job.cancelled_by = who.uid
            changes.append((job, "cancel", {"by": who.uid}))
            if was_running:
                actions.append(Terminate(job.job_id, attempt, job.nodes, "cancel"))
        if changes:
            self.store.record(now, changes)
        return actions, results

    def kill_invalid_dependencies(self, reasons: dict[int, Reason]) -> int:
        """``--kill-on-invalid-dep=yes`` (or ``DependencyParameters=kill_invalid_depend``):
        a pending job whose dependency can never be met is cancelled instead of waiting for
        ever. Returns how many were cancelled."""
        everyone = "kill_invalid_depend" in (self.config.get("DependencyParameters") or "")
        now = self.clock.now()
        changes = []
        for job_id, reason in reasons.items():
            if reason is not Reason.DEPENDENCY_NEVER:
                continue
            job = self.jobs.get(job_id)
            if job is None or job.state is not JobState.PENDING:
                continue
            if not (job.spec.kill_on_invalid_dep or everyone):
                continue
            lifecycle.end(job, JobEvent.CANCEL, now, completing=False)
            job.reason = Reason.DEPENDENCY_NEVER
            changes.append((job, "cancel", {"by": None, "why": "invalid dependency"}))
        if changes:
            self.store.record(now, changes)
        return len(changes)

    def signal(self, job: Job, who: Identity, sig: int, batch_only: bool) -> list[Action]:
        self._check_owner(job, who)
        if job.state is JobState.PENDING:
            raise InvalidRequest("Job is pending execution")
        if job.state is not JobState.RUNNING:
            raise InvalidRequest("Job/step already completing or completed")
        return [SignalJob(job.job_id, job.nodes, sig, batch_only)]

    def hold(self, job: Job, who: Identity, admin_hold: bool) -> None:
        self._check_owner(job, who)
        if job.state is not JobState.PENDING:
            raise InvalidRequest("Job is no longer pending execution")
        kind = "admin" if (admin_hold and who.admin) else "user"
        job.hold = kind
        job.reason = Reason.HELD_ADMIN if kind == "admin" else Reason.HELD_USER
        self.store.record(self.clock.now(), [(job, "hold", {"kind": kind, "by": who.uid})])

    def release(self, job: Job, who: Identity) -> None:
        self._check_owner(job, who)
        if job.state is not JobState.PENDING:
            raise InvalidRequest("Job is no longer pending execution")
        if job.hold == "admin" and not who.admin:
            raise PermissionDenied()
        job.hold = None
        job.reason = Reason.NONE
        self.store.record(self.clock.now(), [(job, "release", {"by": who.uid})])

    def update(self, job: Job, who: Identity, changes: dict[str, Any]) -> list[Action]:
        self._check_owner(job, who)
        pending = job.state is JobState.PENDING
        applied: dict[str, Any] = {}
        for key, value in changes.items():
            if value is None:
                continue
            if key == "time_limit":
                if not who.admin and (
                    value is None or (job.time_limit is not None and value > job.time_limit)
                ):
                    raise PermissionDenied("Access/permission denied")
                job.time_limit = value
            elif key == "priority":
                if not who.admin:
                    raise PermissionDenied()
                job.admin_priority = int(value)
                job.priority = int(value)
            elif key == "nice":
                if int(value) < 0 and not who.admin:
                    raise PermissionDenied()
                job.spec.nice = int(value)
            elif key == "name":
                job.spec.name = str(value)
            elif key == "comment":
                job.spec.comment = str(value)
            elif key == "array_throttle":
                if job.array_job_id is None:
                    raise InvalidRequest("Job is not a job array")
                job.array_throttle = int(value)
            elif key in ("partition", "begin_time", "min_nodes"):
                if not pending:
                    raise InvalidRequest("Job is no longer pending execution")
                if key == "partition":
                    if self.config.partition(value) is None:
                        raise InvalidPartition()
                    job.partition = value
                    job.spec.partitions = [value]
                elif key == "begin_time":
                    job.spec.begin_time = float(value)
                    job.eligible_time = float(value)
                else:
                    job.spec.min_nodes = int(value)
                    job.shape.nodes = int(value)
            else:
                raise InvalidRequest(f"Update of {key} is not supported")
            applied[key] = value
        self.store.record(self.clock.now(), [(job, "update", {"changes": applied, "by": who.uid})])
        if "time_limit" in applied and job.state is JobState.RUNNING and job.batch_host:
            return [NewLimit(job.job_id, job.batch_host, job.time_limit)]
        return []

    def requeue_job(self, job: Job, who: Identity, hold: bool = False) -> list[Action]:
        """``scontrol requeue[hold]``: back to PENDING under the same id at once; a running
        attempt is terminated and keeps its resources until its agent confirms."""
        self._check_owner(job, who)
        if job.state is JobState.PENDING:
            raise InvalidRequest("Job is pending execution")
        if job.state is JobState.CANCELLED or (job.state.is_terminal and job.completing):
            raise InvalidRequest("Job/step already completing or completed")
        now = self.clock.now()
        attempt = job.restart_count
        nodes = job.nodes
        was_running = job.state is JobState.RUNNING
        kind = ("admin" if who.admin else "user") if hold else None
        self.launching.discard(job.job_id)
        lifecycle.requeue(job, now, hold=kind)
        self.store.record(now, [(job, "requeue", {"by": who.uid, "attempt": job.restart_count, "hold": kind})])
        return [Terminate(job.job_id, attempt, nodes, "requeue")] if was_running else []

    def update_nodes(self, who: Identity, names: list[str], state: str | None, reason: str | None) -> list[Action]:
        """``scontrol update nodename=.. state=drain|resume|undrain|down|idle reason=..``."""
        if not who.admin:
            raise PermissionDenied()
        for name in names:
            if name not in self.nodes:
                raise InvalidRequest(f"Invalid node name specified: {name}")
        st = (state or "").upper()
        if st not in ("", "DRAIN", "RESUME", "UNDRAIN", "DOWN", "IDLE", "FAIL"):
            raise InvalidRequest(f"Invalid node state specified: {state}")
        if st in ("DRAIN", "DOWN", "FAIL") and not reason:
            raise InvalidRequest("You must specify a reason when DOWNING or DRAINING a node. Request denied")
        now = self.clock.now()
        actions: list[Action] = []
        for name in names:
            node = self.nodes[name]
            if st in ("DRAIN", "FAIL"):
                node.drain = True
            elif st == "DOWN":
                node.admin_down = True
                for job in list(self.jobs.values()):
                    if job.state is JobState.RUNNING and name in job.nodes:
                        attempt, nodes = job.restart_count, job.nodes
                        self.node_failed_job(job, now, f"node {name} set DOWN")
                        actions.append(Terminate(job.job_id, attempt, nodes, "node_fail"))
            elif st in ("RESUME", "UNDRAIN", "IDLE"):
                node.drain = False
                if st != "UNDRAIN":
                    node.admin_down = False
                    if not node.responding and node.registered:
                        node.last_seen = now  # give a silent agent a fresh SlurmdTimeout
                        node.responding = True
            if st in ("RESUME", "UNDRAIN", "IDLE") and not node.drain and not node.admin_down:
                node.reason = ""
                node.reason_time = None
                node.reason_user = ""
            elif reason:
                node.reason = reason
                node.reason_time = now
                node.reason_user = who.user
            self.store.put_node(name, node.persistent())
        return actions

    # --- reservations ----------------------------------------------------------------------

    def create_reservation(self, who: Identity, req: dict[str, Any]) -> Reservation:
        """``scontrol create reservation``: administrators only."""
        if not who.admin:
            raise PermissionDenied()
        now = self.clock.now()
        name = req.get("name") or self._reservation_name(who)
        if name in self.reservations:
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
        self.reservations[name] = res
        self.store.put_reservation(name, res.to_dict())
        return res

    def _reservation_name(self, who: Identity) -> str:
        n = 1
        while f"{who.user}_{n}" in self.reservations:
            n += 1
        return f"{who.user}_{n}"

    def _busy_during(self, node: str, res: Reservation) -> bool:
        """A job on ``node`` that may still run when the window opens."""
        for job in self.jobs.values():
            if job.is_active and node in job.nodes:
                end = job.expected_end()
                if end is None or end > res.start:
                    return True
        return False

    def _reservation_nodes(self, res: Reservation, nodes: list[str] | None, count: int | None) -> list[str]:
        ignore_jobs = "IGNORE_JOBS" in res.flags or "MAINT" in res.flags
        others = [r for r in self.reservations.values() if r.name != res.name and r.start < res.end and res.start < r.end]
        taken = {n for r in others for n in r.nodes}
        pool = [n.name for n in self.nodes.values()]
        if res.partition:
            part = self.config.partition(res.partition)
            if part is None:
                raise InvalidPartition()
            pool = [n for n in pool if n in part.nodes]
        if nodes:
            for n in nodes:
                if n not in self.nodes:
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

    def update_reservation(self, who: Identity, name: str, req: dict[str, Any]) -> Reservation:
        if not who.admin:
            raise PermissionDenied()
        res = self.reservations.get(name)
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
        self.reservations[name] = new
        self.store.put_reservation(name, new.to_dict())
        return new

    def delete_reservation(self, who: Identity, name: str) -> None:
        if not who.admin:
            raise PermissionDenied()
        if name not in self.reservations:
            raise InvalidRequest(f"Reservation {name} not found")
        for job in self.jobs.values():
            if job.is_active and job.spec.reservation == name:
                raise InvalidRequest("Reservation request has jobs running: delete refused")
        del self.reservations[name]
        self.store.put_reservation(name, None)

    # --- scheduling -----------------------------------------------------------------------

    def apply_starts(self, starts: list[Any], now: float) -> list[Action]:
        """Record the scheduler's start decisions, then hand back launches to perform."""
        changes = []
        actions: list[Action] = []
        for s in starts:
            job = self.jobs.get(s.job_id)
            if job is None or job.state is not JobState.PENDING:
                continue
            lifecycle.start(job, s.alloc, now, scheduler="Backfill" if s.backfilled else "Main")
            job.partition = s.partition
            self._hold_resources(job)
            if self.accounting is not None:
                self.accounting.started(job)  # charged from now, even if it ends before a pass
            changes.append((job, "start", {"nodes": job.nodes, "attempt": job.restart_count}))
            if job.spec.interactive:
                continue  # srun/salloc hold it: there is no batch script to launch
            self.launching.add(job.job_id)
            actions.append(Launch(job))
        if changes:
            self.store.record(now, changes)
        return actions

    def launch_failed(self, job_id: int, attempt: int, message: str) -> None:
        """The agent could not be reached to start the job: put it back in the queue."""
        self.launching.discard(job_id)
        job = self.jobs.get(job_id)
        if job is None or job.state is not JobState.RUNNING or job.restart_count != attempt:
            return
        now = self.clock.now()
        self._release_resources(job)
        lifecycle.requeue(job, now)
        self.store.record(now, [(job, "launch_failed", {"error": message})])

    def launch_done(self, job_id: int) -> None:
        self.launching.discard(job_id)

    # --- agents ------------------------------------------------------------------------------

    def _node(self, name: str) -> NodeRuntime:
        node = self.nodes.get(name)
        if node is None:
            raise MusterError(f"unknown node {name}")
        return node

    def agent_register(self, body: dict[str, Any]) -> dict[str, Any]:
        now = self.clock.now()
        node = self._node(body["node"])
        node.registered = True
        node.responding = True
        node.last_seen = now
        node.addr = body.get("addr") or node.addr
        node.port = int(body.get("port") or node.port)
        node.agent_start_time = body.get("agent_start_time")
        node.boot_time = body.get("boot_time")
        node.version = body.get("version", "")
        reported_gpus = int(body.get("gpus", node.gpus))
        if reported_gpus < node.gpus and not node.drain:
            node.drain = True
            node.reason = f"gres/gpu count reported lower than configured ({reported_gpus} < {node.gpus})"
            node.reason_time = now
            node.reason_user = "root"
            self.store.put_node(node.name, node.persistent())
        if node.admin_down and node.reason == "Not responding" and self.config.return_to_service >= 1:
            node.admin_down = False
            node.reason = ""
            self.store.put_node(node.name, node.persistent())
        return {"ok": True, "kill": self._stale_jobs(node, body.get("running", []))}

    def agent_heartbeat(self, body: dict[str, Any]) -> dict[str, Any]:
        now = self.clock.now()
        node = self._node(body["node"])
        if not node.registered:
            raise MusterError("node must register")
        node.responding = True
        node.last_seen = now
        running = body.get("running", [])
        self._watch_lost(node, running, now)
        return {"ok": True, "kill": self._stale_jobs(node, running)}

    def _running_ids(self, running: list[Any]) -> dict[int, int | None]:
        out: dict[int, int | None] = {}
        for r in running:
            if isinstance(r, list | tuple):
                out[int(r[0])] = int(r[1])
            else:
                out[int(r)] = None
        return out

    def _stale_jobs(self, node: NodeRuntime, running: list[Any]) -> list[int]:
        """Jobs an agent runs that, as far as the controller knows, should not run there."""
        kill = []
        for job_id, attempt in self._running_ids(running).items():
            job = self.jobs.get(job_id)
            if job is None:
                kill.append(job_id)
                continue
            here = node.name in job.nodes
            same_attempt = attempt is None or attempt == job.restart_count
            if not (job.is_active and here and same_attempt):
                if not (job.completing and here):
                    kill.append(job_id)
        return kill

    def _watch_lost(self, node: NodeRuntime, running: list[Any], now: float) -> list[Action]:
        """A running job whose batch host stopped reporting it (and never said it ended)."""
        ids = self._running_ids(running)
        for job in list(self.jobs.values()):
            if job.state is not JobState.RUNNING or job.batch_host != node.name:
                continue
            if job.spec.interactive:
                continue  # no batch script runs for srun/salloc allocations
            if job.job_id in ids or job.job_id in self.launching:
                self.lost.pop(job.job_id, None)
                continue
            watch = self.lost.setdefault(job.job_id, _LostWatch(now))
            if now - watch.since > max(10.0, 3 * self.heartbeat_interval):
                self.lost.pop(job.job_id, None)
                self.node_failed_job(job, now, "job vanished from its node")
        return []

    @property
    def heartbeat_interval(self) -> float:
        return max(1.0, self.config.slurmd_timeout / 5)

    def job_done(self, body: dict[str, Any]) -> list[Action]:
        now = self.clock.now()
        job = self.jobs.get(int(body["job_id"]))
        attempt = int(body.get("restart_count", 0))
        if job is None:
            return []
        self.launching.discard(job.job_id)
        self.lost.pop(job.job_id, None)
        if attempt != job.restart_count:
            # A report from an earlier attempt: only its resources need freeing.
            self._release_resources(job, attempt)
            return []
        exit_code = int(body.get("exit_code", 0))
        sig = int(body.get("signal", 0))
        by = body.get("terminated_by")
        job.usage = _usage(body.get("usage")) or job.usage
        others = [n for n in job.nodes if n != body.get("node")]
        if job.state is JobState.RUNNING:
            if by == "node_fail":
                # The agent lost the job (e.g. it restarted and the exit status is gone):
                # a node failure for this attempt, requeued unless --no-requeue.
                self.node_failed_job(job, now, str(body.get("reason") or "lost by its node agent"))
                return [Terminate(job.job_id, attempt, others, "cleanup")] if others else []
            if by == "timeout":
                lifecycle.end(job, JobEvent.TIMEOUT, now, completing=False)
                lifecycle.cleaned(job, exit_code, sig)
            else:
                lifecycle.finish(job, exit_code, sig, now)
            kind = str(job.state).lower()
        elif job.completing:
            lifecycle.cleaned(job, exit_code, sig)
            kind = "cleaned"
        else:
            return []
        self._release_resources(job)
        self.store.record(now, [(job, kind, {"exit_code": exit_code, "signal": sig, "by": by})])
        return [Terminate(job.job_id, attempt, others, "cleanup")] if others else []

    def node_failed_job(self, job: Job, now: float, why: str) -> None:
        attempt = job.restart_count
        lifecycle.end(job, JobEvent.NODE_FAIL, now, completing=False)
        self._release_resources(job, attempt)
        changes = [(job, "node_fail", {"why": why, "nodes": job.nodes})]
        requeue = job.spec.requeue if job.spec.requeue is not None else self.config.job_requeue
        if requeue:
            lifecycle.requeue(job, now)
            changes.append((job, "requeue", {"attempt": job.restart_count}))
        self.store.record(now, changes)

    def check_nodes(self) -> list[Action]:
        """Nodes silent for SlurmdTimeout go DOWN; their jobs end NODE_FAIL (and requeue)."""
        now = self.clock.now()
        timeout = self.config.slurmd_timeout
        actions: list[Action] = []
        for node in self.nodes.values():
            if not node.responding or node.last_seen is None:
                continue
            if now - node.last_seen <= timeout:
                continue
            node.responding = False
            node.reason = "Not responding"
            node.reason_time = now
            node.reason_user = "root"
            if self.config.return_to_service == 0:
                node.admin_down = True
            self.store.put_node(node.name, node.persistent())
            for job in list(self.jobs.values()):
                if node.name in job.nodes and job.is_active:
                    if job.state is JobState.RUNNING:
                        survivors = [n for n in job.nodes if n != node.name]
                        attempt = job.restart_count
                        self.node_failed_job(job, now, f"node {node.name} not responding")
                        if survivors:
                            actions.append(Terminate(job.job_id, attempt, survivors, "node_fail"))
                    else:
                        lifecycle.cleaned(job)
                        self._release_resources(job)
                        self.store.record(now, [(job, "cleaned", {"node": node.name})])
            node.allocs.clear()
        self.note_node_service(now)
        return actions

    def note_node_service(self, now: float) -> None:
        """Record nodes that went out of service (DOWN, or drained and empty) or came back,
        for sreport's Down column. A node not registered since a restart keeps what was
        recorded: nobody knows yet."""
        changes = []
        for node in self.nodes.values():
            if not node.registered and not node.admin_down:
                continue
            # DOWN as NodeRuntime.base_state says it, without counting allocations
            down = node.admin_down or not node.responding or (node.drain and not node.allocs)
            if down == self.out_of_service.get(node.name, False):
                continue
            self.out_of_service[node.name] = down
            sizes = {"cpu": node.cpus, "mem": node.real_memory, "gres/gpu": node.gpus, "node": 1}
            changes.append((node.name, down, node.reason if down else "", sizes))
        if changes:
            self.store.record_node_events(now, changes)

    def purge(self) -> None:
        """Forget ended jobs older than MinJobAge (they stay in the store for sacct)."""
        cutoff = self.clock.now() - self.config.min_job_age
        for job_id in [
            j.job_id
            for j in self.jobs.values()
            if j.state.is_terminal and not j.completing and (j.end_time or 0) < cutoff
        ]:
            self.finished[job_id] = str(self.jobs.pop(job_id).state)
