"""The controller's memory, and the rules that keep it equal to the store.

``ClusterState`` holds jobs, nodes, reservations and accounting in memory, loads them from
the store at start (after a crash too), and offers the few operations every part of the
controller needs: holding and releasing a job's resources on its nodes, committing changes
(``record``, ``put_node``: memory follows the store, a change whose commit fails is undone
by reloading what the store holds), draining a node, failing a job's run on a node, and
forgetting old jobs. The controller's responsibilities are built on it, each in its own
module: ``jobs`` (what users do to jobs), ``launches`` (runs starting and ending),
``agents`` (what agents tell), ``liveness`` (nodes alive, silent or down) and
``reservations``; ``controller`` puts them together.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from muster.core import lifecycle
from muster.core.attribution import JOB, UNKNOWN
from muster.core.clock import Clock
from muster.core.config import Config
from muster.core.errors import MusterError, StorageError
from muster.core.events import EventKind
from muster.core.hostlist import compress, expand
from muster.core.job import Job
from muster.core.lifecycle import JobEvent
from muster.core.states import JobState, Reason
from muster.core.timefmt import TimeFormatError, parse_time_limit
from muster.ctld.accounting import Accounting
from muster.ctld.arrays import ArrayIndex
from muster.ctld.identity import Identity, identify
from muster.ctld.ledger import Ledger
from muster.ctld.mailnotes import MailNotes
from muster.ctld.nodes import NodeRuntime, configured_fields
from muster.ctld.reservations import Reservation
from muster.ctld.stats import ServerStats
from muster.ctld.store import Store
from muster.sched.topology import Topology

log = logging.getLogger("musterctld")

NODES_UP = "nodes_up"  # the store's meta key: the nodes in service, as a hostlist

_TERMINAL = frozenset(s for s in JobState if s.is_terminal)
# Where a job stands after each state-changing event of the log (``check_log``).
_AFTER: dict[EventKind, frozenset[JobState]] = {
    EventKind.SUBMIT: frozenset({JobState.PENDING}),
    EventKind.START: frozenset({JobState.RUNNING}),
    EventKind.REQUEUE: frozenset({JobState.PENDING}),
    EventKind.LAUNCH_FAILED: frozenset({JobState.PENDING, JobState.FAILED}),
    EventKind.HUNG: frozenset({JobState.PENDING}),
    EventKind.PREEMPTED: frozenset({JobState.PENDING, JobState.PREEMPTED}),
    EventKind.NODE_FAIL: frozenset({JobState.NODE_FAIL}),  # (a requeue in the same commit comes after)
    EventKind.CANCEL: frozenset({JobState.CANCELLED}),
    EventKind.CANCELLED: frozenset({JobState.CANCELLED}),
    EventKind.COMPLETED: frozenset({JobState.COMPLETED}),
    EventKind.FAILED: frozenset({JobState.FAILED}),
    EventKind.TIMEOUT: frozenset({JobState.TIMEOUT}),
    EventKind.OUT_OF_MEMORY: frozenset({JobState.OUT_OF_MEMORY}),
    EventKind.DEADLINE: frozenset({JobState.DEADLINE}),
    EventKind.LOST_NODE: frozenset({JobState.RUNNING}),  # --no-kill: it runs on without a failed node
    EventKind.CLEANED: _TERMINAL,
}


# the drain reason of a node the failure ledger took out of service (``node_fault``)
QUARANTINE_PREFIX = "quarantined: "


@dataclass(slots=True)
class LostWatch:
    """Since when a job's node has neither run nor reported it (``agents``)."""

    since: float


@dataclass
class ClusterState:
    config: Config
    store: Store
    clock: Clock
    jobs: dict[int, Job] = field(default_factory=dict)
    nodes: dict[str, NodeRuntime] = field(default_factory=dict)
    next_job_id: int = 1
    started_at: float = 0.0
    # job_id -> monotonic time its launch was handed to dispatch (until the agent answers);
    # written only through ``launch_sent``/``launch_answered``/``launches_shifted``, its one
    # writer (``tests/test_architecture.py``), as a job's fields go through ``core.lifecycle``
    launching: dict[int, float] = field(default_factory=dict)
    lost: dict[int, LostWatch] = field(default_factory=dict)
    # job_id -> final state, for jobs purged from memory (dependencies use it later)
    finished: dict[int, str] = field(default_factory=dict)
    reservations: dict[str, Reservation] = field(default_factory=dict)
    arrays: ArrayIndex = field(default_factory=ArrayIndex)
    # Associations, QOS, fair-share and limits (muster.ctld.accounting); set by load().
    accounting: Accounting | None = None
    # the nodes in service as last recorded (meta ``nodes_up``, a hostlist): after a restart
    # or a takeover they are shown as they were until their agents register (``liveness``)
    known_up: set[str] = field(default_factory=set)
    # node -> out of service as last recorded in the store's node_events (sreport's Down)
    out_of_service: dict[str, bool] = field(default_factory=dict)
    # pending jobs that carry a planned start from the last pass (``sched.apply``)
    planned: set[int] = field(default_factory=set)
    # monotonic time of the last run of the controller's loop (``liveness``)
    last_tick: float | None = None
    stalls: int = 0
    # job id -> attempt -> the nodes where that run holds resources: the reverse of each
    # ``NodeRuntime.allocs``, so that ending a run touches its own nodes only (a controller
    # of thousands of nodes must not scan them all per job). Both sides are written only by
    # ``hold_resources``, ``release_resources``, ``release_job`` and ``clear_node``.
    held: dict[int, dict[int, set[str]]] = field(default_factory=dict)
    # job_id -> version, bumped by every committed change and reload (``ctld.listing``)
    job_versions: dict[int, int] = field(default_factory=dict)
    # topology.conf as placement reads it (``sched.topology``), when configured
    topology: Topology | None = None
    # sdiag's and /metrics's running figures (``stats``); set by the app
    stats: ServerStats | None = field(default=None, repr=False)
    # what committed changes and automatic drains mail (``mailnotes``); set by the app
    mail: MailNotes | None = field(default=None, repr=False)
    # every node failure, with its evidence and whose fault it was (``ledger``, ``node_fault``)
    ledger: Ledger = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.ledger = Ledger(self.store, lambda: self.config)

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
        if self.config.topology is not None:
            self.topology = Topology(self.config.topology, [n.name for n in self.config.nodes])
        for i, nc in enumerate(self.config.nodes):
            node = NodeRuntime(name=nc.name, index=i, **configured_fields(nc, part_of.get(nc.name, [])))
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
                self.hold_resources(job)
        self.check_log()
        self.arrays.add(self.jobs.values())
        for name, data in self.store.load_reservations().items():
            self.reservations[name] = Reservation.from_dict(data)
        stored_next = int(self.store.get_meta("next_job_id", "0") or 0)
        self.next_job_id = max(self.config.first_job_id, stored_next, self.store.max_job_id() + 1)
        # Nodes with work on them are presumed alive until SlurmdTimeout says otherwise; the
        # nodes in service when the last controller knew are shown so meanwhile.
        try:
            self.known_up = set(expand(self.store.get_meta(NODES_UP, "") or ""))
        except ValueError:  # not a hostlist: only a hint, not worth a refused start
            self.known_up = set()
        for node in self.nodes.values():
            if node.allocs:
                node.last_seen = now
                node.responding = True
            node.presumed = not node.admin_down and (bool(node.allocs) or node.name in self.known_up)
        self.accounting = Accounting.load(self.config, self.store, now)
        self.out_of_service = self.store.last_node_states()
        self.ledger.load(now)

    def check_log(self) -> list[str]:
        """Check the jobs loaded against the event log (flux-core's idea: the log is the
        history, the job rows its projection): each job must stand where its last
        state-changing event left it. A mismatch is logged, never silently repaired; the
        list of mismatches is returned for tests."""
        last = self.store.last_events(_AFTER)
        problems = []
        for job in self.jobs.values():
            kind = last.get(job.job_id)
            if kind is None:
                continue
            allowed = _AFTER[EventKind(kind)]
            if job.state not in allowed:
                problems.append(
                    f"job {job.job_id}: its record says {job.state} but its last "
                    f"event is '{kind}' (expected {'/'.join(sorted(map(str, allowed)))})"
                )
        for problem in problems:
            log.warning("event log check: %s", problem)
        return problems

    # --- resources held on nodes (one owner: the per-node and per-job indexes) ----------

    def hold_resources(self, job: Job) -> None:
        """The job's current run holds what its allocation names, on its nodes."""
        key = (job.job_id, job.restart_count)
        where = self.held.setdefault(job.job_id, {}).setdefault(job.restart_count, set())
        for a in job.alloc:
            node = self.nodes.get(a.node)
            if node is not None:
                node.allocs[key] = (a.cpus, a.mem, tuple(a.gpu_ids))
                where.add(a.node)

    def release_resources(self, job: Job, attempt: int | None = None) -> None:
        """A run of the job (its current one by default) frees what it held."""
        run = job.restart_count if attempt is None else attempt
        runs = self.held.get(job.job_id)
        where = runs.pop(run, set()) if runs is not None else set()
        if runs is not None and not runs:
            del self.held[job.job_id]
        for name in where:
            node = self.nodes.get(name)
            if node is not None:
                node.allocs.pop((job.job_id, run), None)

    def release_job(self, job_id: int) -> None:
        """Every run of the job frees what it held."""
        for run, where in self.held.pop(job_id, {}).items():
            for name in where:
                node = self.nodes.get(name)
                if node is not None:
                    node.allocs.pop((job_id, run), None)

    def clear_node(self, node: NodeRuntime) -> None:
        """Nothing holds resources on ``node`` any more (it went DOWN)."""
        for job_id, run in node.allocs:
            runs = self.held.get(job_id)
            if runs is None:
                continue
            where = runs.get(run)
            if where is not None:
                where.discard(node.name)
                if not where:
                    del runs[run]
            if not runs:
                del self.held[job_id]
        node.allocs.clear()

    def job_ids_on(self, name: str) -> list[int]:
        """The jobs holding resources on node ``name``, by id (O(its own jobs))."""
        node = self.nodes.get(name)
        return sorted({key[0] for key in node.allocs}) if node is not None else []

    def record(
        self,
        now: float,
        changes: list[tuple[Job, EventKind, dict[str, Any]]],
        meta: dict[str, str] | None = None,
    ) -> None:
        """Commit job changes already made in memory; when the commit fails, memory goes
        back to what the store holds (so a change that was not committed is not applied)
        and the ``StorageError`` goes on to the caller."""
        self.changed(j for j, _k, _d in changes)
        t0 = self.clock.monotonic()
        try:
            self.store.record(now, changes, meta=meta)
        except StorageError as exc:
            if self.stats is not None:
                self.stats.observe_commit_failure()
            log.error(
                "could not commit %s of job(s) %s: %s; the change is not applied",
                "/".join(sorted({k for _j, k, _d in changes})),
                ",".join(str(j.job_id) for j, _k, _d in changes[:10]),
                exc,
            )
            self.reload_jobs(j for j, _k, _d in changes)
            raise
        if self.stats is not None:
            self.stats.observe_commit(changes, self.clock.monotonic() - t0)
        if self.mail is not None:
            self.mail.committed(now, changes)

    def changed(self, jobs: Iterable[Job]) -> None:
        """Note that these jobs changed: what was encoded of them is stale (``ctld.listing``)."""
        versions = self.job_versions
        for job in jobs:
            versions[job.job_id] = versions.get(job.job_id, 0) + 1

    @contextmanager
    def atomic(self, *jobs: Job) -> Iterator[None]:
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
            self.changed((job,))
            stored = self.store.get_job(job.job_id)
            self.release_job(job.job_id)
            if stored is None:  # never committed: it does not exist
                self.jobs.pop(job.job_id, None)
                continue
            job.take(stored)
            if job.is_active:
                self.hold_resources(job)
            if job.state is not JobState.RUNNING:
                self.launch_answered(job.job_id)

    def launch_sent(self, job_id: int, mono: float) -> None:
        """The job's launch was handed to dispatch at ``mono`` (the monotonic clock): it is
        launching until its agent answers (a heartbeat does not count it lost meanwhile)."""
        self.launching[job_id] = mono

    def launch_answered(self, job_id: int) -> None:
        """The job's launch was answered (done, failed) or its attempt is over."""
        self.launching.pop(job_id, None)

    def launches_shifted(self, gap: float) -> None:
        """The controller itself stalled for ``gap`` seconds: launches waiting for an answer
        get that time back."""
        for job_id in self.launching:
            self.launching[job_id] += gap

    def put_node(self, node: NodeRuntime) -> None:
        """Commit a node's admin state (drain, down, reason); on failure it goes back to
        what the store holds."""
        try:
            self.store.put_node(node.name, node.persistent())
        except StorageError as exc:
            log.error("could not commit the state of node %s: %s; the change is not applied", node.name, exc)
            saved = self.store.load_nodes().get(node.name) or {
                "admin_down": False,
                "drain": False,
                "reason": "",
                "reason_time": None,
                "reason_user": "",
            }
            for k, v in saved.items():
                setattr(node, k, v)
            raise

    def identity(self, uid: int, gid: int, host: str = "localhost") -> Identity:
        return identify(self.config, uid, gid, host)

    def node(self, name: str) -> NodeRuntime:
        node = self.nodes.get(name)
        if node is None:
            raise MusterError(f"unknown node {name}")
        return node

    @property
    def heartbeat_interval(self) -> float:
        """The agents' beat (``Config.heartbeat_interval``): what grace periods count in."""
        return self.config.heartbeat_interval

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
        self.put_node(node)
        log.warning("node %s drained: %s", name, reason)
        if self.mail is not None:
            self.mail.node_event("Drained", name, reason)
        return True

    def node_fault(
        self,
        node: str,
        kind: str,
        now: float,
        *,
        job: Job | None = None,
        job_id: int = 0,
        evidence: str = "",
        ranks: tuple[int, ...] = (),
        drain: str | None = None,
        counted: bool | None = None,
        behind: bool = False,
    ) -> str:
        """The one entry for a failure seen on a node (a node of a running job lost, a launch,
        Prolog, Epilog, health or pre-flight check failed, a GPU fault, a hang, a replacement):
        the failure ledger's record, with its attribution (``core.attribution``), returned.
        ``drain`` (a reason) drains the node, unless the failure is the job's own (the same
        job failed the same way on other nodes): then nothing is drained and those other
        nodes, drained for it, are given back (no drain storm). A node whose failures reach
        ``QuarantineFailures`` within ``QuarantineWindow`` is quarantined; a failure that
        comes while the node is out of service already does not count (``counted``: whether
        it was in service, for a caller that drained it first). A ledger row that
        cannot be committed is logged; the drain stands."""
        if node not in self.nodes:
            return UNKNOWN
        here = self.nodes[node]
        f, who = self.ledger.failure(
            now,
            node,
            kind,
            job.job_id if job else job_id,
            job.user if job else "",
            evidence,
            ranks,
            counted=not (here.drain or here.admin_down) if counted is None else counted,
            behind=behind,
        )
        # told twice: one record, one verdict (without a job, only while the node is out of
        # service: a health check that fails again after passing is a new failure)
        told_again = f.job_id or (counted is None and (here.drain or here.admin_down))
        earlier = self.ledger.repeated(f) if told_again else None
        if earlier is not None:
            return earlier.attribution
        action = ""
        if who == JOB:
            given = self._give_back(f)
            action = "not drained: the job's own failure" + (f" (given back: {','.join(given)})" if given else "")
        elif drain is not None and self.drain(node, drain[:1024], now):
            action = "drained"
        try:
            self.ledger.add(f, who, action)
        except StorageError as exc:
            log.error("node %s: %s failure not recorded in the failure ledger: %s", node, kind, exc)
            return who
        if who != JOB:
            due = self.ledger.quarantine_due(node, now)
            if due:
                self.quarantine(node, QUARANTINE_PREFIX + self.ledger.summary(due), now)
        return who

    def _give_back(self, f: Any) -> list[str]:
        """Nodes drained for failures now seen to be ``f``'s job's own, returned to service
        (only where the drain is still that automatic one)."""
        given = []
        for name in self.ledger.same_cause_nodes(f):
            node = self.nodes.get(name)
            if node is None or not node.drain or node.admin_down or node.reason.startswith(QUARANTINE_PREFIX):
                continue
            ours = any(
                e.action == "drained" and e.failure.kind == f.kind and e.failure.time == node.reason_time
                for e in self.ledger.history(name)
            )
            if not ours:
                continue
            node.drain, node.reason, node.reason_time, node.reason_user = False, "", None, ""
            try:
                self.put_node(node)
            except StorageError:
                continue
            log.warning("node %s: back in service: its %s failure was job %s's own", name, f.kind, f.job_id)
            given.append(name)
        return given

    def quarantine(self, name: str, reason: str, now: float) -> bool:
        """Take a node that keeps failing out of service until an operator resumes it
        (``scontrol update nodename=X state=resume``); an automatic drain's reason is
        replaced (a passing health check must not return it). Returns whether it was done now."""
        node = self.nodes.get(name)
        if node is None or node.admin_down or node.reason.startswith(QUARANTINE_PREFIX):
            return False
        node.drain = True
        node.reason = reason[:1024]
        node.reason_time = now
        node.reason_user = self.config.slurm_user or "root"
        self.put_node(node)
        log.warning("node %s %s", name, reason)
        if self.mail is not None:
            self.mail.node_event("Drained", name, reason)
        return True

    def node_failed_job(self, job: Job, now: float, why: str) -> None:
        attempt = job.restart_count
        lifecycle.end(job, JobEvent.NODE_FAIL, now, completing=False)
        self.release_resources(job, attempt)
        changes = [(job, EventKind.NODE_FAIL, {"why": why, "nodes": job.nodes})]
        requeue = job.spec.requeue if job.spec.requeue is not None else self.config.job_requeue
        if requeue:
            # --requeue=expedite: first in the queue, its surviving nodes held for it
            survivors = [n for n in job.nodes if (node := self.nodes.get(n)) is not None and node.available]
            lifecycle.requeue(job, now)
            data: dict[str, Any] = {"attempt": job.restart_count}
            if self.expedite(job):  # it restarts as soon as its old attempt is gone (view.py)
                lifecycle.hold_nodes(job, survivors, now + self.expedite_hold_time, now, expedite=True)
                data.update(expedite=True, held=survivors)
                log.warning("job %s: expedited requeue, holding %s", job.job_id, ",".join(survivors) or "no node")
            else:
                self.delay_requeued(job, now)
            changes.append((job, EventKind.REQUEUE, data))
        self.record(now, changes)

    def delay_requeued(self, job: Job, now: float, *, held: bool = False) -> None:
        """A requeued job is eligible again after ``requeue_delay`` (core.requeuedelay; 120 s
        by default), its reason meanwhile BeginTime (a held job keeps its hold's reason): as
        Slurm does for every requeue of a batch job (a node failure, scontrol requeue,
        preemption, a failed launch), unless its own begin time is later still."""
        if job.spec.begin_time is not None and job.spec.begin_time > now:
            return
        job.spec.begin_time = job.eligible_time = now + self.config.requeue_delay
        if not held:
            lifecycle.wait(job, Reason.BEGIN_TIME, now)

    def expedite(self, job: Job) -> bool:
        """Whether a node failure requeues ``job`` expedited: ``--requeue=expedite``, its
        QOS's ``ExpediteRequeue=yes`` (sacctmgr) or its partition's ``ExpediteRequeue=YES``.
        The job's own option counts only under ``SlurmctldParameters=enable_expedited_requeue``,
        as in Slurm; the QOS and partition keys are the admin's, so they need no switch."""
        if job.spec.expedite and self.config.expedited_requeue:
            return True
        qos = self.accounting.db.qos.get(job.spec.qos or "normal") if self.accounting is not None else None
        if qos is not None and qos.expedite_requeue:
            return True
        conf = self.config.partition(job.partition)
        return conf is not None and conf.params.get("ExpediteRequeue", "NO").lower() in ("yes", "true", "1", "on")

    @property
    def expedite_hold_time(self) -> float:
        """``ExpediteHoldTime`` (Slurm time format; default 5 minutes): how long an expedited
        job's surviving nodes wait for it."""
        raw = self.config.settings.get("ExpediteHoldTime")
        try:
            seconds = parse_time_limit(raw) if raw else None
        except TimeFormatError:
            seconds = None
        return float(seconds) if seconds is not None else 300.0

    def lose_node(self, job: Job, name: str, now: float, why: str) -> bool:
        """``--no-kill``: a running job goes on without a failed node (not its batch host,
        which runs the script) and that node's share is freed. False when the job has no
        such right; then the caller fails it (``node_failed_job``)."""
        if not job.spec.no_kill or job.state is not JobState.RUNNING or len(job.alloc) < 2:
            return False
        if job.alloc[0].node == name or name not in job.nodes:
            return False
        with self.atomic(job):
            job.alloc = [a for a in job.alloc if a.node != name]
            node = self.nodes.get(name)
            if node is not None:
                node.allocs.pop((job.job_id, job.restart_count), None)
            self.record(now, [(job, EventKind.LOST_NODE, {"node": name, "why": why})])
        log.warning("job %d runs on without node %s (--no-kill): %s", job.job_id, name, why)
        return True

    def serving(self, now: float) -> None:
        """The controller serves from now (loading may have taken a while): the nodes it has
        not heard from since it started get their whole SlurmdTimeout from now, so that a
        restart or a takeover never brings a healthy node nearer to DOWN."""
        self.started_at = now
        for node in self.nodes.values():
            if not node.registered and node.last_seen is not None:
                node.last_seen = now

    def note_nodes_up(self, now: float) -> None:
        """Forget the presumption about nodes not heard from within SlurmdTimeout of this
        controller's start, and record (one row, only when it changed) which nodes are in
        service, for the next controller to show until their agents register."""
        expired = now - self.started_at > self.config.slurmd_timeout
        up = set()
        for node in self.nodes.values():
            if not node.registered and node.presumed and expired:
                node.presumed = False
            if node.admin_down:
                continue
            if (node.registered and node.responding) or (not node.registered and node.presumed):
                up.add(node.name)
        if up != self.known_up:
            self.store.set_meta(NODES_UP, compress(sorted(up)) if up else "")
            self.known_up = up

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
            self.job_versions.pop(job_id, None)
