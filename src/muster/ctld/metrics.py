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
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest

from muster.core import goodput
from muster.core.states import JobState, NodeState
from muster.ctld.nodes import NodeRuntime
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


def _job_flags(job: Any) -> list[str]:
    flags = []
    if job.completing:
        flags.append("completing")
    if job.state is JobState.PENDING and job.restart_count > 0:
        flags.append("requeued")
    if job.state is JobState.PENDING and getattr(job, "hold", None):
        flags.append("held")
    return flags


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
        jobs = list(self.ctl.jobs.values())
        if "jobs" in wanted:
            yield from self._jobs(jobs)
        if "nodes" in wanted:
            yield from self._nodes()
        if "partitions" in wanted:
            yield from self._partitions(jobs)
        if "jobs-users-accts" in wanted and self.user_labels:
            yield from self._by_label(jobs, "user", "username", lambda j: j.user)
            yield from self._by_label(jobs, "account", "account", lambda j: j.spec.account or j.user)
        if "scheduler" in wanted:
            yield from self._scheduler()
        if "muster" in wanted:
            yield from self._muster(jobs)

    # --- jobs ---------------------------------------------------------------------------

    def _jobs(self, jobs: list[Any]) -> Iterator[Metric]:
        states: Tally[str] = Tally()
        flags: Tally[str] = Tally()
        cpus = gpus = nodes = mem = 0
        for job in jobs:
            states[_JOB_WORDS[job.state]] += 1
            flags.update(_job_flags(job))
            if job.is_active:
                for a in job.alloc:
                    cpus += a.cpus
                    gpus += len(a.gpu_ids)
                    mem += a.mem
                nodes += len(job.alloc)
        yield _gauge("slurm_jobs", "Jobs in the controller's memory (squeue -t all)", len(jobs))
        for word in _JOB_WORDS.values():
            yield _gauge(f"slurm_jobs_{word}", f"Jobs in state {word.upper()}", states[word])
        for flag in _JOB_FLAGS:
            yield _gauge(f"slurm_jobs_{flag}", f"Jobs flagged {flag}", flags[flag])
        yield _gauge("slurm_jobs_cpus_alloc", "CPUs allocated to running and completing jobs", cpus)
        yield _gauge("slurm_jobs_gpus_alloc", "GPUs allocated to running and completing jobs", gpus)
        yield _gauge("slurm_jobs_nodes_alloc", "Node allocations held by running and completing jobs", nodes)
        yield _gauge("slurm_jobs_memory_alloc_bytes", "Memory allocated to running and completing jobs", mem * _MB)

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
        for word in _NODE_BASE.values():
            yield _gauge(f"slurm_nodes_{word}", f"Nodes whose base state is {word}", base[word])
        for flag in _NODE_FLAGS:
            yield _gauge(f"slurm_nodes_{flag}", f"Nodes flagged {flag}", flags[flag])
        yield from per.values()
        yield state
        yield lag

    # --- partitions ---------------------------------------------------------------------

    def _partitions(self, jobs: list[Any]) -> Iterator[Metric]:
        by_part: dict[str, Tally[str]] = {p.name: Tally() for p in self.ctl.config.partitions}
        for job in jobs:
            # A job submitted to several partitions counts in each until it starts in one.
            names = [job.partition] if job.is_active or job.state.is_terminal else job.partition.split(",")
            for name in names:
                tally = by_part.setdefault(name, Tally())
                tally[_JOB_WORDS[job.state]] += 1
                tally.update(_job_flags(job))
        families = {
            word: GaugeMetricFamily(
                f"slurm_partition_jobs_{word}", f"Jobs of the partition in state {word}", labels=["partition"]
            )
            for word in (*_JOB_WORDS.values(), *_JOB_FLAGS)
        }
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

    # --- users and accounts -------------------------------------------------------------

    def _by_label(self, jobs: list[Any], kind: str, label: str, key: Any) -> Iterator[Metric]:
        by: dict[str, Tally[str]] = {}
        for job in jobs:
            tally = by.setdefault(key(job), Tally())
            tally[_JOB_WORDS[job.state]] += 1
            tally.update(_job_flags(job))
            if job.is_active:
                tally["cpus_alloc"] += sum(a.cpus for a in job.alloc)
                tally["gpus_alloc"] += sum(len(a.gpu_ids) for a in job.alloc)
        words = (*_JOB_WORDS.values(), *_JOB_FLAGS, "cpus_alloc", "gpus_alloc")
        total = GaugeMetricFamily(f"slurm_{kind}_jobs", f"Jobs of the {kind}", labels=[label])
        families = {
            w: GaugeMetricFamily(f"slurm_{kind}_jobs_{w}", f"Jobs of the {kind}: {w}", labels=[label]) for w in words
        }
        for name, tally in sorted(by.items()):
            total.add_metric([name], sum(tally[w] for w in _JOB_WORDS.values()))
            for w, fam in families.items():
                fam.add_metric([name], tally[w])
        yield total
        yield from families.values()

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

    def _muster(self, jobs: list[Any]) -> Iterator[Metric]:
        yield from self.stats.registry.collect()
        yield _gauge("muster_ctld_start_time_seconds", "When the controller started (epoch)", self.stats.started)
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

    def _goodput(self, jobs: list[Any]) -> Iterator[Metric]:
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
