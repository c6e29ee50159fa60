"""The failure ledger in the controller, on a manual clock (``ctld.ledger``,
``ClusterState.node_fault``): records with their evidence and attribution, kept in the store
across a restart; quarantine after repeated failures, until an operator resumes the node;
no drain storm when one job fails the same way on several nodes."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.job import JobSpec, NodeAlloc
from muster.core.states import JobState, Reason
from muster.ctld.controller import Controller, Identity
from muster.ctld.store import Store
from stores import make_store  # noqa: F401 - fixture: SQLite, and PostgreSQL when configured

CONF = """
ClusterName=t
SlurmdTimeout=10
QuarantineFailures=3
QuarantineWindow=3600
NodeName=node[1-4] CPUs=32 RealMemory=128000 Gres=gpu:8
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""

ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
ROOT = Identity(0, 0, "root", "root", "h", admin=True)


def make(path: pathlib.Path, clock: ManualClock, conf: str = CONF) -> Controller:
    c = Controller(parse_config(conf, "t.conf"), Store(str(path)), clock)
    c.load()
    for name in c.nodes:
        c.agents.register({"node": name, "gpus": 8, "running": []})
    return c


@pytest.fixture
def ctl(tmp_path: pathlib.Path) -> Controller:
    return make(tmp_path / "m.db", ManualClock(1000.0))


def start(ctl: Controller, job_id: int, nodes: list[str]) -> None:
    class S:
        def __init__(self) -> None:
            self.job_id, self.partition, self.backfilled = job_id, "gpu", False
            self.alloc = [NodeAlloc(n, 1, 0, []) for n in nodes]

    ctl.launches.apply_starts([S()], ctl.clock.now())


def advance(ctl: Controller, secs: float) -> None:
    assert isinstance(ctl.clock, ManualClock)
    ctl.clock.advance(secs)


def prolog_fault(node: str, job_id: int, attempt: int = 0) -> dict[str, Any]:
    reason = f"Prolog error: /etc/prolog failed for job {job_id} (exit code 1)"
    return {"node": node, "faults": [{"kind": "prolog", "reason": reason, "job_id": job_id, "attempt": attempt}]}


def test_records_carry_their_evidence_and_survive_a_restart(tmp_path: pathlib.Path) -> None:
    clock = ManualClock(1000.0)
    ctl = make(tmp_path / "m.db", clock)
    job = ctl.queue.submit(JobSpec(), ALICE)
    start(ctl, job.job_id, ["node2"])
    ctl.node_fault("node2", "hang", clock.now(), job=job, evidence="no progress after step 7", ranks=(3, 5))
    ctl.agents.node_faults({"node": "node2", "faults": [{"kind": "epilog", "reason": "Epilog error: x"}]})
    before = [e.to_dict() for e in ctl.ledger.history("node2")]
    assert [(d["kind"], d["job_id"], d["attribution"], d["action"]) for d in before] == [
        ("hang", job.job_id, "unknown", ""),
        ("epilog", 0, "node", "drained"),
    ]
    assert before[0]["ranks"] == [3, 5] and before[0]["user"] == "alice"
    ctl.store.close()
    again = make(tmp_path / "m.db", clock)  # a new controller on the same store
    assert [e.to_dict() for e in again.ledger.history("node2")] == before
    assert again.store.events(job.job_id)[-1][1] != "ledger"  # never in the job's own log


def test_a_node_failing_for_different_jobs_is_quarantined_until_resumed(ctl: Controller) -> None:
    for job_id in (11, 12):
        ctl.training.incident("node3", job_id, "node failure", ctl.clock.now())
        advance(ctl, 60)
    assert not ctl.nodes["node3"].drain  # 2 < QuarantineFailures=3
    ctl.training.incident("node3", 13, "node failure", ctl.clock.now())
    node = ctl.nodes["node3"]
    assert node.drain and node.reason.startswith("quarantined: 3 failures in 3600 s (node_fail job 11;")
    assert [e.attribution for e in ctl.ledger.history("node3")] == ["unknown", "node", "node"]
    ctl.liveness.update_nodes(ROOT, ["node3"], "resume", None)
    assert not node.drain and node.reason == ""
    assert ctl.ledger.history("node3")[-1].failure.kind == "resume"
    ctl.training.incident("node3", 14, "node failure", ctl.clock.now())
    assert not node.drain  # counted afresh since the resume


def test_the_window_forgets(ctl: Controller) -> None:
    for job_id in (11, 12):
        ctl.training.incident("node3", job_id, "node failure", ctl.clock.now())
    advance(ctl, 3601)
    ctl.training.incident("node3", 13, "node failure", ctl.clock.now())
    assert not ctl.nodes["node3"].drain


def test_a_quarantine_replaces_a_health_drain_so_a_pass_does_not_return_the_node(ctl: Controller) -> None:
    for _ in range(3):
        ctl.agents.node_faults({"node": "node4", "health": {"ok": False, "reason": "disk"}})
        ctl.agents.node_faults({"node": "node4", "health": {"ok": False, "reason": "disk"}})  # once per drain
        node = ctl.nodes["node4"]
        if node.reason.startswith("quarantined: "):
            break
        assert node.drain and node.reason == "HealthCheck: disk"
        ctl.agents.node_faults({"node": "node4", "health": {"ok": True}})
        assert not node.drain
        advance(ctl, 10)
    assert node.reason.startswith("quarantined: 3 failures") and len(ctl.ledger.history("node4")) == 3
    ctl.agents.node_faults({"node": "node4", "health": {"ok": True}})
    assert node.drain  # only an operator returns it


def test_one_job_failing_the_same_way_on_three_nodes_drains_none(ctl: Controller) -> None:
    job = ctl.queue.submit(JobSpec(min_nodes=3), ALICE)
    start(ctl, job.job_id, ["node1", "node2", "node3"])
    for name in ("node1", "node2", "node3"):  # the job's Prolog fails on each of its nodes
        ctl.agents.node_faults(prolog_fault(name, job.job_id))
    assert not any(n.drain for n in ctl.nodes.values()), {n.name: n.reason for n in ctl.nodes.values()}
    assert job.state is JobState.PENDING and job.hold and job.reason is Reason.LAUNCH_FAILED
    seen = {n: [(e.attribution, e.action) for e in ctl.ledger.history(n)] for n in ("node1", "node2", "node3")}
    assert seen["node1"] == [("unknown", "drained")]
    assert seen["node2"] == [("job", "not drained: the job's own failure (given back: node1)")]
    assert seen["node3"] == [("job", "not drained: the job's own failure")]


def test_a_nodes_own_failure_is_not_excused_by_another_job(ctl: Controller) -> None:
    a = ctl.queue.submit(JobSpec(), ALICE)
    start(ctl, a.job_id, ["node1"])
    ctl.agents.node_faults(prolog_fault("node1", a.job_id))
    assert ctl.nodes["node1"].drain  # a first failure: the node's until shown otherwise
    ctl.liveness.update_nodes(ROOT, ["node1"], "resume", None)
    b = ctl.queue.submit(JobSpec(), ALICE)
    start(ctl, b.job_id, ["node1"])
    ctl.agents.node_faults(prolog_fault("node1", b.job_id))
    assert ctl.nodes["node1"].drain
    assert ctl.ledger.history("node1")[-1].attribution == "node"


def test_quarantine_off_and_bad_settings(tmp_path: pathlib.Path) -> None:
    ctl = make(tmp_path / "m.db", ManualClock(1000.0), CONF.replace("QuarantineFailures=3", "QuarantineFailures=0"))
    for job_id in range(1, 6):
        ctl.training.incident("node3", job_id, "node failure", ctl.clock.now())
    assert not ctl.nodes["node3"].drain and len(ctl.ledger.history("node3")) == 5
    with pytest.raises(Exception, match="QuarantineFailures"):
        parse_config(CONF.replace("QuarantineFailures=3", "QuarantineFailures=many"), "t.conf")


def test_the_ledger_is_kept_by_both_stores(make_store: Any) -> None:  # noqa: F811
    """The records are rows of the store's event log: SQLite and PostgreSQL keep them
    across a restart (a takeover reads the same database)."""
    clock = ManualClock(1000.0)
    ctl = Controller(parse_config(CONF, "t.conf"), make_store(), clock)
    ctl.load()
    for job_id in (11, 12, 13):
        ctl.training.incident("node2", job_id, "node failure", clock.now(), "node node2 not responding")
        clock.advance(60)
    before = [e.to_dict() for e in ctl.ledger.history("node2")]
    assert ctl.nodes["node2"].reason.startswith("quarantined: 3 failures")
    again = Controller(parse_config(CONF, "t.conf"), make_store(), clock)
    again.load()
    assert [e.to_dict() for e in again.ledger.history("node2")] == before
    assert again.nodes["node2"].reason.startswith("quarantined: ")  # the drain itself is the node's state
    again.liveness.update_nodes(ROOT, ["node2"], "resume", None)
    third = Controller(parse_config(CONF, "t.conf"), make_store(), clock)
    third.load()
    assert third.ledger.resumed_at["node2"] == clock.now()  # the resume restarts the count after a restart too


def test_metrics_count_the_records_and_the_quarantined_nodes(ctl: Controller) -> None:
    from muster.ctld.metrics import ControllerCollector
    from muster.ctld.stats import ServerStats

    for job_id in (11, 12, 13):
        ctl.training.incident("node3", job_id, "node failure", ctl.clock.now())
        advance(ctl, 60)
    text = ControllerCollector(ctl, ServerStats(ctl.clock.now()), user_labels=False).render().decode()
    assert 'muster_node_failures_total{attribution="unknown",kind="node_fail"} 1.0' in text
    assert 'muster_node_failures_total{attribution="node",kind="node_fail"} 2.0' in text
    assert "muster_nodes_quarantined 1.0" in text


def test_a_fault_told_again_while_the_node_is_drained_is_one_record(ctl: Controller) -> None:
    for _ in range(3):
        ctl.agents.node_faults({"node": "node4", "faults": [{"kind": "epilog", "reason": "Epilog error: x"}]})
    assert len(ctl.ledger.history("node4")) == 1 and ctl.nodes["node4"].drain


def test_a_replaced_node_has_its_failure_and_the_replacement_recorded(tmp_path: pathlib.Path) -> None:
    conf = CONF.replace("PartitionName=gpu Nodes=ALL", "PartitionName=gpu Nodes=ALL SpareNodes=node4")
    ctl = make(tmp_path / "m.db", ManualClock(1000.0), conf)
    job = ctl.queue.submit(JobSpec(min_nodes=2, spare_nodes=1), ALICE)
    start(ctl, job.job_id, ["node1", "node2"])
    ctl.launches.launch_done(job.job_id)
    ctl.training.replacements.job_lost_node(job, "node2", "gpu_fault", "GPU 0: XID 79", ctl.clock.now())
    assert job.nodes == ["node1", "node4"] and job.state is JobState.RUNNING
    (record,) = ctl.ledger.history("node2")
    assert (record.failure.kind, record.failure.job_id) == ("replacement", job.job_id)
    assert record.failure.evidence == "replaced by node4: GPU 0: XID 79"
    assert not ctl.nodes["node2"].reason.startswith("quarantined")  # a replacement is no fault


def test_causes_out_of_the_window_are_forgotten_in_memory(ctl: Controller) -> None:
    for job_id in (21, 22):
        ctl.node_fault("node1", "launch", ctl.clock.now(), job=None, evidence=f"job {job_id}")
        ctl.training.incident("node2", job_id, "node failure", ctl.clock.now())
    assert {"job:21", "job:22"} <= set(ctl.ledger.by_cause)
    ctl.ledger.prune(ctl.clock.now() + 3 * 86400)
    assert not {"job:21", "job:22"} & set(ctl.ledger.by_cause)
    assert len(ctl.ledger.history("node2")) == 2  # each node's own latest records stay
