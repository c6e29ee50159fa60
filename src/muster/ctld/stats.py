"""What the controller counts as it runs: what ``sdiag`` shows and ``/metrics`` exports
beyond the state it reads at scrape time.

Two kinds of figures, kept apart on purpose:

* ``Diag``: sdiag's counters (jobs submitted, started, ...; the main and backfill
  scheduler's cycles; RPCs by message type and by user). ``sdiag --reset`` (an
  administrator) starts them again from zero, as Slurm's does; ``Data since`` says when.
* Prometheus counters and histograms (pass phase durations, submit-to-start wait, store
  commit latency, launch failures, requeues by reason, stalls): monotonic for the life of
  the process, as Prometheus expects; a reset never touches them.

Everything is fed by the controller's own choke points: ``observe_commit`` sees every job
change committed to the store (``ClusterState.record``), ``observe_pass`` every scheduling
pass, ``observe_rpc`` every HTTP request, ``observe_stall`` every stall of the loop. No
clock is read here: callers pass times.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics

from muster.sched.decisions import PassStats

__all__ = ["Diag", "RpcStat", "ServerStats"]

# Seconds: a pass phase or a store commit is usually well under a millisecond to tens of
# milliseconds; a stall is seconds.
_FAST_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_WAIT_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 4 * 3600.0, 12 * 3600.0, 86400.0)

# Job events (``store`` kinds) as sdiag counts them.
_ENDED = {"completed": "completed", "cancel": "canceled", "cancelled": "canceled", "failed": "failed"}


@dataclass(slots=True)
class RpcStat:
    number: int = 0  # Slurm's message number (0: none)
    count: int = 0
    total_us: int = 0


@dataclass
class Diag:
    """sdiag's counters since ``since`` (the controller's start, or the last reset)."""

    since: float
    submitted: int = 0
    started: int = 0
    completed: int = 0
    canceled: int = 0
    failed: int = 0
    # main scheduler (microseconds, like sdiag)
    cycles: int = 0
    cycle_last_us: int = 0
    cycle_max_us: int = 0
    cycle_sum_us: int = 0
    depth_sum: int = 0
    queue_last: int = 0
    last_cycle_when: float | None = None
    # backfill (muster's backfill runs inside the main pass: its share of each pass)
    backfilled: int = 0
    bf_cycles: int = 0
    bf_last_us: int = 0
    bf_max_us: int = 0
    bf_sum_us: int = 0
    bf_depth_last: int = 0
    bf_depth_sum: int = 0
    bf_queue_last: int = 0
    bf_last_when: float | None = None
    rpc_types: dict[str, RpcStat] = field(default_factory=dict)
    rpc_users: dict[tuple[str, int], RpcStat] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if not k.startswith("rpc_")}
        out["rpc_types"] = [[k, v.number, v.count, v.total_us] for k, v in self.rpc_types.items()]
        out["rpc_users"] = [[u, uid, v.count, v.total_us] for (u, uid), v in self.rpc_users.items()]
        return out


class ServerStats:
    """The controller's running figures: sdiag's (``diag``) and Prometheus's (``registry``)."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.diag = Diag(since=started)
        self.backfilled_total = 0  # since start: sdiag's "since last slurm start"
        self.passes = 0
        self.last_pass: PassStats | None = None
        self.last_pass_seconds = 0.0
        disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client leaves it unannotated; no ``*_created`` series: they double what is exported
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.phase_seconds = Histogram(
            "muster_sched_phase_seconds",
            "Time spent in each numbered phase of a scheduling pass",
            ["phase"],
            buckets=_FAST_BUCKETS,
            registry=r,
        )
        self.pass_seconds = Histogram(
            "muster_sched_pass_seconds",
            "Time of a whole scheduling pass (snapshot, decision, commits)",
            buckets=_FAST_BUCKETS,
            registry=r,
        )
        self.wait_seconds = Histogram(
            "muster_job_wait_seconds",
            "Time from a job's submission (or eligibility after a requeue) to its start, by partition",
            ["partition"],
            buckets=_WAIT_BUCKETS,
            registry=r,
        )
        self.commit_seconds = Histogram(
            "muster_store_commit_seconds",
            "Latency of a committed change of jobs in the store",
            buckets=_FAST_BUCKETS,
            registry=r,
        )
        self.commit_failures = Counter(
            "muster_store_commit_failures", "Commits the store refused (full disk, I/O error)", registry=r
        )
        self.launch_failures = Counter(
            "muster_launch_failures", "Launches that failed, by whose fault", ["fault"], registry=r
        )
        self.requeues = Counter("muster_job_requeues", "Jobs put back in the queue, by reason", ["reason"], registry=r)
        self.job_events = Counter(
            "muster_job_events", "Job events committed to the store, by kind", ["kind"], registry=r
        )
        self.stalls = Counter("muster_ctld_loop_stalls", "Stalls of the controller's event loop", registry=r)
        self.stall_seconds = Counter(
            "muster_ctld_loop_stall_seconds", "Time the controller's loop spent stalled", registry=r
        )
        self.rpc_seconds = Histogram(
            "muster_rpc_seconds",
            "Time to answer a request, by message type",
            ["type"],
            buckets=_FAST_BUCKETS,
            registry=r,
        )

    # --- feeds ---------------------------------------------------------------------------

    def observe_commit(self, changes: Iterable[tuple[Any, str, dict[str, Any]]], seconds: float) -> None:
        """A change of jobs the store committed (``ClusterState.record``)."""
        self.commit_seconds.observe(seconds)
        d = self.diag
        for job, kind, data in changes:
            self.job_events.labels(kind).inc()
            if kind == "submit":
                d.submitted += 1
            elif kind == "start":
                d.started += 1
                if job.start_time is not None:
                    eligible = job.eligible_time or job.submit_time
                    self.wait_seconds.labels(job.partition or "").observe(max(0.0, job.start_time - eligible))
            elif kind in _ENDED:
                setattr(d, _ENDED[kind], getattr(d, _ENDED[kind]) + 1)
            elif kind in ("timeout", "out_of_memory", "node_fail"):
                d.failed += 1
            elif kind == "launch_failed":
                self.launch_failures.labels(str(data.get("fault") or "unknown")).inc()
                if str(job.state) == "PENDING":
                    self.requeues.labels("launch_failed").inc()
            elif kind == "hung":
                self.requeues.labels("hung").inc()
            elif kind == "requeue":
                # after a node failure in the same commit, else asked for (scontrol requeue)
                self.requeues.labels("scontrol" if "by" in data else "node_fail").inc()

    def observe_commit_failure(self) -> None:
        self.commit_failures.inc()

    def observe_pass(self, stats: PassStats, seconds: float, now: float) -> None:
        """One scheduling pass: its stats (``phase_seconds`` measured by the caller)."""
        self.passes += 1
        self.last_pass = stats
        self.last_pass_seconds = seconds
        self.pass_seconds.observe(seconds)
        for phase, secs in stats.phase_seconds.items():
            self.phase_seconds.labels(phase).observe(secs)
        d = self.diag
        us = int(seconds * 1e6)
        d.cycles += 1
        d.cycle_last_us = us
        d.cycle_max_us = max(d.cycle_max_us, us)
        d.cycle_sum_us += us
        d.depth_sum += stats.examined
        d.queue_last = stats.pending_seen
        d.last_cycle_when = now
        self.backfilled_total += stats.backfilled
        d.backfilled += stats.backfilled
        if stats.planned or stats.backfilled:  # the backfill part of the pass did work
            bf_us = int(stats.phase_seconds.get("4.placement", 0.0) * 1e6)
            d.bf_cycles += 1
            d.bf_last_us = bf_us
            d.bf_max_us = max(d.bf_max_us, bf_us)
            d.bf_sum_us += bf_us
            d.bf_depth_last = stats.examined
            d.bf_depth_sum += stats.examined
            d.bf_queue_last = stats.pending_seen
            d.bf_last_when = now

    def observe_rpc(self, msg_type: str, number: int, user: str | None, uid: int | None, seconds: float) -> None:
        self.rpc_seconds.labels(msg_type).observe(seconds)
        us = int(seconds * 1e6)
        stat = self.diag.rpc_types.get(msg_type)
        if stat is None:
            stat = self.diag.rpc_types[msg_type] = RpcStat(number)
        stat.count += 1
        stat.total_us += us
        if user is not None and uid is not None:
            key = (user, uid)
            ustat = self.diag.rpc_users.get(key)
            if ustat is None:
                ustat = self.diag.rpc_users[key] = RpcStat()
            ustat.count += 1
            ustat.total_us += us

    def observe_stall(self, seconds: float) -> None:
        self.stalls.inc()
        self.stall_seconds.inc(seconds)

    def reset(self, now: float) -> None:
        """``sdiag --reset``: sdiag's counters start again (Prometheus's never do)."""
        self.diag = Diag(since=now)
