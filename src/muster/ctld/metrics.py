"""``/metrics``: the controller's state in Prometheus's text format, read at scrape time.

``ControllerCollector.collect`` reads the controller's memory when it is scraped (on the
event loop, between two requests), so every count equals what ``squeue -t all`` and
``sinfo`` answer at that moment; nothing is cached between scrapes. Slurm 25.11's names
are used where Slurm has one (``slurm_nodes_idle``, ``slurm_jobs_pending``,
``slurm_partition_jobs_running{partition=}``, ...); muster's own figures carry the
``muster_`` prefix (``ServerStats``' histograms and counters, heartbeat lag, goodput).
docs/metrics.md lists every metric.

Sections, as Slurm's endpoints split them: ``jobs``, ``nodes``, ``partitions``,
``jobs-users-accts`` and ``scheduler``; ``muster`` holds muster's own. Per-user and
per-account families are exported only when ``PrivateData`` hides neither jobs, users nor
accounts (``user_labels``): a scrape carries no credential, so it must not tell anyone
what ``squeue`` would hide from them.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest

from muster import __version__
from muster.core import goodput
from muster.core.states import JobState, NodeState
from muster.ctld.nodes import NodeRuntime
from muster.ctld.state import QUARANTINE_PREFIX
from muster.ctld.stats import ServerStats

__all__ = ["SECTIONS", "ControllerCollector", "job_state_word", "node_state_word"]

SECTIONS = ("jobs", "nodes", "partitions", "jobs-users-accts", "scheduler", "muster")

# Job states as the metric names spell them (Slurm 25.11: slurm_jobs_node_failed, ...).
_JOB_WORDS = {
    JobState.PENDING: "pending",
    JobState.RUNNING: "running",
    JobState.SUSPENDED: "suspended",
    JobState.COMPLETED: "completed",
    JobState.CANCELLED: "cancelled",
    JobState.FAILED: "failed",
    JobState.TIMEOUT: "timeout",
    JobState.NODE_FAIL: "node_failed",
    JobState.PREEMPTED: "preempted",
    JobState.OUT_OF_MEMORY: "out_of_memory",
    JobState.BOOT_FAIL: "boot_failed",
    JobState.DEADLINE: "deadline",
}
# Flags counted across states: completing (state decided, processes being cleaned up),
# requeued (pending again after a run), held.
_JOB_FLAGS = ("completing", "requeued", "held")
_NODE_BASE = {
    NodeState.IDLE: "idle",
    NodeState.MIXED: "mixed",
    NodeState.ALLOCATED: "alloc",
    NodeState.DOWN: "down",
    NodeState.UNKNOWN: "unknown",
    NodeState.FUTURE: "future",
}
_NODE_FLAGS = ("drain", "draining", "drained", "noresp", "completing")
_MB = 1024 * 1024


def job_state_word(job: Any) -> str:
    return _JOB_WORDS[job.state]


def node_state_word(node: NodeRuntime) -> str:
    """sinfo's long state (``%T``): idle, mixed, allocated, down, unknown, draining,
    drained; ``*`` after it when the node does not answer."""
    base = node.base_state()
    if node.drain:
        text = "draining" if base in (NodeState.ALLOCATED, NodeState.MIXED) else "drained"
    else:
        text = str(base).lower()
    if node.registered and (node.silent or not node.responding):
        text += "*"
    return text


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class ControllerCollector:
    """Reads the controller at scrape time. ``ctl``: the ``Controller``; ``stats``: the
    app's ``ServerStats``; ``now``/``monotonic``: the controller's clock."""

    def __init__(self, ctl: Any, stats: ServerStats, *, user_labels: bool) -> None:
        self.ctl = ctl
        self.stats = stats
        self.user_labels = user_labels

    def render(self, sections: Iterable[str] = SECTIONS) -> bytes:
        """The text format of the families of ``sections``."""
        wanted = tuple(sections)
        return generate_latest(_Only(self, wanted))  # type: ignore[arg-type]

    def collect(self, sections: Iterable[str] = SECTIONS) -> Iterator[Metric]:
        wanted = set(sections)
        jobs = self.ctl.jobs.values()
        tally = _tally(jobs) if wanted & {"jobs", "partitions", "jobs-users-accts"} else None
        if tally is not None and "jobs" in wanted:
            yield from self._jobs(tally)
        if "nodes" in wanted:
            yield from self._nodes()
        if tally is not None and "partitions" in wanted:
            yield from self._partitions(tally)
        if tally is not None and "jobs-users-accts" in wanted and self.user_labels:
            yield from _by_label(tally.by_user, "user", "username")
            yield from _by_label(tally.by_account, "account", "account")
        if "scheduler" in wanted:
            yield from self._scheduler()
        if "muster" in wanted:
            yield from self._muster(jobs)

    # --- jobs ---------------------------------------------------------------------------

    def _jobs(self, t: _Tally) -> Iterator[Metric]:
        yield _gauge("slurm_jobs", "Jobs in the controller's memory (squeue -t all)", t.jobs)
        for word in _JOB_WORDS.values():
            yield _gauge(f"slurm_jobs_{word}", f"Jobs in state {word.upper()}", t.total[word])
        for flag in _JOB_FLAGS:
            yield _gauge(f"slurm_jobs_{flag}", f"Jobs flagged {flag}", t.total[flag])
        yield _gauge("slurm_jobs_cpus_alloc", "CPUs allocated to running and completing jobs", t.total["cpus_alloc"])
        yield _gauge("slurm_jobs_gpus_alloc", "GPUs allocated to running and completing jobs", t.total["gpus_alloc"])
        yield _gauge(
            "slurm_jobs_nodes_alloc", "Node allocations held by running and completing jobs", t.total["nodes_alloc"]
        )
        yield _gauge(
            "slurm_jobs_memory_alloc_bytes",
            "Memory allocated to running and completing jobs",
            t.total["mem_alloc"] * _MB,
        )

    # --- nodes --------------------------------------------------------------------------

    def _nodes(self) -> Iterator[Metric]:
        base: Tally[str] = Tally()
        flags: Tally[str] = Tally()
        completing = {n for job in self.ctl.jobs.values() if job.completing for n in job.nodes}
        per = {
            name: GaugeMetricFamily(name, doc, labels=["node"])
            for name, doc in (
                ("slurm_node_cpus", "CPUs of the node"),
                ("slurm_node_cpus_alloc", "CPUs of the node allocated to jobs"),
                ("slurm_node_cpus_idle", "CPUs of the node not allocated"),
                ("slurm_node_memory_bytes", "Memory of the node (RealMemory)"),
                ("slurm_node_memory_alloc_bytes", "Memory of the node allocated to jobs"),
                ("slurm_node_gpus", "GPUs of the node"),
                ("slurm_node_gpus_alloc", "GPUs of the node allocated to jobs"),
                ("slurm_node_gpus_idle", "GPUs of the node not allocated"),
            )
        }
        state = GaugeMetricFamily(
            "muster_node_state", "1 for the node's state as sinfo -N -o %T shows it", labels=["node", "state"]
        )
        lag = GaugeMetricFamily(
            "muster_node_heartbeat_lag_seconds",
            "Seconds since the node's last heartbeat (registered nodes)",
            labels=["node"],
        )
        now = self.ctl.clock.now()
        for node in self.ctl.nodes.values():
            b = node.base_state()
            base[_NODE_BASE.get(b, str(b).lower())] += 1
            busy = b in (NodeState.ALLOCATED, NodeState.MIXED)
            if node.drain:
                flags["drain"] += 1
                flags["draining" if busy else "drained"] += 1
            if node.registered and (node.silent or not node.responding):
                flags["noresp"] += 1
            if node.name in completing:
                flags["completing"] += 1
            name = [node.name]
            cpus_alloc, gpus_alloc = node.cpus_alloc, len(node.gpu_ids_alloc)
            per["slurm_node_cpus"].add_metric(name, node.cpus)
            per["slurm_node_cpus_alloc"].add_metric(name, cpus_alloc)
            per["slurm_node_cpus_idle"].add_metric(name, max(0, node.cpus - cpus_alloc))
            per["slurm_node_memory_bytes"].add_metric(name, node.real_memory * _MB)
            per["slurm_node_memory_alloc_bytes"].add_metric(name, node.mem_alloc * _MB)
            per["slurm_node_gpus"].add_metric(name, node.gpus)
            per["slurm_node_gpus_alloc"].add_metric(name, gpus_alloc)
            per["slurm_node_gpus_idle"].add_metric(name, max(0, node.gpus - gpus_alloc))
            state.add_metric([node.name, node_state_word(node)], 1)
            if node.registered and node.last_seen is not None:
                lag.add_metric(name, max(0.0, now - node.last_seen))
        yield _gauge("slurm_nodes", "Nodes in the configuration", len(self.ctl.nodes))
        # Slurm 26.05's cluster-wide GPU figures (beside the per-node ones above)
        yield _gauge(
            "slurm_nodes_gpus_alloc",
            "GPUs of all nodes allocated to jobs",
            sum(len(n.gpu_ids_alloc) for n in self.ctl.nodes.values()),
        )
        yield _gauge("slurm_nodes_gpus_total", "GPUs of all nodes", sum(n.gpus for n in self.ctl.nodes.values()))
        for word in _NODE_BASE.values():
            yield _gauge(f"slurm_nodes_{word}", f"Nodes whose base state is {word}", base[word])
        for flag in _NODE_FLAGS:
            yield _gauge(f"slurm_nodes_{flag}", f"Nodes flagged {flag}", flags[flag])
        yield from per.values()
        yield state
        yield lag

    # --- partitions ---------------------------------------------------------------------

    def _partitions(self, t: _Tally) -> Iterator[Metric]:
        by_part = {p.name: Tally[str]() for p in self.ctl.config.partitions}
        by_part.update(t.by_part)
        families = {
            word: GaugeMetricFamily(
                f"slurm_partition_jobs_{word}", f"Jobs of the partition in state {word}", labels=["partition"]
            )
            for word in (*_JOB_WORDS.values(), *_JOB_FLAGS)
        }
        # what the partition's running and completing jobs hold (Slurm 26.05: by the jobs,
        # where slurm_partition_*_alloc below counts the partition's nodes)
        for word, what in (("cpus_alloc", "CPUs"), ("gpus_alloc", "GPUs")):
            families[word] = GaugeMetricFamily(
                f"slurm_partition_jobs_{word}", f"{what} held by the partition's jobs", labels=["partition"]
            )
        total = GaugeMetricFamily("slurm_partition_jobs", "Jobs of the partition", labels=["partition"])
        res = {
            name: GaugeMetricFamily(name, doc, labels=["partition"])
            for name, doc in (
                ("slurm_partition_nodes", "Nodes of the partition"),
                ("slurm_partition_cpus", "CPUs of the partition's nodes"),
                ("slurm_partition_cpus_alloc", "CPUs of the partition's nodes allocated to jobs"),
                ("slurm_partition_gpus", "GPUs of the partition's nodes"),
                ("slurm_partition_gpus_alloc", "GPUs of the partition's nodes allocated to jobs"),
            )
        }
        for p in self.ctl.config.partitions:
            members = [self.ctl.nodes[n] for n in p.nodes if n in self.ctl.nodes]
            label = [p.name]
            res["slurm_partition_nodes"].add_metric(label, len(members))
            res["slurm_partition_cpus"].add_metric(label, sum(n.cpus for n in members))
            res["slurm_partition_cpus_alloc"].add_metric(label, sum(n.cpus_alloc for n in members))
            res["slurm_partition_gpus"].add_metric(label, sum(n.gpus for n in members))
            res["slurm_partition_gpus_alloc"].add_metric(label, sum(len(n.gpu_ids_alloc) for n in members))
        for name, tally in sorted(by_part.items()):
            total.add_metric([name], sum(tally[w] for w in _JOB_WORDS.values()))
            for word, fam in families.items():
                fam.add_metric([name], tally[word])
        yield total
        yield from families.values()
        yield from res.values()

    # --- scheduler ----------------------------------------------------------------------

    def _scheduler(self) -> Iterator[Metric]:
        s = self.stats
        d = s.diag
        yield _gauge("slurm_schedule_cycle_cnt", "Main scheduling cycles since the last reset", d.cycles)
        yield _gauge("slurm_schedule_cycle_last", "Last main scheduling cycle, microseconds", d.cycle_last_us)
        yield _gauge(
            "slurm_schedule_cycle_max", "Longest main cycle since the last reset, microseconds", d.cycle_max_us
        )
        yield _gauge("slurm_schedule_cycle_mean", "Mean main cycle since the last reset, microseconds", _mean(d))
        yield _gauge(
            "slurm_schedule_cycle_depth_mean", "Mean jobs examined per cycle since the last reset", _depth_mean(d)
        )
        yield _gauge("slurm_schedule_queue_len", "Pending jobs seen by the last cycle", d.queue_last)
        yield _gauge(
            "slurm_backfilled_jobs", "Jobs started by backfill since the controller started", s.backfilled_total
        )
        yield _gauge("slurm_bf_cycle_last", "Last backfill cycle, microseconds", d.bf_last_us)
        yield _gauge("slurm_bf_cycle_max", "Longest backfill cycle since the last reset, microseconds", d.bf_max_us)
        yield _gauge("slurm_bf_cycle_cnt", "Backfill cycles since the last reset", d.bf_cycles)
        yield _gauge("slurm_bf_depth_last", "Jobs examined by the last backfill cycle", d.bf_depth_last)
        yield _gauge("slurm_bf_queue_len", "Pending jobs seen by the last backfill cycle", d.bf_queue_last)
        last = s.last_pass
        if last is not None:
            fam = GaugeMetricFamily("muster_sched_last_pass", "Counts of the last scheduling pass", labels=["count"])
            for name in ("pending_seen", "examined", "started", "backfilled", "planned", "ineligible", "blocked"):
                fam.add_metric([name], getattr(last, name))
            yield fam

    # --- muster's own -------------------------------------------------------------------

    def _muster(self, jobs: Iterable[Any]) -> Iterator[Metric]:
        yield from self.stats.registry.collect()
        info = GaugeMetricFamily(
            "muster_build_info", "The controller's build: 1, its version in a label", labels=["version"]
        )
        info.add_metric([__version__], 1)
        yield info
        yield _gauge("muster_ctld_start_time_seconds", "When the controller started (epoch)", self.stats.started)
        # a backup in standby serves the same two with 1 and 0 (ctld.standby)
        yield _gauge("muster_controller_active", "Whether this controller is the active one (1)", 1)
        yield _gauge("muster_controller_standby", "Whether this controller is a backup in standby (1)", 0)
        mono = self.ctl.clock.monotonic()
        last = self.ctl.last_tick
        yield _gauge(
            "muster_ctld_loop_lag_seconds",
            "Seconds since the controller's loop last noted a run (a stall in progress if large)",
            0.0 if last is None else max(0.0, mono - last),
        )
        yield _gauge(
            "muster_ctld_launching_jobs", "Launches handed to agents and not answered yet", len(self.ctl.launching)
        )
        yield from self._goodput(jobs)
        yield from self._stragglers(jobs)
        yield from self._ledger()

    def _ledger(self) -> Iterator[Metric]:
        """The failure ledger (``ctld.ledger``): records this controller wrote, by kind and
        attribution, and the nodes quarantined now."""
        ledger = getattr(self.ctl, "ledger", None)
        if ledger is None:
            return
        fam = CounterMetricFamily(
            "muster_node_failures",
            "Failure-ledger records written by this controller, by kind and attribution",
            labels=["kind", "attribution"],
        )
        for (kind, who), n in sorted(ledger.added.items()):
            fam.add_metric([kind, who], n)
        yield fam
        quarantined = sum(1 for n in self.ctl.nodes.values() if n.reason.startswith(QUARANTINE_PREFIX))
        yield _gauge("muster_nodes_quarantined", "Nodes drained as quarantined by the failure ledger", quarantined)

    @staticmethod
    def _stragglers(jobs: Iterable[Any]) -> Iterator[Metric]:
        """The nodes of running jobs flagged slower than their peers (``ctld.stragglers``):
        how much slower, as a fraction (0.34: 34 % above the median of its peers)."""
        fam = GaugeMetricFamily(
            "muster_job_straggler",
            "Nodes of running jobs flagged as stragglers: how much slower than their peers (fraction)",
            labels=["job", "node"],
        )
        for job in jobs:
            found = (job.progress or {}).get("stragglers") if job.state is JobState.RUNNING else None
            for node, v in sorted((found or {}).items()):
                if isinstance(v, dict):
                    fam.add_metric([str(job.job_id), node], float(v.get("slower") or 0.0))
        yield fam

    def _goodput(self, jobs: Iterable[Any]) -> Iterator[Metric]:
        """The cluster's goodput over the jobs in memory that reported progress
        (``core.goodput``); jobs that reported nothing count in allocated time only."""
        now = self.ctl.clock.now()
        alloc_gpu_s = weighted = weight = 0.0
        startup = lost = productive = 0.0
        reporting = 0
        for job in jobs:
            if job.start_time is None and not job.attempts:
                continue
            g = goodput.summary(
                {
                    "attempts": job.attempts,
                    "state": str(job.state),
                    "start_time": job.start_time,
                    "restart_count": job.restart_count,
                    "progress": job.progress,
                    "alloc": [{"gpu_ids": a.gpu_ids} for a in job.alloc],
                },
                now,
            )
            alloc_gpu_s += g["gpu_seconds"]
            if g["goodput"] is None:
                continue
            reporting += 1
            w = g["gpu_seconds"] or g["elapsed_total"]
            weighted += g["goodput"] * w
            weight += w
            startup += g["startup"]
            lost += g["lost"]
            productive += g["productive"]
        yield _gauge("muster_goodput_allocated_gpu_seconds", "GPU-seconds allocated to jobs in memory", alloc_gpu_s)
        yield _gauge("muster_goodput_jobs_reporting", "Jobs in memory that reported progress", reporting)
        fam = GaugeMetricFamily(
            "muster_goodput_seconds", "Wall seconds of reporting jobs, split by kind", labels=["kind"]
        )
        fam.add_metric(["startup"], startup)
        fam.add_metric(["lost"], lost)
        fam.add_metric(["productive"], productive)
        yield fam
        if weight > 0:
            yield _gauge(
                "muster_goodput_ratio", "GPU-time-weighted goodput of the jobs that report progress", weighted / weight
            )


@dataclass(slots=True)
class _Tally:
    """The jobs in memory counted once per scrape: by state and flag word (and the
    resources running jobs hold), overall and by partition, user and account."""

    jobs: int = 0
    total: Tally[str] = field(default_factory=Tally)
    by_part: dict[str, Tally[str]] = field(default_factory=dict)
    by_user: dict[str, Tally[str]] = field(default_factory=dict)
    by_account: dict[str, Tally[str]] = field(default_factory=dict)


def _tally(jobs: Iterable[Any]) -> _Tally:
    """One pass over the jobs, grouping them by what the families tell apart (a queue of
    100,000 jobs makes a few hundred groups), then the groups into the tallies."""
    pending, running = JobState.PENDING, JobState.RUNNING
    groups: dict[tuple[Any, ...], int] = {}
    held: dict[tuple[str, str, str], Tally[str]] = {}  # (user, account, partition) -> resources held
    t = _Tally()
    for job in jobs:
        state = job.state
        waiting = state is pending
        account = job.spec.account or job.user
        key = (
            state,
            job.completing,
            waiting and job.restart_count > 0,
            waiting and job.hold is not None,
            # a pending job submitted to several partitions counts in each until it starts
            job.partition,
            waiting,
            job.user,
            account,
        )
        groups[key] = groups.get(key, 0) + 1
        if state is running or job.completing:
            res = held.setdefault((job.user, account, job.partition), Tally())
            for a in job.alloc:
                res["cpus_alloc"] += a.cpus
                res["gpus_alloc"] += len(a.gpu_ids)
                res["mem_alloc"] += a.mem
                res["nodes_alloc"] += 1
    for (state, completing, requeued, is_held, partition, waiting, user, account), n in groups.items():
        words = [_JOB_WORDS[state]]
        if completing:
            words.append("completing")
        if requeued:
            words.append("requeued")
        if is_held:
            words.append("held")
        parts = partition.split(",") if waiting else [partition]
        t.jobs += n
        for tally in (
            t.total,
            *(t.by_part.setdefault(p, Tally()) for p in parts),
            t.by_user.setdefault(user, Tally()),
            t.by_account.setdefault(account, Tally()),
        ):
            for w in words:
                tally[w] += n
    for (user, account, partition), res in held.items():
        t.total.update(res)
        t.by_part.setdefault(partition, Tally()).update(res)
        t.by_user.setdefault(user, Tally()).update(res)
        t.by_account.setdefault(account, Tally()).update(res)
    return t


def _by_label(by: dict[str, Tally[str]], kind: str, label: str) -> Iterator[Metric]:
    words = (*_JOB_WORDS.values(), *_JOB_FLAGS, "cpus_alloc", "gpus_alloc")
    total = GaugeMetricFamily(f"slurm_{kind}_jobs", f"Jobs of the {kind}", labels=[label])
    families = {
        w: GaugeMetricFamily(f"slurm_{kind}_jobs_{w}", f"Jobs of the {kind}: {w}", labels=[label]) for w in words
    }
    for name, tally in sorted(by.items()):
        total.add_metric([name], sum(tally[w] for w in _JOB_WORDS.values()))
        for w, fam in families.items():
            if tally[w]:  # only the non-zero series: users times states would make thousands of zeros
                fam.add_metric([name], tally[w])
    yield total
    yield from families.values()


def _mean(d: Any) -> float:
    return d.cycle_sum_us / d.cycles if d.cycles else 0.0


def _depth_mean(d: Any) -> float:
    return d.depth_sum / d.cycles if d.cycles else 0.0


class _Only:
    """A collector view limited to some sections (what ``generate_latest`` reads)."""

    def __init__(self, collector: ControllerCollector, sections: tuple[str, ...]) -> None:
        self.collector = collector
        self.sections = sections

    def collect(self) -> Iterator[Metric]:
        return self.collector.collect(self.sections)
