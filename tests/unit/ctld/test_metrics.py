"""The /metrics collector, sdiag's counters and the pass log, on a manual clock with a real
SQLite store: every count is read from the controller's memory at scrape time."""

from __future__ import annotations

import json
import logging
import pathlib

import pytest
from prometheus_client.parser import text_string_to_metric_families

from muster.core.clock import ManualClock
from muster.core.config import ConfigError, parse_config
from muster.core.job import JobSpec, NodeAlloc
from muster.ctld.controller import Controller, Identity
from muster.ctld.metrics import ControllerCollector
from muster.ctld.passlog import IDLE_EVERY, PassLog
from muster.ctld.rpcstats import message_type
from muster.ctld.stats import ServerStats
from muster.ctld.store import Store
from muster.protocol.logjson import JsonFormatter
from muster.sched.decisions import PassStats

CONF = """
ClusterName=t
SlurmdTimeout=10
NodeName=node[1-4] CPUs=32 RealMemory=128000 Gres=gpu:8
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=debug Nodes=node[3-4] MaxTime=60 State=UP
"""

ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
BOB = Identity(1002, 1002, "bob", "bob", "h", admin=False)


def make(tmp_path: pathlib.Path, extra: str = "") -> tuple[Controller, ServerStats]:
    ctl = Controller(parse_config(CONF + extra, "test.conf"), Store(str(tmp_path / "m.db")), ManualClock(1000.0))
    ctl.load()
    stats = ServerStats(1000.0)
    ctl.stats = stats
    for name in ctl.nodes:
        ctl.agents.register({"node": name, "gpus": 8, "running": []})
    return ctl, stats


def start(ctl: Controller, job_id: int, node: str, gpus: int) -> None:
    class S:
        def __init__(self) -> None:
            self.job_id, self.partition, self.backfilled = job_id, ctl.jobs[job_id].partition, False
            self.alloc = [NodeAlloc(node, 4, 1000, list(range(gpus)))]

    ctl.launches.apply_starts([S()], ctl.clock.now())
    ctl.launches.launch_done(job_id)


def scrape(ctl: Controller, stats: ServerStats, user_labels: bool = True) -> dict[tuple[str, tuple], float]:
    text = ControllerCollector(ctl, stats, user_labels=user_labels).render().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_counts_are_read_from_memory_at_scrape_time(tmp_path: pathlib.Path) -> None:
    ctl, stats = make(tmp_path)
    running = ctl.queue.submit(JobSpec(gpus_per_node=2), ALICE)
    ctl.queue.submit(JobSpec(partitions=["debug"]), BOB)
    start(ctl, running.job_id, "node1", 2)
    m = scrape(ctl, stats)
    assert m[("slurm_jobs_pending", ())] == 1
    assert m[("slurm_jobs_running", ())] == 1
    assert m[("slurm_jobs", ())] == 2
    assert m[("slurm_nodes_mixed", ())] == 1 and m[("slurm_nodes_idle", ())] == 3
    assert m[("slurm_node_gpus_alloc", (("node", "node1"),))] == 2
    assert m[("slurm_node_gpus", (("node", "node2"),))] == 8
    assert m[("slurm_node_cpus_alloc", (("node", "node1"),))] == 4
    assert m[("slurm_partition_jobs_pending", (("partition", "debug"),))] == 1
    assert m[("slurm_partition_jobs_running", (("partition", "gpu"),))] == 1
    assert m[("slurm_user_jobs_running", (("username", "alice"),))] == 1
    assert m[("slurm_account_jobs_pending", (("account", "bob"),))] == 1
    assert m[("muster_node_state", (("node", "node1"), ("state", "mixed")))] == 1
    # the next scrape sees the change at once: nothing is cached
    ctl.drain("node2", "maintenance")
    m = scrape(ctl, stats)
    assert m[("slurm_nodes_drain", ())] == 1 and m[("slurm_nodes_drained", ())] == 1
    assert m[("muster_node_state", (("node", "node2"), ("state", "drained")))] == 1


def test_slurm_26_05_gpu_families_count_a_running_gpu_job(tmp_path: pathlib.Path) -> None:
    ctl, stats = make(tmp_path)
    running = ctl.queue.submit(JobSpec(gpus_per_node=3), ALICE)
    ctl.queue.submit(JobSpec(partitions=["debug"], gpus_per_node=1), BOB)  # pending: holds nothing
    start(ctl, running.job_id, "node3", 3)  # node3 is in both partitions; the job in gpu only
    text = ControllerCollector(ctl, stats, user_labels=True).render().decode()
    m = scrape(ctl, stats)
    # /metrics/nodes: the cluster's GPUs, unlabelled, beside slurm_node_gpus{node}
    assert m[("slurm_nodes_gpus_alloc", ())] == 3 and m[("slurm_nodes_gpus_total", ())] == 32
    assert "# TYPE slurm_nodes_gpus_alloc gauge" in text and "# TYPE slurm_nodes_gpus_total gauge" in text
    # /metrics/partitions: what the partition's jobs hold, and its nodes' GPUs
    assert m[("slurm_partition_jobs_gpus_alloc", (("partition", "gpu"),))] == 3
    assert m[("slurm_partition_jobs_gpus_alloc", (("partition", "debug"),))] == 0
    assert m[("slurm_partition_jobs_cpus_alloc", (("partition", "gpu"),))] == 4
    assert m[("slurm_partition_gpus", (("partition", "gpu"),))] == 32
    assert m[("slurm_partition_gpus", (("partition", "debug"),))] == 16
    assert m[("slurm_partition_gpus_alloc", (("partition", "debug"),))] == 3  # node3's, by node
    # /metrics/jobs-users-accts
    assert m[("slurm_user_jobs_gpus_alloc", (("username", "alice"),))] == 3
    assert m[("slurm_account_jobs_gpus_alloc", (("account", "alice"),))] == 3
    assert ("slurm_user_jobs_gpus_alloc", (("username", "bob"),)) not in m  # only non-zero series
    assert m[("slurm_jobs_gpus_alloc", ())] == 3
    # each section alone carries its own families, as Slurm's endpoints split them
    nodes = ControllerCollector(ctl, stats, user_labels=True).render(["nodes"]).decode()
    names = {f.name for f in text_string_to_metric_families(nodes)}
    assert {"slurm_nodes_gpus_alloc", "slurm_nodes_gpus_total", "slurm_node_gpus_alloc"} <= names
    parts = ControllerCollector(ctl, stats, user_labels=True).render(["partitions"]).decode()
    names = {f.name for f in text_string_to_metric_families(parts)}
    assert {"slurm_partition_jobs_gpus_alloc", "slurm_partition_gpus"} <= names


def test_the_build_info_names_the_controllers_version(tmp_path: pathlib.Path) -> None:
    from muster import __version__

    ctl, stats = make(tmp_path)
    m = scrape(ctl, stats)
    assert m[("muster_build_info", (("version", __version__),))] == 1
    assert __version__ != "0.1.0"  # the build's version from git, not the old literal


def test_user_and_account_families_are_left_out_when_private(tmp_path: pathlib.Path) -> None:
    ctl, stats = make(tmp_path)
    ctl.queue.submit(JobSpec(), ALICE)
    m = scrape(ctl, stats, user_labels=False)
    assert not [k for k in m if k[0].startswith(("slurm_user_", "slurm_account_"))]
    assert m[("slurm_jobs_pending", ())] == 1


def test_commits_feed_sdiag_and_the_requeue_counter_by_reason(tmp_path: pathlib.Path) -> None:
    ctl, stats = make(tmp_path)
    job = ctl.queue.submit(JobSpec(), ALICE)
    start(ctl, job.job_id, "node1", 0)
    ctl.node_failed_job(job, 1010.0, "node1 stopped answering")
    d = stats.diag
    assert (d.submitted, d.started, d.failed) == (1, 1, 1)
    m = scrape(ctl, stats)
    assert m[("muster_job_requeues_total", (("reason", "node_fail"),))] == 1
    assert m[("muster_store_commit_seconds_count", ())] == 3
    assert m[("slurm_jobs_requeued", ())] == 1 and m[("slurm_jobs_pending", ())] == 1
    assert m[("muster_job_wait_seconds_count", (("partition", "gpu"),))] == 1
    stats.reset(2000.0)  # sdiag --reset: sdiag's counters only
    assert (stats.diag.submitted, stats.diag.since) == (0, 2000.0)
    assert scrape(ctl, stats)[("muster_job_requeues_total", (("reason", "node_fail"),))] == 1


def test_a_pass_is_counted_for_sdiag_and_as_phase_histograms(tmp_path: pathlib.Path) -> None:
    ctl, stats = make(tmp_path)
    ps = PassStats(pending_seen=5, examined=4, started=2, backfilled=1, planned=1)
    ps.phase_seconds = {"1.profile": 0.001, "4.placement": 0.002}
    stats.observe_pass(ps, 0.004, 1000.0)
    d = stats.diag
    assert (d.cycles, d.cycle_last_us, d.queue_last, d.bf_cycles, d.bf_last_us) == (1, 4000, 5, 1, 2000)
    m = scrape(ctl, stats)
    assert m[("muster_sched_phase_seconds_count", (("phase", "4.placement"),))] == 1
    assert m[("slurm_backfilled_jobs", ())] == 1 and m[("slurm_schedule_cycle_cnt", ())] == 1
    assert m[("slurm_schedule_cycle_last", ())] == 4000
    assert m[("muster_sched_last_pass", (("count", "started"),))] == 2


def test_rpcs_are_named_as_slurm_names_them() -> None:
    assert message_type("POST", "/v1/jobs") == ("REQUEST_SUBMIT_BATCH_JOB", 4003)
    assert message_type("GET", "/v1/partitions") == ("REQUEST_PARTITION_INFO", 2009)
    assert message_type("POST", "/v1/steps/x") == ("POST /v1/steps/x", 0)
    stats = ServerStats(0.0)
    stats.observe_rpc("REQUEST_JOB_INFO", 2003, "alice", 1001, 0.002)
    stats.observe_rpc("REQUEST_JOB_INFO", 2003, "alice", 1001, 0.004)
    d = stats.diag.to_dict()
    assert d["rpc_types"] == [["REQUEST_JOB_INFO", 2003, 2, 6000]]
    assert d["rpc_users"] == [["alice", 1001, 2, 6000]]


def test_a_pass_like_the_one_before_is_logged_at_info_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock(0.0)
    plog = PassLog(clock)
    caplog.set_level(logging.DEBUG, logger="musterctld.sched")
    assert plog.log(1, PassStats(started=1), 0.001) == logging.INFO
    assert plog.log(2, PassStats(), 0.001) == logging.INFO  # counts changed
    clock.advance(1)
    assert plog.log(3, PassStats(), 0.001) == logging.INFO  # idle: the first in a minute
    clock.advance(1)
    assert plog.log(4, PassStats(), 0.001) == logging.DEBUG
    waiting = PassStats(pending_seen=3, examined=3, blocked=3)
    assert plog.log(5, waiting, 0.001) == logging.INFO  # a change
    assert plog.log(6, waiting, 0.001) == logging.DEBUG  # the same jobs, the same reasons
    clock.advance(IDLE_EVERY)
    assert plog.log(7, waiting, 0.001) == logging.INFO
    first = caplog.records[0]
    assert first.pass_id == 1 and first.fields["counts"]["started"] == 1  # type: ignore[attr-defined]
    assert first.getMessage().startswith("pass 1: 1.00 ms")


def test_json_log_lines_carry_the_job_node_and_pass() -> None:
    fmt = JsonFormatter("musterctld")
    rec = logging.LogRecord("musterctld", logging.WARNING, "f", 1, "job %s: launch on %s failed", (12, "node3"), None)
    line = json.loads(fmt.format(rec))
    assert line["job_id"] == 12 and line["level"] == "warning" and line["logger"] == "musterctld"
    assert line["message"] == "job 12: launch on node3 failed" and line["time"].endswith("+00:00")
    rec = logging.LogRecord("musterctld", logging.INFO, "f", 1, "node %s not responding", ("gpu7",), None)
    assert json.loads(fmt.format(rec))["node"] == "gpu7"
    rec = logging.LogRecord("x", logging.INFO, "f", 1, "pass", (), None)
    rec.pass_id = 9
    rec.fields = {"counts": {"started": 0}}
    line = json.loads(fmt.format(rec))
    assert line["pass_id"] == 9 and line["counts"] == {"started": 0}
    agent = JsonFormatter("musterd", node="node2")
    rec = logging.LogRecord("musterd", logging.INFO, "f", 1, "job 5 started", (), None)
    assert json.loads(agent.format(rec))["node"] == "node2"


@pytest.mark.parametrize(
    ("key", "bad", "good"), [("MetricsType", "metrics/prom", "metrics/openmetrics"), ("LogFormat", "xml", "JSON")]
)
def test_a_bad_metrics_or_log_format_is_refused(key: str, bad: str, good: str) -> None:
    with pytest.raises(ConfigError, match=f"bad {key}"):
        parse_config(f"{key}={bad}\n" + CONF, "t.conf")
    assert parse_config(f"{key}={good}\n" + CONF, "t.conf").get(key) == good


def test_docs_name_every_metric(tmp_path: pathlib.Path) -> None:
    from muster.agent.gpus import emulate
    from muster.agent.metrics import AgentCollector

    class _Agent:  # what AgentCollector reads of a daemon
        node = type("N", (), {"name": "node1"})()
        inventory = emulate(2, None)
        supervisor = type("S", (), {"jobs": {}})()
        _gpu_faults: set = set()

    ctl, stats = make(tmp_path)
    ps = PassStats()
    stats.observe_pass(ps, 0.001, 1000.0)
    text = ControllerCollector(ctl, stats, user_labels=True).render().decode()
    text += AgentCollector(_Agent()).render().decode()
    docs = (pathlib.Path(__file__).parents[3] / "docs" / "metrics.md").read_text()
    missing = [f.name for f in text_string_to_metric_families(text) if not documented(f.name, docs)]
    assert not missing, missing


def test_the_grafana_dashboard_uses_only_documented_metrics() -> None:
    import re

    root = pathlib.Path(__file__).parents[3] / "docs"
    dashboard = json.loads((root / "grafana" / "muster-dashboard.json").read_text())
    docs = (root / "metrics.md").read_text()
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) > 20
    names = {n for e in exprs for n in re.findall(r"\b((?:slurm|muster)_[a-z_]+)", e)}
    bases = {re.sub(r"_(bucket|count|sum|total)$", "", n) for n in names}
    assert not [b for b in bases if not documented(b, docs)]


def documented(name: str, docs: str) -> bool:
    """Named in docs/metrics.md, literally or as ``slurm_<kind>_jobs_<state>`` with the state listed."""
    import re

    m = re.fullmatch(r"slurm_(partition|user|account)_jobs_(\w+)", name)
    return f"`{name}" in docs or bool(m and f"slurm_{m.group(1)}_jobs_<state>" in docs and f"`{m.group(2)}`" in docs)
