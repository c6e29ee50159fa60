"""The controller's state and every change to it.

``Controller`` holds jobs and nodes in memory, persists each accepted change to the
``Store`` before returning, and never performs I/O towards agents itself: methods return
``Action`` objects (launch, terminate, signal) that ``app`` hands to ``dispatch``. This
keeps "decide" apart from "do" and makes the controller testable on a manual clock.
"""

from __future__ import annotations

import grp
import logging
import pwd
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
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
    StorageError,
    Unsatisfiable,
)
from muster.core.job import Job, JobSpec, compute_shape
from muster.core.lifecycle import JobEvent
from muster.core.signals import parse_signal as core_parse_signal
from muster.core.states import HEALTH_DRAIN_PREFIX, JobState, Reason
from muster.ctld.accounting import Accounting
from muster.ctld.arrays import ArrayIndex, array_spec, make_tasks
from muster.ctld.nodes import NodeRuntime
from muster.ctld.reservations import Reservation, check_flags, check_window
from muster.ctld.store import Store
from muster.ctld.training import Training
from muster.ctld.view import node_views, partition_views, reservation_views
from muster.sched.dependencies import parse_dependency
from muster.sched.filters import BAD_PARTITION, NO_PARTITION, check_submit

DEPENDENCY_ERROR = "Job dependency problem"  # Slurm's text for ESLURM_DEPENDENCY

log = logging.getLogger("musterctld")

# A gap this long between two runs of the controller's loop is a stall: the controller
# could not hear heartbeats meanwhile, so that silence is not held against any node.
STALL_SECONDS = 2.0


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
    # job_id -> monotonic time its launch was handed to dispatch (until the agent answers)
    launching: dict[int, float] = field(default_factory=dict)
    lost: dict[int, _LostWatch] = field(default_factory=dict)
    # job_id -> final state, for jobs purged from memory (dependencies use it later)
    finished: dict[int, str] = field(default_factory=dict)
    reservations: dict[str, Reservation] = field(default_factory=dict)
    arrays: ArrayIndex = field(default_factory=ArrayIndex)
    # Associations, QOS, fair-share and limits (muster.ctld.accounting); set by load().
    accounting: Accounting | None = None
    # node -> out of service as last recorded in the store's node_events (sreport's Down)
    out_of_service: dict[str, bool] = field(default_factory=dict)
    # monotonic time of the last run of the controller's loop (``loop_tick``)
    last_tick: float | None = None
    stalls: int = 0
    # GPU faults, job progress, hangs and suspect nodes (muster.ctld.training)
    training: Training = field(init=False)

    def __post_init__(self) -> None:
        self.training = Training(self)

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

    # --- memory follows the store ------------------------------------------------------

    def _record(
        self,
        now: float,
        changes: list[tuple[Job, str, dict[str, Any]]],
        meta: dict[str, str] | None = None,
    ) -> None:
        """Commit job changes already made in memory; when the commit fails, memory goes
        back to what the store holds (so a change that was not committed is not applied)
        and the ``StorageError`` goes on to the caller."""
        try:
            self.store.record(now, changes, meta=meta)
        except StorageError as exc:
            log.error("could not commit %s of job(s) %s: %s; the change is not applied",
                      "/".join(sorted({k for _j, k, _d in changes})),
                      ",".join(str(j.job_id) for j, _k, _d in changes[:10]), exc)
            self.reload_jobs(j for j, _k, _d in changes)
            raise

    @contextmanager
    def _atomic(self, *jobs: Job) -> Iterator[None]:
        """A change of these jobs applies whole or not at all: on any error inside (a
        refusal found half-way, a failed commit), they are reloaded from the store."""
        try:
            yield
        except BaseException:
            self.reload_jobs(jobs)
            raise

    def reload_jobs(self, jobs: Iterable[Job]) -> None:
        """Put these jobs (and what they hold) back as the store last committed them."""
        for job in {j.job_id: j for j in jobs}.values():
            stored = self.store.get_job(job.job_id)
            for node in self.nodes.values() if job.alloc else ():
                for key in [k for k in node.allocs if k[0] == job.job_id]:
                    del node.allocs[key]
            if stored is None:  # never committed: it does not exist
                self.jobs.pop(job.job_id, None)
                continue
            job.take(stored)
            if job.is_active:
                self._hold_resources(job)
            if job.state is not JobState.RUNNING:
                self.launching.pop(job.job_id, None)

    def _put_node(self, node: NodeRuntime) -> None:
        """Commit a node's admin state (drain, down, reason); on failure it goes back to
        what the store holds."""
        try:
            self.store.put_node(node.name, node.persistent())
        except StorageError as exc:
            log.error("could not commit the state of node %s: %s; the change is not applied",
                      node.name, exc)
            saved = self.store.load_nodes().get(node.name) or {
                "admin_down": False, "drain": False, "reason": "", "reason_time": None, "reason_user": ""}
            for k, v in saved.items():
                setattr(node, k, v)
            raise

    # --- liveness ---------------------------------------------------------------------

    def loop_tick(self) -> float:
        """The controller's loop runs now. Returns the length of the stall just ended (0.0
        when there was none) after making sure it costs no node its life: silence the
        controller could not hear is not counted, and every node gets at least a couple of
        heartbeats' time before it can be declared not responding."""
        mono = self.clock.monotonic()
        last, self.last_tick = self.last_tick, mono
        if last is None or mono - last < STALL_SECONDS:
            return 0.0
        gap = mono - last
        self.stalls += 1
        now = self.clock.now()
        grace = min(float(self.config.slurmd_timeout), max(5.0, 2 * self.heartbeat_interval))
        floor = now - self.config.slurmd_timeout + grace
        for node in self.nodes.values():
            if node.last_seen is not None:
                node.last_seen = min(now, max(node.last_seen + gap, floor))
        for watch in self.lost.values():
            watch.since = min(now, watch.since + gap)
        for job_id in self.launching:
            self.launching[job_id] += gap
        log.warning(
            "controller stalled for %.1f s (its loop did not run: stopped, swapped or "
            "overloaded); no node is judged on that silence: each gets at least %.0f s more",
            gap, grace,
        )
        return gap

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
        next_id = self.next_job_id + len(jobs)
        self._record(
            now,
            [(j, "submit", {"uid": who.uid, "host": who.host}) for j in jobs],
            meta={"next_job_id": str(next_id)},
        )
        self.next_job_id = next_id
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
        self._record(now, [(job, "cancel", {"by": who.uid})])
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
            self._record(now, changes)
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
            self._record(now, changes)
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
        self._record(self.clock.now(), [(job, "hold", {"kind": kind, "by": who.uid})])

    def release(self, job: Job, who: Identity) -> None:
        self._check_owner(job, who)
        if job.state is not JobState.PENDING:
            raise InvalidRequest("Job is no longer pending execution")
        if job.hold == "admin" and not who.admin:
            raise PermissionDenied()
        job.hold = None
        job.reason = Reason.NONE
        self._record(self.clock.now(), [(job, "release", {"by": who.uid})])

    def update(self, job: Job, who: Identity, changes: dict[str, Any]) -> list[Action]:
        self._check_owner(job, who)
        with self._atomic(job):  # a refusal half-way leaves the job as it was
            applied = self._apply_update(job, who, changes)
            self._record(self.clock.now(), [(job, "update", {"changes": applied, "by": who.uid})])
        if "time_limit" in applied and job.state is JobState.RUNNING and job.batch_host:
            return [NewLimit(job.job_id, job.batch_host, job.time_limit)]
        return []

    def _apply_update(self, job: Job, who: Identity, changes: dict[str, Any]) -> dict[str, Any]:
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
        return applied

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
        lifecycle.requeue(job, now, hold=kind)
        self._record(now, [(job, "requeue", {"by": who.uid, "attempt": job.restart_count, "hold": kind})])
        self.launching.pop(job.job_id, None)
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
            self._put_node(node)
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
        self.store.put_reservation(name, res.to_dict())  # committed first: memory follows
        self.reservations[name] = res
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
        self.store.put_reservation(name, new.to_dict())
        self.reservations[name] = new
        return new

    def delete_reservation(self, who: Identity, name: str) -> None:
        if not who.admin:
            raise PermissionDenied()
        if name not in self.reservations:
            raise InvalidRequest(f"Reservation {name} not found")
        for job in self.jobs.values():
            if job.is_active and job.spec.reservation == name:
                raise InvalidRequest("Reservation request has jobs running: delete refused")
        self.store.put_reservation(name, None)
        del self.reservations[name]

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
            changes.append((job, "start", {"nodes": job.nodes, "attempt": job.restart_count}))
        if not changes:
            return actions
        self._record(now, changes)  # on failure: nothing started, nothing held
        mono = self.clock.monotonic()
        for job, _kind, _data in changes:
            if self.accounting is not None:
                self.accounting.started(job)  # charged from now, even if it ends before a pass
            if job.spec.interactive:
                continue  # srun/salloc hold it: there is no batch script to launch
            self.launching[job.job_id] = mono
            actions.append(Launch(job))
        return actions

    def launch_failed(
        self, job_id: int, attempt: int, message: str, fault: str | None = None, node: str | None = None
    ) -> list[Action]:
        """The launch of this attempt failed; ``fault`` says whose fault it is (as the agent
        judged it): ``None`` (the agent could not be reached) and ``"node"`` requeue the job
        elsewhere, ``"node"`` draining the node first; ``"job"`` ends the job FAILED with
        the reason in SystemComment; ``"stale"`` (the launch conflicted with what runs there
        already) changes nothing; ``"prolog"`` (the site's Prolog failed on ``node``, the
        batch host unless given) drains the node and requeues the job held, as Slurm does,
        returning the termination of what the job runs on its other nodes. Repeated node
        failures of one job hold it (JobHoldMaxRequeue) instead of trying node after node.
        Reports of the same failure (the launch's answer, the agent's saved report, a
        heartbeat) count once."""
        self.launching.pop(job_id, None)
        job = self.jobs.get(job_id)
        if job is None or job.state is not JobState.RUNNING or job.restart_count != attempt:
            return []
        if fault == "stale":
            return []
        now = self.clock.now()
        host = job.batch_host if node is None else node
        if fault == "job":
            with self._atomic(job):
                lifecycle.finish(job, 1, 0, now)
                job.reason = Reason.LAUNCH_FAILURE
                job.system_comment = f"Launch failed on {host}: {message}"
                self._release_resources(job)
                self._record(now, [(job, "failed", {"exit_code": 1, "signal": 0, "launch": message})])
            log.warning("job %s: its launch on %s failed by its own fault: %s", job_id, host, message)
            return []
        if fault in ("node", "prolog") and host is not None:
            self.drain(host, (message if fault == "prolog" else f"launch failed: {message}")[:1024], now)
        others = [n for n in job.nodes if n != host]
        limit = self.max_launch_requeue
        with self._atomic(job):
            self._release_resources(job)
            job.launch_failures += 1
            job.system_comment = f"Launch failed on {host}: {message}"
            held = fault == "prolog" or job.launch_failures >= limit
            lifecycle.requeue(job, now, hold="user" if held else None)
            if held:
                job.reason = Reason.LAUNCH_FAILED if fault == "prolog" else Reason.HOLD_MAX_REQUEUE
            self._record(now, [(job, "launch_failed", {"error": message, "node": host, "fault": fault,
                                                       "held": held})])
        log.warning("job %s: launch on %s failed (%s); %s", job_id, host, message,
                    ("held" if fault == "prolog" else f"held after {job.launch_failures} failed launches")
                    if held else "requeued")
        return [Terminate(job_id, attempt, others, "requeue")] if fault == "prolog" and others else []

    def node_faults(self, body: dict[str, Any]) -> list[Action]:
        """What a heartbeat says is wrong with its node: a failed Prolog (drain, requeue the
        job held) or Epilog (drain), and the last health check (drain on failure with its
        reason; a pass returns a node that the health check had drained)."""
        node = self._node(body["node"])
        actions: list[Action] = []
        for fault in body.get("faults") or []:
            if not isinstance(fault, dict):
                continue
            reason = str(fault.get("reason") or f"{fault.get('kind')} failed")[:1024]
            if fault.get("kind") == "gpu":  # drain, and requeue the jobs on it elsewhere
                actions += self.training.gpu_fault(node.name, reason)
                continue
            if fault.get("kind") == "prolog" and fault.get("job_id") is not None:
                actions += self.launch_failed(int(fault["job_id"]), int(fault.get("attempt") or 0),
                                              reason, "prolog", node.name)
            self.drain(node.name, reason)
        health = body.get("health")
        if isinstance(health, dict):
            if not health.get("ok"):
                reason = str(health.get("reason") or "")
                if not reason.startswith(HEALTH_DRAIN_PREFIX):
                    reason = HEALTH_DRAIN_PREFIX + (reason or "HealthCheckProgram failed")
                self.drain(node.name, reason[:1024])
            elif node.drain and node.reason.startswith(HEALTH_DRAIN_PREFIX):
                node.drain = False
                node.reason, node.reason_time, node.reason_user = "", None, ""
                self._put_node(node)
                log.info("node %s: its health check passes again; back in service", node.name)
        return actions

    @property
    def max_launch_requeue(self) -> int:
        """``SchedulerParameters=max_batch_requeue=N`` (Slurm's; default 5)."""
        for item in (self.config.get("SchedulerParameters") or "").split(","):
            key, _, value = item.strip().partition("=")
            if key == "max_batch_requeue" and value.strip().isdigit():
                return max(1, int(value))
        return 5

    def drain(self, name: str, reason: str, now: float | None = None) -> bool:
        """Drain a node for a fault it showed (launch, Prolog, Epilog, health check); an
        administrator's earlier reason is kept. Returns whether the node was drained now."""
        node = self.nodes.get(name)
        if node is None or node.drain:
            return False
        node.drain = True
        node.reason = reason
        node.reason_time = self.clock.now() if now is None else now
        node.reason_user = self.config.slurm_user or "root"
        self._put_node(node)
        log.warning("node %s drained: %s", name, reason)
        return True

    def launch_done(self, job_id: int) -> None:
        self.launching.pop(job_id, None)

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
        node.silent = False
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
            self._put_node(node)
        if node.admin_down and node.reason == "Not responding" and self.config.return_to_service >= 1:
            node.admin_down = False
            node.reason = ""
            self._put_node(node)
        return {"ok": True, "kill": self._stale_jobs(node, body.get("running", []))}

    def agent_heartbeat(self, body: dict[str, Any]) -> dict[str, Any]:
        now = self.clock.now()
        node = self._node(body["node"])
        if not node.registered:
            raise MusterError("node must register")
        node.responding = True
        node.silent = False
        node.last_seen = now
        running = body.get("running", [])
        # Runs that ended here and whose reports are on their way: not lost.
        ended = self._running_ids(body.get("ended") or [])
        self._watch_lost(node, {**ended, **self._running_ids(running)}, now)
        if isinstance(body.get("progress"), list):
            self.training.progress(node.name, body["progress"])
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

    def _watch_lost(self, node: NodeRuntime, known: dict[int, int | None], now: float) -> None:
        """Reconcile, while running, what the controller believes with what the node runs:
        a batch job this node hosts that its agent neither runs nor reports as ended, for
        longer than a few heartbeats, is lost: it ends NODE_FAIL (requeued when allowed)
        and its resources are freed. A launch still under way is not judged, unless it has
        been under way far longer than a launch can take."""
        mono = self.clock.monotonic()
        launch_grace = 2.0 * self.config.message_timeout + 40.0
        for job_id in {key[0] for key in node.allocs}:
            job = self.jobs.get(job_id)
            if job is None or job.state is not JobState.RUNNING or job.batch_host != node.name:
                continue
            if job.spec.interactive:
                continue  # no batch script runs for srun/salloc allocations
            since = self.launching.get(job_id)
            if job_id in known or (since is not None and mono - since < launch_grace):
                self.lost.pop(job_id, None)
                continue
            watch = self.lost.setdefault(job_id, _LostWatch(now))
            if now - watch.since > max(10.0, 3 * self.heartbeat_interval):
                self.lost.pop(job_id, None)
                self.launching.pop(job_id, None)
                log.warning("job %s: its node %s neither runs it nor reports its end; "
                            "ending it NODE_FAIL", job_id, node.name)
                self.node_failed_job(job, now, "job vanished from its node")

    @property
    def heartbeat_interval(self) -> float:
        return max(1.0, self.config.slurmd_timeout / 5)

    def job_done(self, body: dict[str, Any]) -> list[Action]:
        now = self.clock.now()
        job = self.jobs.get(int(body["job_id"]))
        attempt = int(body.get("restart_count", 0))
        if job is None:
            return []
        if body.get("launch_failure"):
            return self.launch_failed(job.job_id, attempt, str(body.get("reason") or "launch failed"),
                                      str(body["launch_failure"]), body.get("node"))
        self.launching.pop(job.job_id, None)
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
        self._record(now, [(job, kind, {"exit_code": exit_code, "signal": sig, "by": by})])
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
        self._record(now, changes)

    def check_nodes(self) -> list[Action]:
        """Judge silent nodes, as Slurm does: silent for a couple of heartbeats, a node is
        flagged not responding (``*`` in sinfo); silent for SlurmdTimeout, it goes DOWN
        and its jobs end NODE_FAIL (and requeue). Each step is logged with the node, how
        long it was silent and why. Silence during a stall of the controller itself does
        not count (``loop_tick``)."""
        now = self.clock.now()
        timeout = self.config.slurmd_timeout
        flag_after = min(timeout / 2, 2 * self.heartbeat_interval + 1)
        actions: list[Action] = []
        for node in self.nodes.values():
            if not node.responding or node.last_seen is None:
                continue
            silence = now - node.last_seen
            if silence <= flag_after:
                node.silent = False
                continue
            if not node.silent:
                node.silent = True
                log.warning("node %s not responding: no heartbeat for %.0f s; DOWN after %d s "
                            "(SlurmdTimeout)", node.name, silence, timeout)
            if silence <= timeout:
                continue
            try:
                actions += self._node_down(node, now, silence)
            except StorageError:
                continue  # logged; judged again on the next check, once the store commits
        self.note_node_service(now)
        actions += self.training.check_hangs()
        return actions

    def _node_down(self, node: NodeRuntime, now: float, silence: float) -> list[Action]:
        timeout = self.config.slurmd_timeout
        saved = (node.responding, node.silent, node.reason, node.reason_time, node.reason_user,
                 node.admin_down)
        node.responding = False
        node.silent = False
        node.reason = "Not responding"
        node.reason_time = now
        node.reason_user = "root"
        if self.config.return_to_service == 0:
            node.admin_down = True
        try:
            self._put_node(node)
        except StorageError:
            (node.responding, node.silent, node.reason, node.reason_time, node.reason_user,
             node.admin_down) = saved
            raise
        job_ids = sorted({key[0] for key in node.allocs})
        log.warning("node %s DOWN: no heartbeat for %.0f s (SlurmdTimeout=%d s); %d job(s) on it",
                    node.name, silence, timeout, len(job_ids))
        actions: list[Action] = []
        for job_id in job_ids:
            job = self.jobs.get(job_id)
            if job is None or node.name not in job.nodes or not job.is_active:
                continue
            try:
                if job.state is JobState.RUNNING:
                    survivors = [n for n in job.nodes if n != node.name]
                    attempt = job.restart_count
                    self.node_failed_job(job, now, f"node {node.name} not responding")
                    self.training.incident(node.name, job.job_id, "node failure", now)
                    if survivors:
                        actions.append(Terminate(job.job_id, attempt, survivors, "node_fail"))
                else:
                    lifecycle.cleaned(job)
                    self._release_resources(job)
                    self._record(now, [(job, "cleaned", {"node": node.name})])
            except StorageError:
                continue
        node.allocs.clear()
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
