"""What users do to jobs: submit, look up, cancel, signal, hold, release, update, requeue.

Each change is validated, applied and committed as one (``ClusterState.record``; a refusal
found half-way or a failed commit leaves the job as the store holds it) and returns the
actions (terminate, signal, new limit) that ``dispatch`` performs.
"""

from __future__ import annotations

import signal
from typing import Any

from muster.core import lifecycle, mailtypes
from muster.core.arrays import JobRef
from muster.core.errors import (
    InvalidJobId,
    InvalidPartition,
    InvalidRequest,
    MusterError,
    PermissionDenied,
    Unsatisfiable,
)
from muster.core.events import EventKind
from muster.core.job import Job, JobSpec, compute_shape
from muster.core.labels import check_label
from muster.core.lifecycle import JobEvent
from muster.core.states import JobState, Reason
from muster.ctld.actions import Action, NewLimit, SignalJob, Terminate
from muster.ctld.arrays import array_spec, make_tasks
from muster.ctld.hetindex import het_ids
from muster.ctld.identity import Identity
from muster.ctld.state import ClusterState
from muster.ctld.view import capacity_views, reservation_views
from muster.sched.config import part_limits_mode
from muster.sched.dependencies import parse_dependency
from muster.sched.filters import BAD_PARTITION, NO_PARTITION, check_submit
from muster.sched.snapshot import partition_views

DEPENDENCY_ERROR = "Job dependency problem"
_SIGSTOP, _SIGCONT = int(signal.SIGSTOP), int(signal.SIGCONT)  # Slurm's text for ESLURM_DEPENDENCY


# Submissions remembered by their client's request token (``X-Muster-Request``): a client
# that lost the answer (its controller died, a backup took over) sends the same submission
# again and gets the same job back. The newest are kept; a retry comes within seconds.
TOKENS_KEPT = 50_000
TOKENS_LOADED_JOBS = 20_000  # at load: the tokens of the newest jobs this many ids back


class JobActions:
    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.tokens: dict[tuple[int, str], int] = {}

    def load_tokens(self) -> None:
        """The request tokens of recent submissions, from the store (after a takeover too)."""
        since = self.state.next_job_id - TOKENS_LOADED_JOBS
        for job_id, uid, token in self.state.store.submit_tokens(since):
            self.tokens[(uid, token)] = job_id

    def submitted(self, who: Identity, token: str | None) -> Job | None:
        """The job this caller's earlier submission with ``token`` created, if any."""
        if not token:
            return None
        job_id = self.tokens.get((who.uid, token))
        if job_id is None:
            return None
        return self.state.jobs.get(job_id) or self.state.store.get_job(job_id)

    def submit(self, spec: JobSpec, who: Identity, token: str | None = None) -> Job:
        """Accept a job (an array: all its tasks) durably; returns the (first) job. A
        ``token`` seen before from this caller returns the job it created instead."""
        known = self.submitted(who, token)
        if known is not None:
            return known
        now = self.state.clock.now()
        array = array_spec(spec, self.state.config.max_array_size)
        job = self.prepare(spec, who, self.state.next_job_id, now)
        jobs = make_tasks(job, array) if array is not None else [job]
        self.accept(jobs, who, now, token)
        return jobs[0]

    def accept(self, jobs: list[Job], who: Identity, now: float, token: str | None = None) -> None:
        """Commit new jobs (ids from ``next_job_id`` on, in order) in one transaction, then
        take them into memory."""
        next_id = self.state.next_job_id + len(jobs)
        first = {"uid": who.uid, "host": who.host, **({"request": token} if token else {})}
        self.state.record(
            now,
            [
                (j, EventKind.SUBMIT, first if i == 0 else {"uid": who.uid, "host": who.host})
                for i, j in enumerate(jobs)
            ],
            meta={"next_job_id": str(next_id)},
        )
        self.state.next_job_id = next_id
        if token:
            self.tokens[(who.uid, token)] = jobs[0].job_id
            if len(self.tokens) > TOKENS_KEPT:
                for key in list(self.tokens)[: len(self.tokens) - TOKENS_KEPT // 2]:
                    del self.tokens[key]
        for j in jobs:
            self.state.jobs[j.job_id] = j
        self.state.arrays.add(jobs)

    def prepare(self, spec: JobSpec, who: Identity, job_id: int, now: float) -> Job:
        """Check a request as submission does (partition, shape, what the cluster can
        ever give, accounting) and build its job, not yet recorded; MusterError when it
        is refused."""
        try:
            spec.mail_type = mailtypes.check(spec.mail_type)
            if spec.mail_user is not None:
                spec.mail_user = mailtypes.check_user(spec.mail_user)
        except mailtypes.MailTypeError as e:
            raise InvalidRequest(str(e)) from None
        check_label("job name", spec.name)
        check_label("comment", spec.comment)
        if spec.account:  # Slurm keeps account names in lower case: -A Foo is account foo
            spec.account = spec.account.lower()
        unknown_deps = self._unknown_dependencies(spec)
        partition = self._resolve_partition(spec)
        candidates = [self.state.config.partition(p) for p in (spec.partitions or [partition])]
        node_names = {n for p in candidates if p is not None for n in p.nodes}
        max_cpus = max((self.state.nodes[n].cpus for n in node_names if n in self.state.nodes), default=0)
        try:
            shape = compute_shape(spec, max_cpus, self.state.config.def_mem_per_cpu)
        except ValueError as e:
            raise InvalidRequest(str(e)) from None
        if spec.nodelist and len(spec.nodelist) > shape.nodes:
            shape.nodes = len(spec.nodelist)
        rejection = check_submit(
            spec,
            shape,
            partition_views(self.state.config),
            capacity_views(self.state.nodes.values()),
            reservation_views(self.state.reservations.values()),
            user=who.user,
            group=who.group,
            enforce_part_limits=part_limits_mode(self.state.config.get("EnforcePartLimits")),
        )
        if rejection is not None:
            err: MusterError
            if rejection.message in (BAD_PARTITION, NO_PARTITION):
                err = InvalidPartition(rejection.message)
            else:
                err = Unsatisfiable(rejection.message)
            err.detail = rejection.detail
            raise err
        part_conf = self.state.config.partition(partition)
        assert part_conf is not None
        if self.state.accounting is not None:  # account, QOS and submit limits; may set spec's
            self.state.accounting.check_submit(
                spec,
                who,
                partition,
                self.state.jobs.values(),
                part_conf.default_time if part_conf.default_time is not None else part_conf.max_time,
            )
        time_limit = spec.time_limit
        if time_limit is None:
            time_limit = part_conf.default_time if part_conf.default_time is not None else part_conf.max_time
        if spec.deadline is not None and spec.begin_time is not None and spec.deadline < spec.begin_time:
            raise InvalidRequest("Incompatible begin and deadline time specification")
        job = Job(
            job_id=job_id,
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
            lifecycle.hold(job, "user", now)
        job.unknown_deps = unknown_deps
        return job

    def _unknown_dependencies(self, spec: JobSpec) -> list[int]:
        """Check ``--dependency``: Slurm's "Job dependency problem" for a malformed one and
        for one that names a job id that never existed (in memory or in the store), as
        Slurm's controller refuses a dependency on a job it does not know. A job that
        existed and ended is judged by how it ended. Returns the ids left unknown: none
        (``Job.unknown_deps`` stays for jobs recorded before this check)."""
        if not spec.dependency:
            return []
        try:
            dep = parse_dependency(spec.dependency)
        except ValueError:
            raise InvalidRequest(DEPENDENCY_ERROR) from None
        for job_id in dep.job_ids():
            if (
                job_id not in self.state.jobs
                and job_id not in self.state.finished
                and job_id not in self.state.arrays.tasks
                and self.state.store.get_job(job_id) is None
            ):
                raise InvalidRequest(DEPENDENCY_ERROR)
        return []

    def _resolve_partition(self, spec: JobSpec) -> str:
        if not spec.partitions:
            default = self.state.config.default_partition()
            if default is None:
                raise InvalidPartition(NO_PARTITION)
            return default.name
        for name in spec.partitions:
            if self.state.config.partition(name) is None:
                raise InvalidPartition()
        return spec.partitions[0]

    def get_job(self, job_id: int) -> Job:
        job = self.state.jobs.get(job_id)
        if job is None:
            raise InvalidJobId()
        return job

    def resolve(self, ref: JobRef) -> list[Job]:
        """The jobs in memory a user's job id names: ``A`` (every task when A is an array),
        ``A_i``, ``A_[i-j]``."""
        ids = het_ids(self.state.jobs, ref)
        if ids is not None:
            return [self.state.jobs[i] for i in ids]
        return self.state.arrays.resolve(ref, self.state.jobs)

    def job_ids(self, refs: list[JobRef]) -> list[int]:
        """Job ids for references, arrays expanded to their tasks (for filters)."""
        return list(dict.fromkeys(i for ref in refs for i in self._ids(ref)))

    def _ids(self, ref: JobRef) -> list[int]:
        ids = het_ids(self.state.jobs, ref)
        return ids if ids is not None else self.state.arrays.job_ids(ref)

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
        pool = (
            [self.state.jobs[i] for i in job_ids if i in self.state.jobs] if job_ids else list(self.state.jobs.values())
        )
        if states:
            # A job is kept by its code ("CG" while completing) or its long name: the set of
            # states kept, once, rather than each job's code looked up.
            by_name = {s for s in JobState if s in states}
            kept = by_name | {s for s in JobState if s.short in states}
            completing_kept = "CG" in states
        out = []
        for job in pool:
            if users and job.user not in users:
                continue
            if name is not None and job.spec.name != name:
                continue
            if partitions and job.partition not in partitions:
                continue
            if states:
                if job.completing:
                    if not completing_kept and job.state not in by_name:
                        continue
                elif job.display_state not in kept:  # SUSPENDED (ctld.suspend) as shown
                    continue
            out.append(job)
        return out

    def cancel(self, job: Job, who: Identity) -> list[Action]:
        self._check_owner(job, who)
        if job.state.is_terminal:
            return []  # scancel of a finished job is silent success in Slurm
        now = self.state.clock.now()
        was_running = job.state is JobState.RUNNING
        attempt = job.restart_count
        lifecycle.end(job, JobEvent.CANCEL, now, completing=was_running)
        job.cancelled_by = who.uid
        self.state.record(now, [(job, EventKind.CANCEL, {"by": who.uid})])
        if was_running:
            return [Terminate(job.job_id, attempt, job.nodes, "cancel")]
        return []

    def cancel_all(self, jobs: list[Job], who: Identity) -> tuple[list[Action], list[dict[str, Any]]]:
        """``cancel`` for many jobs (a whole array) in one transaction; per-job results as
        the signal API answers them."""
        now = self.state.clock.now()
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
            changes.append((job, EventKind.CANCEL, {"by": who.uid}))
            if was_running:
                actions.append(Terminate(job.job_id, attempt, job.nodes, "cancel"))
        if changes:
            self.state.record(now, changes)
        return actions, results

    def expire_deadlines(self, now: float) -> int:
        """``--deadline``: a pending job that could no longer end by its deadline, even
        started now with its shortest time (``--time-min``, else its limit), ends DEADLINE
        without running, as in Slurm. Returns how many ended."""
        changes = []
        for job in self.state.jobs.values():
            deadline = job.spec.deadline
            if deadline is None or job.state is not JobState.PENDING:
                continue
            shortest = job.spec.time_min or job.time_limit or 0
            if now + shortest <= deadline:
                continue
            lifecycle.end(job, JobEvent.DEADLINE, now, completing=False, reason=Reason.DEADLINE)
            changes.append((job, EventKind.DEADLINE, {"deadline": deadline}))
        if changes:
            self.state.record(now, changes)
        return len(changes)

    def kill_invalid_dependencies(self, reasons: dict[int, Reason]) -> int:
        """``--kill-on-invalid-dep=yes`` (or ``DependencyParameters=kill_invalid_depend``):
        a pending job whose dependency can never be met is cancelled instead of waiting for
        ever. Returns how many were cancelled."""
        everyone = "kill_invalid_depend" in (self.state.config.get("DependencyParameters") or "")
        now = self.state.clock.now()
        changes = []
        for job_id, reason in reasons.items():
            if reason is not Reason.DEPENDENCY_NEVER:
                continue
            job = self.state.jobs.get(job_id)
            if job is None or job.state is not JobState.PENDING:
                continue
            if not (job.spec.kill_on_invalid_dep or everyone):
                continue
            lifecycle.end(job, JobEvent.CANCEL, now, completing=False, reason=Reason.DEPENDENCY_NEVER)
            changes.append((job, EventKind.CANCEL, {"by": None, "why": "invalid dependency"}))
        if changes:
            self.state.record(now, changes)
        return len(changes)

    def signal(self, job: Job, who: Identity, sig: int, batch_only: bool) -> list[Action]:
        self._check_owner(job, who)
        if job.state is JobState.PENDING:
            raise InvalidRequest("Job is pending execution")
        if job.state is not JobState.RUNNING:
            raise InvalidRequest("Job/step already completing or completed")
        if not batch_only and (stop := {_SIGSTOP: True, _SIGCONT: False}.get(sig)) is not None:
            if job.stopped != stop:  # STOPPED while its tasks are (Slurm's JOB_STOPPED), shown by every view
                with self.state.atomic(job):
                    job.stopped = stop
                    self.state.record(
                        self.state.clock.now(), [(job, EventKind.STOPPED if stop else EventKind.CONTINUED, {})]
                    )
        return [SignalJob(job.job_id, job.nodes, sig, batch_only)]

    def hold(self, job: Job, who: Identity, admin_hold: bool) -> None:
        self._check_owner(job, who)
        if job.state is not JobState.PENDING:
            raise InvalidRequest("Job is no longer pending execution")
        kind = "admin" if (admin_hold and who.admin) else "user"
        now = self.state.clock.now()
        lifecycle.hold(job, kind, now)
        self.state.record(now, [(job, EventKind.HOLD, {"kind": kind, "by": who.uid})])

    def release(self, job: Job, who: Identity) -> None:
        self._check_owner(job, who)
        if job.state is not JobState.PENDING:
            raise InvalidRequest("Job is no longer pending execution")
        if job.hold == "admin" and not who.admin:
            raise PermissionDenied()
        now = self.state.clock.now()
        lifecycle.release(job, now)
        self.state.record(now, [(job, EventKind.RELEASE, {"by": who.uid})])

    def update(self, job: Job, who: Identity, changes: dict[str, Any]) -> list[Action]:
        self._check_owner(job, who)
        with self.state.atomic(job):  # a refusal half-way leaves the job as it was
            applied = self._apply_update(job, who, changes)
            self.state.record(self.state.clock.now(), [(job, EventKind.UPDATE, {"changes": applied, "by": who.uid})])
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
                if not who.admin and (value is None or (job.time_limit is not None and value > job.time_limit)):
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
                check_label("job name", str(value))
                job.spec.name = str(value)
            elif key == "comment":
                check_label("comment", str(value))
                job.spec.comment = str(value)
            elif key == "array_throttle":
                if job.array_job_id is None:
                    raise InvalidRequest("Job is not a job array")
                job.array_throttle = int(value)
            elif key in ("partition", "begin_time", "min_nodes"):
                if not pending:
                    raise InvalidRequest("Job is no longer pending execution")
                if key == "partition":
                    if self.state.config.partition(value) is None:
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
        """``scontrol requeue[hold]``: back to PENDING under the same id at once, eligible
        again after ``requeue_delay`` (reason BeginTime meanwhile, as in Slurm); a running
        attempt is terminated and keeps its resources until its agent confirms."""
        self._check_owner(job, who)
        if job.state is JobState.PENDING:
            raise InvalidRequest("Job is pending execution")
        if job.state is JobState.CANCELLED or (job.state.is_terminal and job.completing):
            raise InvalidRequest("Job/step already completing or completed")
        now = self.state.clock.now()
        attempt = job.restart_count
        nodes = job.nodes
        was_running = job.state is JobState.RUNNING
        # a suspended job that is requeued is held, as in Slurm (ctld.suspend)
        kind = ("admin" if who.admin else "user") if hold or job.suspended_at is not None else None
        lifecycle.requeue(job, now, hold=kind)
        self.state.delay_requeued(job, now, held=kind is not None)  # core.requeuedelay
        self.state.record(now, [(job, EventKind.REQUEUE, {"by": who.uid, "attempt": job.restart_count, "hold": kind})])
        self.state.launch_answered(job.job_id)
        return [Terminate(job.job_id, attempt, nodes, "requeue")] if was_running else []
