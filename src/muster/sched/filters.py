"""Feasibility: may this job run in this partition, on which nodes, and if not, why?

Each check answers with a ``Verdict``: a Slurm reason for squeue and whether it can
resolve later ("not now", e.g. PartitionDown: an admin may bring the partition up) or
never as the cluster is configured ("never", e.g. a GPU count no node has). Checks run
cheapest first: the per-job ones (state, access, limits) are a few comparisons; the
per-node scan is cached by the request's static shape, so a queue of 100,000 jobs with a
few dozen distinct shapes scans the nodes a few dozen times and makes a few dozen
``Request``s, whatever their time limits (a job's limit travels beside its request).

``validate_submit`` applies the "never" checks at submission, so that sbatch can refuse
a job that could never run, with Slurm's wording (more nodes than its partitions have,
e.g. ``sbatch -N 5`` on 4 nodes or ``srun -n 100000``: "Requested node configuration is
not available"). Limits that an admin may still raise (MaxTime, MaxNodes) are refused only
under ``EnforcePartLimits``; otherwise the job waits with PartitionTimeLimit or
PartitionNodeLimit, as in Slurm.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from muster.core.job import Job, JobSpec, Shape
from muster.core.states import Reason
from muster.sched.features import Constraint, FeatureError, parse_constraint
from muster.sched.profile import INF, NodeProfile
from muster.sched.reservations import ReservationBook, may_use
from muster.sched.snapshot import NodeView, PartitionView, ReservationView
from muster.sched.topology import TopoAsk, Topology, topo_ask

__all__ = [
    "Feasibility",
    "Rejection",
    "Request",
    "Verdict",
    "check_submit",
    "job_duration",
    "validate_submit",
]

# Slurm's messages (what sbatch prints after "Batch job submission failed: ").
NODE_CONFIG = "Requested node configuration is not available"
MEMORY = "Memory specification can not be satisfied"
BAD_PARTITION = "Invalid partition name specified"
NO_PARTITION = "No partition specified or system default partition"
PARTITION_UNAVAILABLE = "Required partition not available (inactive or drain)"
BAD_ACCOUNT = "Invalid account or account/partition combination specified"
BAD_GROUP = "User's group not permitted to use this partition"
BAD_TIME = "Requested time limit is invalid (missing or exceeds some limit)"
BAD_NODE_COUNT = "Node count specification invalid"
BAD_FEATURES = "Invalid feature specification"
BAD_NODE_NAME = "Invalid node name specified"
BAD_GRES = "Invalid generic resource (gres) specification"
BAD_RESERVATION = "Requested reservation is invalid"
RESERVATION_DENIED = "Access denied to requested reservation"


@dataclass(frozen=True, slots=True)
class Verdict:
    """Why a job cannot run (in a partition): a reason, and whether it can resolve later."""

    reason: Reason
    later: bool
    message: str = ""


class Request:
    """Jobs of one shape asking one partition: what placement and planning need,
    precomputed once per pass.

    A request carries no duration: the jobs of a queue ask for a few shapes but for
    almost as many time limits as there are jobs, so every job that asks the same thing
    shares one ``Request`` and its time limit travels beside it (``Feasibility.request``
    returns both). ``candidates`` are the partition's available nodes that could ever
    hold one share of the job (capacity, GPU type, features, -w/-x, reservation), in node
    order; ``key`` is what makes requests interchangeable (same candidates, node count
    and per-node need); ``plan_key`` leaves out the node count: requests with the same
    one and the same duration have the same feasible start times on every node.
    """

    __slots__ = (
        "partition",
        "nodes",
        "need",
        "exclusive",
        "candidates",
        "required",
        "reservation",
        "allowed",
        "key",
        "plan_key",
        "topo",
    )

    def __init__(
        self,
        partition: str,
        nodes: int,
        need: tuple[int, int, int],
        exclusive: bool,
        candidates: list[NodeProfile],
        required: frozenset[str],
        reservation: str | None,
        allowed: list[tuple[float, float]],
        key: tuple[object, ...],
        topo: TopoAsk | None = None,
    ) -> None:
        self.partition = partition
        self.nodes = nodes
        self.need = need
        self.exclusive = exclusive
        self.candidates = candidates
        self.required = required
        self.reservation = reservation
        self.allowed = allowed
        self.key = key
        # Requests that differ only in node count share their planning state.
        self.plan_key = (key[0],) + key[2:]
        # What the job asks of the topology (--switches while it waits for them,
        # --segment); None for most jobs, and always without a topology.
        self.topo = topo


def job_duration(job: Job, part: PartitionView) -> int | None:
    """The time limit the job runs under in ``part``: its own, else the partition's
    DefaultTime, else MaxTime; None (or 0) means no limit."""
    limit = job.time_limit if job.time_limit is not None else job.spec.time_limit
    if limit is None:
        limit = part.default_time if part.default_time is not None else part.max_time
    return limit or None


def _group_ok(allowed: tuple[str, ...] | None, group: str) -> bool:
    return allowed is None or "ALL" in allowed or group in allowed


def _account_ok(part: PartitionView, account: str | None) -> bool:
    if part.allow_accounts is not None and "ALL" not in part.allow_accounts:
        if account is None or account not in part.allow_accounts:
            return False
    return not (part.deny_accounts and account is not None and account in part.deny_accounts)


def _static_fit(
    cap: tuple[int, int, int],
    gpu_type: str | None,
    features: frozenset[str],
    need: tuple[int, int, int],
    want_type: str | None,
    constraint: Constraint | None,
) -> bool:
    if cap[0] < need[0] or cap[1] < need[1] or cap[2] < need[2]:
        return False
    if want_type is not None and need[2] > 0 and gpu_type != want_type:
        return False
    return constraint is None or constraint.matches(features)


_UNKNOWN_PARTITION = Verdict(Reason.BAD_CONSTRAINTS, False, BAD_PARTITION)
_PARTITION_DOWN = Verdict(Reason.PARTITION_DOWN, True)
_PARTITION_INACTIVE = Verdict(Reason.PARTITION_INACTIVE, True)
_TIME_LIMIT = Verdict(Reason.PARTITION_TIME_LIMIT, True)
_NODE_LIMIT = Verdict(Reason.PARTITION_NODE_LIMIT, True)
_RESERVATION_DENIED = Verdict(Reason.RESERVATION, True, RESERVATION_DENIED)


def _access_verdict(part: PartitionView, account: str | None, group: str) -> Verdict | None:
    if not _account_ok(part, account):
        return Verdict(Reason.BAD_CONSTRAINTS, False, BAD_ACCOUNT)
    if not _group_ok(part.allow_groups, group):
        return Verdict(Reason.BAD_CONSTRAINTS, False, BAD_GROUP)
    return None


def _need(shape: Shape) -> tuple[int, int, int]:
    return (shape.cpus_per_node, shape.mem_per_node, shape.gpus_per_node)


class _Answer:
    """What ``Feasibility.request`` remembers for one ask (partition, shape, node list,
    constraint, reservation): the partition (None when unknown or unusable, ``result``
    then says why), whether its access lists must be checked, and what comes after the
    per-job checks: the request, or the verdict on the node count or the nodes.
    ``plain`` is the request when no per-job check can fail (usable open partition
    without MaxTime, no reservation)."""

    __slots__ = ("part", "restricted", "result", "plain")

    def __init__(self, part: PartitionView | None, restricted: bool, result: Request | Verdict) -> None:
        self.part = part
        self.restricted = restricted
        self.result = result
        self.plain: Request | None = None
        if (
            part is not None
            and isinstance(result, Request)
            and not restricted
            and part.max_time is None
            and result.reservation is None
        ):
            self.plain = result


class Feasibility:
    """The pass's feasibility checks, with a cache of the per-node scans."""

    __slots__ = (
        "partitions",
        "pool",
        "book",
        "now",
        "_part_nodes",
        "_alike",
        "_access",
        "_made",
        "_answers",
        "topology",
        "switch_wait",
    )

    def __init__(
        self,
        partitions: Mapping[str, PartitionView],
        pool: Mapping[str, NodeProfile],
        book: ReservationBook,
        now: float,
        topology: Topology | None = None,
        switch_wait: int = 300,
    ) -> None:
        self.topology = topology
        self.switch_wait = switch_wait  # SchedulerParameters=max_switch_wait
        self.partitions = partitions
        self.pool = pool
        self.book = book
        self.now = now
        self._access: dict[tuple[str, str | None, str], Verdict | None] = {}
        self._made: dict[tuple[object, ...], Request | Verdict] = {}  # by request key
        self._answers: dict[tuple[object, ...], _Answer] = {}  # by what jobs ask
        self._part_nodes: dict[str, list[NodeProfile]] = {}
        self._alike: dict[str, bool] = {}  # partition -> its nodes share one configuration

    def partition_nodes(self, name: str) -> list[NodeProfile]:
        nodes = self._part_nodes.get(name)
        if nodes is None:
            part = self.partitions[name]
            nodes = sorted((self.pool[n] for n in set(part.nodes) if n in self.pool), key=lambda p: p.index)
            self._part_nodes[name] = nodes
            self._alike[name] = len({(n.cap, n.gpu_type, n.features, n.view.tmp_disk) for n in nodes}) <= 1
        return nodes

    def request(self, job: Job, pname: str) -> tuple[Request, float] | Verdict:
        """The job's request in partition ``pname`` with the time limit it runs under
        there (INF for none), or why it cannot run there.

        The request is shared by every job of the pass that asks the same thing, whatever
        its time limit: a queue holds many copies of a few shapes, and a ``Request`` is
        read-only once made. This runs for every queued job in every pass, so what does
        not depend on the job's account, group, time limit or user is looked up with one
        flat key and the per-job checks come after, in the same order as ever:
        partition state, access, time limit, node count, nodes, reservation access."""
        spec = job.spec
        shape = job.shape
        ask: tuple[object, ...] = (
            pname,
            shape.nodes,
            shape.cpus_per_node,
            shape.mem_per_node,
            shape.gpus_per_node,
            shape.gpu_type,
            shape.exclusive,
            spec.exclusive,
            spec.constraint,
            spec.reservation,
            tuple(spec.nodelist) if spec.nodelist else None,
            tuple(spec.exclude) if spec.exclude else None,
            spec.tmp_disk,
        )
        topo = None
        if self.topology is not None and (spec.switches or spec.segment or spec.exclusive_topo):
            topo = topo_ask(job, self.now, self.topology, self.switch_wait)
            ask += (topo,)
        answer = self._answers.get(ask)
        if answer is None:
            answer = self._answers[ask] = self._answer(job, pname, topo)
        plain = answer.plain
        if plain is not None and answer.part is not None:  # only the time limit is left
            limit = job.time_limit
            if not limit:  # none of its own: job_duration says which applies
                limit = job_duration(job, answer.part)
            return plain, INF if limit is None else float(limit)
        part = answer.part
        if part is None:  # unknown or unusable partition: the answer is its verdict
            return answer.result if isinstance(answer.result, Verdict) else _UNKNOWN_PARTITION
        if answer.restricted:
            access = (pname, spec.account, job.group)
            if access in self._access:
                refused = self._access[access]
            else:
                refused = self._access[access] = _access_verdict(part, spec.account, job.group)
            if refused is not None:
                return refused
        limit = job_duration(job, part)
        if limit is not None and part.max_time is not None and limit > part.max_time:
            return _TIME_LIMIT
        result = answer.result
        if isinstance(result, Verdict):
            return result
        # The scan has checked that the reservation exists; who may use it is per job.
        if spec.reservation is not None and not may_use(self.book.by_name[spec.reservation], job):
            return _RESERVATION_DENIED
        return result, INF if limit is None else float(limit)

    def _answer(self, job: Job, pname: str, topo: TopoAsk | None = None) -> _Answer:
        """What ``request`` needs to know about the job's ask in ``pname`` beyond the
        per-job checks."""
        part = self.partitions.get(pname)
        if part is None:
            return _Answer(None, False, _UNKNOWN_PARTITION)
        # Cheapest first: partition state, then (per job) access and time limit.
        if part.state == "DOWN":
            return _Answer(None, False, _PARTITION_DOWN)
        if part.state == "INACTIVE":
            return _Answer(None, False, _PARTITION_INACTIVE)
        restricted = part.allow_accounts is not None or bool(part.deny_accounts) or part.allow_groups is not None
        spec = job.spec
        shape = job.shape
        nodes = max(shape.nodes, len(spec.nodelist)) if spec.nodelist else shape.nodes
        if (part.max_nodes is not None and nodes > part.max_nodes) or nodes < part.min_nodes:
            return _Answer(part, restricted, _NODE_LIMIT)
        need = (shape.cpus_per_node, shape.mem_per_node, shape.gpus_per_node)
        key: tuple[Any, ...] = (
            pname,
            nodes,
            need,
            shape.exclusive or spec.exclusive or part.exclusive,
            shape.gpu_type if need[2] else None,
            spec.constraint,
            tuple(spec.nodelist) if spec.nodelist else (),
            tuple(spec.exclude) if spec.exclude else (),
            spec.reservation,
            spec.tmp_disk or 0,
        )
        if topo is not None:
            if topo.segment > 1 and nodes % topo.segment:
                return _Answer(part, restricted, Verdict(Reason.BAD_CONSTRAINTS, False, NODE_CONFIG))
            key += (topo,)
        made = self._made.get(key)
        if made is None:
            made = self._made[key] = self._make(part, job, key, topo)
        return _Answer(part, restricted, made)

    def _make(self, part: PartitionView, job: Job, key: tuple[Any, ...], topo: TopoAsk | None) -> Request | Verdict:
        nodes: int = key[1]
        need: tuple[int, int, int] = key[2]
        candidates, verdict = self._scan(part, job, nodes, need)
        if verdict is not None:
            return verdict
        spec = job.spec
        allowed: list[tuple[float, float]] = []
        if spec.reservation is not None:
            allowed = self.book.windows_by_name[spec.reservation]
        return Request(
            part.name,
            nodes,
            need,
            key[3],
            candidates,
            frozenset(spec.nodelist),
            spec.reservation,
            allowed,
            key,
            topo,
        )

    def _scan(
        self, part: PartitionView, job: Job, nodes: int, need: tuple[int, int, int]
    ) -> tuple[list[NodeProfile], Verdict | None]:
        spec = job.spec
        constraint = None
        if spec.constraint:
            try:
                constraint = parse_constraint(spec.constraint)
            except FeatureError:
                return [], Verdict(Reason.BAD_CONSTRAINTS, False, BAD_FEATURES)
        held: set[str] | None = None
        if spec.reservation is not None:
            res = self.book.by_name.get(spec.reservation)
            if res is None:
                return [], Verdict(Reason.RESERVATION, False, BAD_RESERVATION)
            if not self.book.windows_by_name[spec.reservation]:
                return [], Verdict(Reason.RESERVATION, False, BAD_RESERVATION)
            held = set(res.nodes)
        members = self.partition_nodes(part.name)
        required = set(spec.nodelist)
        if required and not required <= {n.name for n in members}:
            return [], Verdict(Reason.BAD_CONSTRAINTS, False, NODE_CONFIG)
        if nodes > len(members):
            return [], Verdict(Reason.PARTITION_NODE_LIMIT, True)
        exclude = set(spec.exclude)
        gtype = job.shape.gpu_type
        tmp = spec.tmp_disk or 0
        configured: list[NodeProfile] = []
        if members and not exclude and held is None and self._alike[part.name]:
            # One node configuration: one answer for all (a scan in every pass otherwise).
            n = members[0]
            if _static_fit(n.cap, n.gpu_type, n.features, need, gtype, constraint) and n.view.tmp_disk >= tmp:
                configured = members
        else:
            for n in members:
                if n.name in exclude or (held is not None and n.name not in held):
                    continue
                if _static_fit(n.cap, n.gpu_type, n.features, need, gtype, constraint) and n.view.tmp_disk >= tmp:
                    configured.append(n)
        if len(configured) < nodes or (required and not required <= {n.name for n in configured}):
            return [], Verdict(Reason.BAD_CONSTRAINTS, False, NODE_CONFIG)
        available = [n for n in configured if n.available]
        if len(available) < nodes or any(not self.pool[r].available for r in required):
            return [], Verdict(Reason.REQ_NODE_NOT_AVAIL, True)
        return available, None


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a submission is refused: ``message`` follows "Batch job submission failed: ";
    ``detail`` is the extra line Slurm prints before it, if any (e.g. for memory)."""

    message: str
    detail: str | None = None


def check_submit(
    spec: JobSpec,
    shape: Shape,
    partitions: Mapping[str, PartitionView],
    nodes: Sequence[NodeView],
    reservations: Sequence[ReservationView] = (),
    *,
    user: str = "",
    group: str = "",
    enforce_part_limits: str = "NO",
) -> Rejection | None:
    """Refuse a job that can never run here (see ``validate_submit``)."""
    names = list(spec.partitions)
    if not names:
        names = [p.name for p in partitions.values() if p.is_default][:1]
        if not names:
            return Rejection(NO_PARTITION)
    for name in names:
        if name not in partitions:
            return Rejection(BAD_PARTITION)
    if spec.constraint:
        try:
            constraint: Constraint | None = parse_constraint(spec.constraint)
        except FeatureError:
            return Rejection(BAD_FEATURES)
    else:
        constraint = None
    by_name = {n.name: n for n in nodes}
    for n in list(spec.nodelist) + list(spec.exclude):
        if n not in by_name:
            return Rejection(BAD_NODE_NAME)
    if spec.segment and shape.nodes % spec.segment:  # --segment cuts the nodes in equal parts
        return Rejection(NODE_CONFIG)
    if shape.gpus_per_node and shape.gpu_type is not None:
        if not any(n.gpu_type == shape.gpu_type for n in nodes):
            return Rejection(BAD_GRES)
    held: set[str] | None = None
    if spec.reservation is not None:
        res = next((r for r in reservations if r.name == spec.reservation), None)
        if res is None:
            return Rejection(BAD_RESERVATION)
        if user not in res.users and (spec.account is None or spec.account not in res.accounts):
            return Rejection(RESERVATION_DENIED)
        held = set(res.nodes)

    # A job naming several partitions is accepted when one of them could run it; the
    # first partition's problem is the one reported.
    first: Rejection | None = None
    for name in names:
        problem = _partition_problem(
            partitions[name],
            spec,
            shape,
            by_name,
            constraint,
            held,
            user,
            group,
            enforce_part_limits,
        )
        if problem is None:
            return None
        first = first or problem
    return first


def _partition_problem(
    part: PartitionView,
    spec: JobSpec,
    shape: Shape,
    by_name: Mapping[str, NodeView],
    constraint: Constraint | None,
    held: set[str] | None,
    user: str,
    group: str,
    enforce: str,
) -> Rejection | None:
    if part.state in ("INACTIVE", "DRAIN"):
        return Rejection(PARTITION_UNAVAILABLE)
    if not _account_ok(part, spec.account):
        return Rejection(BAD_ACCOUNT)
    if not _group_ok(part.allow_groups, group):
        return Rejection(BAD_GROUP)
    nodes = max(shape.nodes, len(spec.nodelist))
    if enforce != "NO":
        limit = spec.time_limit
        if limit and part.max_time is not None and limit > part.max_time:
            return Rejection(BAD_TIME)
        if (part.max_nodes is not None and nodes > part.max_nodes) or nodes < part.min_nodes:
            return Rejection(BAD_NODE_COUNT)
    members = [by_name[n] for n in part.nodes if n in by_name]
    member_names = {n.name for n in members}
    if not set(spec.nodelist) <= member_names:
        return Rejection(NODE_CONFIG)
    if nodes > len(members):
        # More nodes than the partition has at all: it could only ever run after the
        # partition grows, so it is refused now (a job over MaxNodes, by contrast, waits
        # with PartitionNodeLimit unless limits are enforced: an admin may raise MaxNodes).
        return Rejection(BAD_NODE_COUNT) if enforce != "NO" else Rejection(NODE_CONFIG)
    need = _need(shape)
    exclude = set(spec.exclude)
    fit = fit_without_mem = 0
    tmp = spec.tmp_disk or 0
    for n in members:
        if n.name in exclude or (held is not None and n.name not in held) or n.tmp_disk < tmp:
            continue
        cap = (n.cpus, n.mem, n.gpus)
        feats = frozenset(n.features)
        if _static_fit(cap, n.gpu_type, feats, need, shape.gpu_type, constraint):
            fit += 1
        elif _static_fit(cap, n.gpu_type, feats, (need[0], 0, need[2]), shape.gpu_type, constraint):
            fit_without_mem += 1
    if fit >= nodes:
        return None
    if fit + fit_without_mem >= nodes:
        return Rejection(NODE_CONFIG, MEMORY)
    return Rejection(NODE_CONFIG)


def validate_submit(
    spec: JobSpec,
    shape: Shape,
    partitions: Mapping[str, PartitionView],
    nodes: Sequence[NodeView],
    reservations: Sequence[ReservationView] = (),
    *,
    user: str = "",
    group: str = "",
    enforce_part_limits: str = "NO",
) -> str | None:
    """None when the job could run here some day; otherwise the message sbatch prints
    after "Batch job submission failed: " (``check_submit`` also gives Slurm's detail
    line, such as "Memory specification can not be satisfied").

    Checks: partitions exist (or a default does) and accept jobs (not INACTIVE/DRAIN),
    account and group access, feature syntax, node names, GPU type, reservation name and
    access, and that enough nodes of the partition could ever hold the job. MaxTime and
    MaxNodes refuse only when ``enforce_part_limits`` is not "NO".
    """
    rejection = check_submit(
        spec,
        shape,
        partitions,
        nodes,
        reservations,
        user=user,
        group=group,
        enforce_part_limits=enforce_part_limits,
    )
    return None if rejection is None else rejection.message
