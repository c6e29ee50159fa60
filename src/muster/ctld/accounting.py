"""Accounting in the controller: associations at submit, fair-share and limits around each
scheduling pass, and the views sacct, sacctmgr, sshare, sprio and sreport ask for.

Where it plugs in (everything else lives in the modules it wires together):

* ``jobs.JobActions.submit`` calls ``check_submit``: with ``AccountingStorageEnforce=associations``
  a job needs an association (user, account), else it is refused with Slurm's "Invalid
  account or account/partition combination specified"; the job's account and QOS are
  resolved (DefaultAccount, the association's default QOS, else ``normal``); with
  ``limits`` the submit limits (MaxSubmitJobs, GrpSubmitJobs, QOS MaxSubmitJobsPerUser) are
  checked, and a QOS with ``Flags=DenyOnLimit`` refuses a job over its MaxWall or TRES
  limits instead of letting it pend.
* ``view.build_snapshot`` calls ``before_pass``: usage is charged up to now, Fair Tree
  factors go to ``Snapshot.fairshare``, QOS priorities to ``Snapshot.qos_priority``, and,
  with ``limits``, pending jobs that would break an association or QOS limit are taken out
  of ``Snapshot.pending`` with the limit's reason set on the job (the scheduler has no
  notion of associations; this is the controller-side hook the design calls for).
* ``CtldApp.run_pass`` passes the pass's starts through ``admit``, which checks them one by
  one against the same counters, so that jobs started together cannot overshoot a limit.

``Snapshot.fairshare`` holds each user association's factor under ``account|user``, which is
what a job gets (``sched.fairshare.fairshare_of``); the user's and the account's entries are
fallbacks for jobs whose association is unknown.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from muster.core import lifecycle
from muster.core.config import Config, PartitionConf
from muster.core.errors import InvalidRequest, MusterError
from muster.core.job import Job, JobSpec
from muster.core.states import JobState
from muster.ctld import records
from muster.ctld.acct_objects import Assoc, Qos, assoc_key
from muster.ctld.assoc import AssocDB, Change, Result, preserves_user_case
from muster.ctld.identity import Identity
from muster.ctld.limits import JobLoad, Running, check
from muster.ctld.nodes import NodeRuntime
from muster.ctld.reset_period import parse_reset_period, usage_epoch
from muster.ctld.tres import DEFAULT_USAGE_WEIGHTS, billing, parse_billing_weights
from muster.ctld.usage_report import usage_report
from muster.sched.config import SchedConfig
from muster.sched.fairshare import Node, Standing, Usage, factor_table, fair_tree
from muster.sched.priority import PriorityPolicy
from muster.sched.snapshot import Snapshot

INVALID_ACCOUNT = "Invalid account or account/partition combination specified"
INVALID_QOS = "Invalid qos specification"
POLICY = "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)"


class Cluster(Protocol):
    """What accounting reads of the controller's memory (``state.ClusterState``)."""

    config: Config
    jobs: dict[int, Job]
    nodes: dict[str, NodeRuntime]


class InvalidAccount(MusterError):
    code = "invalid_account"

    def __init__(self, message: str = INVALID_ACCOUNT) -> None:
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class Enforce:
    associations: bool = False
    limits: bool = False
    qos: bool = False

    @classmethod
    def parse(cls, text: str | None) -> Enforce:
        words = {w.strip().lower() for w in (text or "").split(",") if w.strip()}
        if "all" in words:
            words |= {"associations", "limits", "qos"}
        limits = "limits" in words or "safe" in words
        qos = "qos" in words
        return cls(associations="associations" in words or limits or qos, limits=limits, qos=qos)


@dataclass(slots=True)
class _Charge:
    since: float
    keys: list[str]
    rates: dict[str, float]


class Accounting:
    def __init__(self, config: Config, store: Any, db: AssocDB, now: float) -> None:
        self.config = config
        self.store = store
        self.db = db
        db.preserve_case_user = preserves_user_case(config.get("DbdParameters"))
        self.enforce = Enforce.parse(config.get("AccountingStorageEnforce"))
        half_life = config.get_seconds("PriorityDecayHalfLife", 7 * 86400)
        self.usage = Usage(half_life, now)
        self.reset_period = parse_reset_period(config.get("PriorityUsageResetPeriod"))
        self.loaded_at = now  # PriorityUsageResetPeriod=NOW counts from here
        self.max_tres = "MAX_TRES" in (config.get("PriorityFlags") or "").upper()
        self.weights = {p.name: parse_billing_weights(p.params.get("TRESBillingWeights")) for p in config.partitions}
        self.sched_config = SchedConfig.from_settings(dict(config.settings))
        self.charging: dict[tuple[int, int], _Charge] = {}
        self.standing: dict[str, Standing] = {}
        self._running = Running()
        self._chains: dict[tuple[str | None, str], list[Assoc]] = {}

    @classmethod
    def load(cls, config: Config, store: Any, now: float) -> Accounting:
        rows = store.db.execute("SELECT kind, name, data FROM acct_objects").fetchall()
        db = AssocDB.from_rows(config.cluster_name, rows)
        acct = cls(config, store, db, now)
        created = db.bootstrap()
        if created:
            acct._persist(now, created, {"bootstrap": True})
        acct._usage_from_records(now)
        acct.refresh()
        return acct

    # --- persistence ------------------------------------------------------------------------

    def _persist(self, now: float, changes: list[Change], event: dict[str, Any]) -> None:
        with self.store.transaction() as db:
            for c in changes:
                if c.data is None:
                    db.execute("DELETE FROM acct_objects WHERE kind=? AND name=?", (c.kind, c.name))
                else:
                    db.execute(
                        "INSERT INTO acct_objects(kind, name, data) VALUES(?,?,?) ON CONFLICT(kind, name) "
                        "DO UPDATE SET data=excluded.data",
                        (c.kind, c.name, json.dumps(c.data, separators=(",", ":"))),
                    )
            db.execute(
                "INSERT INTO events(time, job_id, kind, data) VALUES(?,?,?,?)",
                (now, None, "sacctmgr", json.dumps(event, separators=(",", ":"))),
            )

    def sacctmgr(self, req: dict[str, Any], who: Identity, now: float) -> Result:
        """Apply one add/modify/delete; durable before it returns. ``dry_run`` undoes it."""
        saved = self.db.rows()
        result = self.db.apply(req, who.user, who.admin)
        if req.get("dry_run"):
            self.db._restore(saved)
            return result
        if result.changes:
            try:
                self._persist(now, result.changes, {"request": req, "by": who.uid})
            except Exception:
                self.db._restore(saved)
                raise
        self._chains = {}
        self.refresh()
        return result

    # --- a job's association, QOS and TRES ----------------------------------------------------

    def assoc_of(self, job: Job) -> Assoc | None:
        account = job.spec.account or self.db.default_account(job.user)
        return self.db.assoc(account, job.user) if account else None

    def qos_of(self, job: Job) -> Qos | None:
        return self.db.qos.get(job.spec.qos or "normal")

    def tres_of(self, job: Job) -> dict[str, int]:
        if job.alloc:
            counts = {
                "cpu": sum(a.cpus for a in job.alloc),
                "mem": sum(a.mem for a in job.alloc),
                "node": len(job.alloc),
                "gres/gpu": sum(len(a.gpu_ids) for a in job.alloc),
            }
        else:
            s = job.shape
            counts = {"cpu": s.total_cpus, "mem": s.total_mem, "node": s.nodes, "gres/gpu": s.total_gpus}
        counts["billing"] = int(round(billing(counts, self.weights.get(job.partition, {}), self.max_tres)))
        return counts

    def load_of(self, job: Job) -> JobLoad:
        key = (job.spec.account, job.user)
        chain = self._chains.get(key)
        if chain is None:  # one walk up the tree per association and pass
            a = self.assoc_of(job)
            chain = self._chains[key] = self.db.chain(a) if a else []
        return JobLoad(chain, self.qos_of(job), job.user, self.tres_of(job), job.time_limit)

    def _rates(self, counts: dict[str, int], partition: str, qos: str | None) -> dict[str, float]:
        weights = self.weights.get(partition) or DEFAULT_USAGE_WEIGHTS
        q = self.db.qos.get(qos or "normal")
        factor = q.usage_factor if q is not None else 1.0
        rates = {k: float(v) * factor for k, v in counts.items() if k != "billing"}
        rates["billing"] = billing(counts, weights, self.max_tres) * factor
        return rates

    # --- submission ------------------------------------------------------------------------------

    def check_submit(
        self, spec: JobSpec, who: Identity, partition: str, jobs: Iterable[Job], partition_max_time: int | None = None
    ) -> None:
        """Resolve the job's account and QOS and refuse what the enforced policy forbids.
        Changes ``spec`` (account, qos, a time limit from MaxWall) only when it accepts."""
        db = self.db
        account = spec.account or db.default_account(who.user)
        a = db.assoc(account, who.user) if account else None
        if self.enforce.associations and a is None:
            raise InvalidAccount()
        if spec.account is not None and a is None and self.enforce.associations:
            raise InvalidAccount()
        qos_name = spec.qos or (db.default_qos(a) if a is not None else None)
        if qos_name is None and "normal" in db.qos:
            qos_name = "normal"
        q = db.qos.get(qos_name) if qos_name else None
        if spec.qos is not None and q is None:  # a QOS that does not exist: always (Slurm)
            raise InvalidRequest(INVALID_QOS)
        if spec.qos is not None and (self.enforce.qos or self.enforce.associations):
            allowed = db.allowed_qos(a) if a is not None else []
            if allowed and spec.qos not in allowed:
                raise InvalidRequest(INVALID_QOS)
        time_limit = spec.time_limit
        walls = [
            w
            for w in (q.max_wall if q else None, db.inherited(a, "max_wall") if a is not None else None)
            if w is not None
        ]
        if time_limit is None and walls:
            cap = min(walls)
            if partition_max_time is None or cap < partition_max_time:
                time_limit = cap
        if self.enforce.limits and a is not None:
            self._check_submit_limits(spec, who.user, a, q, time_limit, jobs)
        if a is not None:
            spec.account = a.account
        if q is not None:
            spec.qos = q.name
        spec.time_limit = time_limit

    def _check_submit_limits(
        self, spec: JobSpec, user: str, a: Assoc, q: Qos | None, time_limit: int | None, jobs: Iterable[Job]
    ) -> None:
        chain = self.db.chain(a)
        keys = {x.key for x in chain}
        per_assoc: dict[str, int] = {}
        qos_user = 0
        qos_all = 0
        for job in jobs:
            if job.state.is_terminal:
                continue
            ja = self.assoc_of(job)
            if ja is not None:
                for x in self.db.chain(ja):
                    if x.key in keys:
                        per_assoc[x.key] = per_assoc.get(x.key, 0) + 1
            if q is not None and (job.spec.qos or "normal") == q.name:
                qos_all += 1
                qos_user += job.user == user
        max_submit = self.db.inherited(a, "max_submit_jobs")
        if max_submit is not None and per_assoc.get(a.key, 0) + 1 > max_submit:
            raise InvalidRequest(POLICY)
        for x in chain:
            if x.limits.grp_submit_jobs is not None and per_assoc.get(x.key, 0) + 1 > x.limits.grp_submit_jobs:
                raise InvalidRequest(POLICY)
        if q is None:
            return
        if q.max_submit_jobs_per_user is not None and qos_user + 1 > q.max_submit_jobs_per_user:
            raise InvalidRequest(POLICY)
        if q.grp_submit_jobs is not None and qos_all + 1 > q.grp_submit_jobs:
            raise InvalidRequest(POLICY)
        if "DenyOnLimit" in q.flags:
            if q.max_wall is not None and (time_limit is None or time_limit > q.max_wall):
                raise InvalidRequest(POLICY)

    # --- scheduling passes ---------------------------------------------------------------------

    def _usage_from_records(self, now: float) -> None:
        """Charge every recorded attempt that ran (decay makes old ones count little)."""
        rows = self.store.db.execute("SELECT data FROM acct_jobs WHERE start_time IS NOT NULL").fetchall()
        self.usage.decay_to(now)
        self._reset_if_due(now)
        for (raw,) in rows:
            d = json.loads(raw)
            alloc = d.get("alloc") or []
            start = d.get("start_time")
            if not alloc or start is None:
                continue
            user = d.get("user", "")
            spec = d.get("spec") or {}
            account = spec.get("account") or self.db.default_account(user)
            a = self.db.assoc(account, user) if account else None
            if a is None:
                continue
            counts = {
                "cpu": sum(x.get("cpus", 0) for x in alloc),
                "mem": sum(x.get("mem", 0) for x in alloc),
                "node": len(alloc),
                "gres/gpu": sum(len(x.get("gpu_ids") or []) for x in alloc),
            }
            rates = self._rates(counts, d.get("partition", ""), spec.get("qos"))
            keys = [x.key for x in self.db.chain(a)]
            end = d.get("end_time")
            if end is None and d.get("state") in ("RUNNING",):
                self.usage.charge(keys, rates, start, now)
                self.charging[(int(d["job_id"]), int(d.get("restart_count", 0)))] = _Charge(now, keys, rates)
            elif end is not None:
                self.usage.charge(keys, rates, start, end)

    def charge(self, jobs: dict[int, Job], now: float, active: Iterable[Job] | None = None) -> None:
        """Bring usage up to ``now``: running jobs up to now, jobs ended since up to their end.
        ``active``: the jobs holding resources, when the caller has them at hand."""
        self.usage.decay_to(now)
        self._reset_if_due(now)
        seen: set[tuple[int, int]] = set()
        for job in jobs.values() if active is None else active:
            if not job.is_active or job.start_time is None:
                continue
            key = (job.job_id, job.restart_count)
            c = self.charging.get(key) or self.started(job)
            if c is None:
                continue
            end = job.end_time if job.end_time is not None else now
            self.usage.charge(c.keys, c.rates, c.since, end)
            c.since = max(c.since, end)
            seen.add(key)
        for key in [k for k in self.charging if k not in seen]:
            c = self.charging.pop(key)
            gone = jobs.get(key[0])
            end = now
            if gone is not None and gone.restart_count == key[1] and gone.end_time is not None:
                end = gone.end_time
            elif gone is not None and gone.restart_count > key[1] and gone.eligible_time is not None:
                end = min(now, gone.eligible_time)  # requeued at that time
            self.usage.charge(c.keys, c.rates, c.since, end)

    def started(self, job: Job) -> _Charge | None:
        """Begin charging a job that just started (the controller calls this as it starts
        one, so that a job ending before the next pass is charged too)."""
        if job.start_time is None:
            return None
        key = (job.job_id, job.restart_count)
        if key not in self.charging:
            a = self.assoc_of(job)
            if a is None:
                return None
            self.charging[key] = _Charge(
                job.start_time,
                [x.key for x in self.db.chain(a)],
                self._rates(self.tres_of(job), job.partition, job.spec.qos),
            )
        return self.charging[key]

    def _reset_if_due(self, now: float) -> None:
        """A new PriorityUsageResetPeriod began: usage starts again from nothing."""
        epoch = usage_epoch(self.reset_period, now, self.loaded_at)
        if epoch is not None and (self.usage.since is None or epoch > self.usage.since):
            self.usage.reset(epoch)

    def refresh(self) -> None:
        """Recompute Fair Tree standings from the current usage."""
        db = self.db

        def children(key: str) -> list[Node]:
            account = key.split("|", 1)[0]
            return [Node(a.key, a.is_user, a.shares) for a in db.children(account)]

        self.standing = fair_tree(assoc_key("root"), children, lambda k: self.usage.get(k))

    def fairshare_map(self) -> dict[str, float]:
        """``Snapshot.fairshare`` from the current standings (``sched.fairshare.factor_table``)."""
        return factor_table(self.standing)

    def before_pass(self, ctl: Cluster, snap: Snapshot, now: float) -> None:
        self._chains = {}
        self.charge(ctl.jobs, now, snap.running)
        self.refresh()
        snap.fairshare = self.fairshare_map()
        snap.qos_priority = {q.name: q.priority for q in self.db.qos.values()}
        self._running = Running()
        if not self.enforce.limits:
            return
        for job in snap.running:
            self._running.add(self.load_of(job))
        keep: list[Job] = []
        blocked: list[Job] = []
        for job in snap.pending:
            if job.hold or (job.eligible_time is not None and job.eligible_time > now):
                keep.append(job)
                continue
            reason = check(self.load_of(job), self._running, self.db, self.usage.values)
            if reason is None:
                keep.append(job)
            else:
                lifecycle.wait(job, reason, now)
                lifecycle.plan(job, None, (), now)
                blocked.append(job)
        if blocked:
            snap.pending = keep
            self._prioritise(blocked, snap, now)

    def _prioritise(self, jobs: list[Job], snap: Snapshot, now: float) -> None:
        """Jobs kept out of the pass still get a priority (squeue -P, sprio)."""
        policy = PriorityPolicy(snap, now, self.sched_config)
        for job in jobs:
            parts = tuple(job.spec.partitions) or (job.partition,)
            job.priority = policy.priority(job, parts)

    def admit(self, starts: list[Any], jobs: dict[int, Job], now: float) -> list[Any]:
        """The pass's starts that keep every limit, taken in the order decided."""
        if not self.enforce.limits or not starts:
            return starts
        out = []
        for s in starts:
            job = jobs.get(s.job_id)
            if job is None:
                continue
            load = self.load_of(job)
            reason = check(load, self._running, self.db, self.usage.values)
            if reason is not None:
                lifecycle.wait(job, reason, now)
                continue
            self._running.add(load)
            out.append(s)
        return out

    # --- views for commands --------------------------------------------------------------------

    def shares(self) -> list[dict[str, Any]]:
        """sshare's rows, depth first from root."""
        rows = []
        for a in self.db.tree_order():
            s = self.standing.get(a.key)
            depth = len(self.db.chain(a)) - 1
            if a.key == assoc_key("root"):
                total = self.usage.get(a.key)
                rows.append(
                    {
                        "account": "root",
                        "user": "",
                        "depth": 0,
                        "raw_shares": None,
                        "norm_shares": 0.0,
                        "raw_usage": total,
                        "effective_usage": 1.0 if total > 0 else 0.0,
                        "fairshare": None,
                        "level_fs": None,
                        "grp_tres_mins": "",
                        "tres_run_mins": "",
                    }
                )
                continue
            rows.append(
                {
                    "account": a.account,
                    "user": a.user,
                    "depth": depth,
                    "raw_shares": a.shares,
                    "norm_shares": s.norm_shares if s else 0.0,
                    "raw_usage": self.usage.get(a.key),
                    "effective_usage": s.effective_usage if s else 0.0,
                    "fairshare": s.factor if s else None,
                    "level_fs": _finite(s.level_fs) if s else None,
                    "grp_tres_mins": _tres_text(a.limits.grp_tres_mins),
                    "tres_run_mins": "",
                }
            )
        return rows

    def priorities(self, ctl: Cluster, now: float) -> dict[str, Any]:
        """sprio's rows: each pending job's factors, from ``sched.priority``'s formula (the
        one the scheduler runs), and the job's priority from the last pass."""
        c = self.sched_config
        policy = PriorityPolicy(
            _PriorityView(
                nodes=list(ctl.nodes.values()),
                partitions={p.name: p for p in ctl.config.partitions},
                qos_priority={q.name: q.priority for q in self.db.qos.values()},
                fairshare=self.fairshare_map(),
            ),
            now,
            c,
        )
        rows = []
        for job in sorted(ctl.jobs.values(), key=lambda j: j.job_id):
            if job.state is not JobState.PENDING:
                continue
            parts = tuple(job.spec.partitions) or (job.partition,)
            f = policy.factors(job, parts)
            for p in parts:
                # each row: the factor of its own partition (a job may list several)
                part = policy.factors(job, (p,)).partition if p in policy.part_factor else f.partition
                rows.append(
                    {
                        "job_id": job.job_id,
                        "partition": p,
                        "user": job.user,
                        "account": job.spec.account or job.user,
                        "priority": job.priority,
                        "site": 0,
                        "age": f.age,
                        "assoc": 0.0,
                        "fairshare": f.fairshare,
                        "jobsize": f.jobsize,
                        "partition_factor": part,
                        "qos": f.qos,
                        "qos_name": job.spec.qos or "normal",
                        "nice": job.spec.nice,
                        "tres": "",
                    }
                )
        return {
            "multifactor": c.multifactor,
            "priority_type": c.priority_type,
            "weights": {
                "age": c.weight_age,
                "fairshare": c.weight_fairshare,
                "jobsize": c.weight_job_size,
                "partition": c.weight_partition,
                "qos": c.weight_qos,
                "assoc": 0,
                "site": 0,
            },
            "jobs": rows,
        }

    def usage_report(self, start: float, end: float, now: float, ctl: Cluster) -> dict[str, Any]:
        """sreport's numbers for [start, end] (``ctld.usage_report``)."""
        return usage_report(
            self.store,
            self.db,
            self.weights,
            self.max_tres,
            start,
            end,
            now,
            list(ctl.nodes.values()),
            ctl.config.cluster_name,
        )

    def jobs(self, q: records.Query, now: float) -> list[dict[str, Any]]:
        """sacct's records (with their steps), read from the store."""
        found = records.select(self.store.db, q, now)
        steps = _steps_by_job(self.store, [d["job_id"] for d in found]) if found else {}
        cluster = self.config.cluster_name
        out = []
        for d in found:
            job_steps = steps.get((d["job_id"], d.get("attempt", 0)), []) or (steps.get((d["job_id"], None), []))
            out.append(records.record_wire(d, now, cluster, self.weights.get(d.get("partition", "")), job_steps))
        return out


@dataclass(slots=True)
class _PriorityView:
    """The controller's memory as the priority formula reads it
    (``sched.priority.PriorityInputs``), for sprio between passes."""

    nodes: list[NodeRuntime]
    partitions: dict[str, PartitionConf]
    qos_priority: dict[str, int]
    fairshare: dict[str, float]
    fairshare_default: float = 0.5  # as in a pass's Snapshot
    priority_overrides: dict[int, int] = field(default_factory=dict)


def _finite(x: float) -> float | str:
    """JSON has no infinity: an unused association's LevelFS travels as "inf"."""
    return "inf" if x == float("inf") else x


def _tres_text(counts: dict[str, int]) -> str:
    from muster.ctld.tres import format_tres

    return format_tres(counts) if counts else ""


def _steps_by_job(store: Any, job_ids: list[int]) -> dict[tuple[int, int | None], list[dict[str, Any]]]:
    """Steps (``srun`` inside jobs) as the store's steps table keeps them, by (job, attempt)."""
    load = getattr(store, "load_steps", None)
    if load is None:
        return {}
    out: dict[tuple[int, int | None], list[dict[str, Any]]] = {}
    for step in load(job_ids):
        d = step.to_dict()
        out.setdefault((int(d["job_id"]), int(d.get("attempt", 0))), []).append(d)
    return out
