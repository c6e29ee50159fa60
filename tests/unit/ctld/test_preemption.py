"""Preemption in the controller, on a manual clock: victims are signalled, keep their
nodes for GraceTime, then are requeued (PREEMPTED in sacct) or cancelled; the preemptor
holds the nodes and starts once they are free. Expedited requeue holds surviving nodes."""

from __future__ import annotations

import pathlib
import signal

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.errors import InvalidRequest
from muster.core.job import JobSpec
from muster.core.states import JobState
from muster.ctld.actions import Launch, SignalJob, Terminate
from muster.ctld.controller import Controller, Identity
from muster.ctld.loop import run_pass
from muster.ctld.store import Store
from muster.sched import SchedConfig

CONF = """
ClusterName=t
SlurmdTimeout=10
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
NodeName=node[1-4] CPUs=32 RealMemory=128000 Gres=gpu:8
PartitionName=low Nodes=ALL Default=YES MaxTime=INFINITE PriorityTier=1 GraceTime=30
PartitionName=high Nodes=ALL MaxTime=INFINITE PriorityTier=10
PartitionName=cheap Nodes=ALL MaxTime=INFINITE PriorityTier=1 PreemptMode=CANCEL
PartitionName=train Nodes=ALL MaxTime=INFINITE PriorityTier=5 ExpediteRequeue=YES
ExpediteHoldTime=10:00
"""
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)


@pytest.fixture
def ctl(tmp_path: pathlib.Path) -> Controller:
    c = Controller(parse_config(CONF, "t.conf"), Store(str(tmp_path / "m.db")), ManualClock(1000.0))
    c.load()
    for name in c.nodes:
        c.agents.register({"node": name, "gpus": 8, "running": []})
    return c


def schedule(ctl: Controller) -> list[object]:
    config = SchedConfig.from_settings(ctl.config.settings)
    result = run_pass(ctl, config, ctl.clock.now())
    for a in result.actions:
        if isinstance(a, Launch):
            ctl.launches.launch_done(a.job.job_id)
    return result.actions


def advance(ctl: Controller, seconds: float) -> None:
    assert isinstance(ctl.clock, ManualClock)
    ctl.clock.advance(seconds)
    for name, node in ctl.nodes.items():
        ctl.agents.heartbeat({"node": name, "running": [list(k) for k in node.allocs]})


def submit(ctl: Controller, **spec: object) -> int:
    return ctl.queue.submit(JobSpec(gpus_per_node=8, **spec), ALICE).job_id  # type: ignore[arg-type]


def gone(ctl: Controller, job_id: int, attempt: int) -> None:
    """The victim's agent reports its processes gone (killed by the terminate)."""
    for node in [n for n, rt in ctl.nodes.items() if (job_id, attempt) in rt.allocs]:
        ctl.launches.job_done({"job_id": job_id, "restart_count": attempt, "node": node, "terminated_by": "preempt"})


def test_a_victim_gets_sigterm_its_grace_time_then_is_requeued_as_preempted(ctl: Controller) -> None:
    low = [submit(ctl, partitions=["low"]) for _ in range(4)]
    schedule(ctl)
    assert all(ctl.jobs[j].state is JobState.RUNNING for j in low)
    advance(ctl, 100)
    big = submit(ctl, partitions=["high"], min_nodes=2)
    actions = schedule(ctl)
    signals = [a for a in actions if isinstance(a, SignalJob)]
    assert len(signals) == 2 and all(s.signal == signal.SIGTERM and s.whole_job for s in signals)
    victims = sorted({s.job_id for s in signals})
    v = ctl.jobs[victims[0]]
    assert v.state is JobState.RUNNING and v.preempted_by == big and v.preempt_deadline == 1130.0
    assert v.system_comment == f"Preempted by job {big} (no checkpoint reported)"
    held = sorted(ctl.jobs[big].held_nodes)
    assert held == sorted(n for j in victims for n in ctl.jobs[j].nodes)
    advance(ctl, 10)
    assert not [a for a in schedule(ctl) if isinstance(a, SignalJob | Terminate)]  # no more victims
    advance(ctl, 21)
    ends = [a for a in schedule(ctl) if isinstance(a, Terminate)]
    assert sorted(a.job_id for a in ends) == sorted(victims) and {a.reason for a in ends} == {"preempt"}
    for j in victims:
        assert ctl.jobs[j].state is JobState.PENDING and ctl.jobs[j].restart_count == 1
    assert ctl.jobs[big].state is JobState.PENDING  # the victims' processes are not gone yet
    for j in victims:
        gone(ctl, j, 0)
    schedule(ctl)
    assert ctl.jobs[big].state is JobState.RUNNING and sorted(ctl.jobs[big].nodes) == held
    assert ctl.jobs[big].held_nodes == []
    rows = ctl.store.db.execute("SELECT attempt, state, data FROM acct_jobs WHERE job_id=?", (victims[0],)).fetchall()
    assert [(r[0], r[1]) for r in rows] == [(0, "PREEMPTED"), (1, "PENDING")]
    assert f"Preempted by job {big}" in rows[0][2]


def test_a_victim_that_exits_in_its_grace_time_is_requeued_all_the_same(ctl: Controller) -> None:
    for _ in range(4):
        submit(ctl, partitions=["low"])
    schedule(ctl)
    advance(ctl, 100)
    submit(ctl, partitions=["high"])
    victim = next(a.job_id for a in schedule(ctl) if isinstance(a, SignalJob))
    node = ctl.jobs[victim].nodes[0]
    ctl.launches.job_done({"job_id": victim, "restart_count": 0, "node": node, "exit_code": 0})
    assert ctl.jobs[victim].state is JobState.PENDING and ctl.jobs[victim].restart_count == 1


def test_preempt_mode_cancel_ends_the_victim_preempted(ctl: Controller) -> None:
    cheap = [submit(ctl, partitions=["cheap"]) for _ in range(4)]
    schedule(ctl)
    advance(ctl, 100)
    submit(ctl, partitions=["high"])
    victim = next(a.job_id for a in schedule(ctl) if isinstance(a, SignalJob))
    assert victim in cheap
    schedule(ctl)  # GraceTime 0: ended at the next pass
    assert ctl.jobs[victim].state is JobState.PREEMPTED


def test_an_expedited_job_is_requeued_first_holding_its_surviving_nodes(ctl: Controller) -> None:
    train = submit(ctl, partitions=["train"], min_nodes=2)
    schedule(ctl)
    nodes = ctl.jobs[train].nodes
    advance(ctl, 5)
    waiting = submit(ctl, partitions=["low"], min_nodes=2)
    schedule(ctl)
    assert ctl.jobs[waiting].state is JobState.RUNNING  # the other two nodes
    ctl.liveness.update_nodes(Identity(0, 0, "root", "root", "h", admin=True), [nodes[0]], "DOWN", "dead")
    job = ctl.jobs[train]
    assert job.state is JobState.PENDING and job.expedited and job.held_nodes == [nodes[1]]
    assert job.hold_until == ctl.clock.now() + 600
    other = submit(ctl, partitions=["low"], min_nodes=2)
    gone(ctl, train, 0)
    schedule(ctl)
    assert ctl.jobs[train].state is JobState.PENDING  # one node is not enough
    # nodes free up elsewhere: the expedited job takes one with its held node, before `other`
    for n in ctl.jobs[waiting].nodes:
        ctl.launches.job_done({"job_id": waiting, "restart_count": 0, "node": n})
    schedule(ctl)
    assert ctl.jobs[train].state is JobState.RUNNING and nodes[1] in ctl.jobs[train].nodes
    assert nodes[0] not in ctl.jobs[train].nodes
    assert ctl.jobs[other].state is JobState.PENDING  # the expedited job went first
    assert ctl.jobs[train].restart_count == 1 and not ctl.jobs[train].expedited


def test_sacctmgr_sets_a_qos_preempt_list_mode_grace_and_exempt_time() -> None:
    from muster.ctld.assoc import AssocDB

    db = AssocDB("c")
    db.bootstrap()

    def apply(verb: str, names: list[str], sets: dict[str, str]) -> None:
        db.apply({"verb": verb, "entity": "qos", "names": names, "where": {}, "set": sets}, "root", True)

    apply("add", ["scavenger"], {"PreemptMode": "requeue", "GraceTime": "120", "PreemptExemptTime": "5:00"})
    apply("add", ["high"], {"Preempt": "scavenger,normal", "Priority": "100"})
    s, h = db.qos["scavenger"], db.qos["high"]
    assert (s.preempt_mode, s.grace_time, s.preempt_exempt_time) == ("REQUEUE", 120, 300)
    assert h.preempt == ["scavenger", "normal"] and h.preempt_mode is None
    with pytest.raises(InvalidRequest, match="SUSPEND is not supported for a QOS"):
        apply("modify", ["scavenger"], {"PreemptMode": "suspend"})
    with pytest.raises(InvalidRequest, match="Invalid qos specification: nosuch"):
        apply("modify", ["high"], {"Preempt": "nosuch"})
    assert db.qos["scavenger"].preempt_mode == "REQUEUE" and db.qos["high"].preempt == ["scavenger", "normal"]
    apply("modify", ["scavenger"], {"PreemptMode": "cluster"})
    assert db.qos["scavenger"].preempt_mode is None


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("PreemptType=preempt/partition_prio\nPreemptMode=SUSPEND", "PreemptMode=SUSPEND requires GANG too"),
        (
            "PreemptType=preempt/partition_prio\nPartitionName=x Nodes=n1 PreemptMode=SUSPEND",
            "PreemptMode=SUSPEND requires GANG too",
        ),
        ("PreemptType=preempt/qos\nPreemptMode=SUSPEND,GANG", "needs PreemptType=preempt/partition_prio"),
        ("PreemptType=preempt/foo", "bad PreemptType 'preempt/foo'"),
        ("PartitionName=x Nodes=n1 PreemptMode=bogus", "bad PreemptMode 'bogus'"),
    ],
)
def test_unsupported_preemption_settings_are_refused_at_config_load(line: str, message: str) -> None:
    from muster.core.conftypes import ConfigError

    with pytest.raises(ConfigError, match=message):
        parse_config(f"NodeName=n1 CPUs=2\n{line}\n", "t.conf")


def test_suspend_gang_is_accepted_for_partition_priority_tiers() -> None:
    conf = parse_config(
        "NodeName=n1 CPUs=2\nPreemptType=preempt/partition_prio\nPreemptMode=SUSPEND,GANG\n"
        "PartitionName=lo Nodes=n1 PriorityTier=1\nPartitionName=hi Nodes=n1 PriorityTier=2 PreemptMode=OFF\n",
        "t.conf",
    )
    assert SchedConfig.from_settings(conf.settings).preempt_mode == "SUSPEND"


def test_a_restarted_controller_keeps_the_grace_times_and_the_holds(ctl: Controller, tmp_path: pathlib.Path) -> None:
    for _ in range(4):
        submit(ctl, partitions=["low"])
    schedule(ctl)
    advance(ctl, 100)
    big = submit(ctl, partitions=["high"])
    victim = next(a.job_id for a in schedule(ctl) if isinstance(a, SignalJob))
    again = Controller(ctl.config, Store(str(tmp_path / "m.db")), ManualClock(1110.0))
    again.load()
    v, p = again.jobs[victim], again.jobs[big]
    assert (v.preempted_by, v.preempt_deadline, v.preempt_mode) == (big, 1130.0, "REQUEUE")
    assert p.held_nodes == ctl.jobs[big].held_nodes and p.hold_until == ctl.jobs[big].hold_until
    assert again.store.last_events(["preempt"])[victim] == "preempt"


def test_a_qos_with_expedite_requeue_makes_its_jobs_expedited(ctl: Controller) -> None:
    assert ctl.accounting is not None
    db = ctl.accounting.db
    db.apply(
        {"verb": "add", "entity": "qos", "names": ["train"], "where": {}, "set": {"ExpediteRequeue": "yes"}},
        "root",
        True,
    )
    with pytest.raises(InvalidRequest, match="Invalid value for ExpediteRequeue: maybe"):
        db.apply(
            {"verb": "modify", "entity": "qos", "names": ["train"], "where": {}, "set": {"ExpediteRequeue": "maybe"}},
            "root",
            True,
        )
    job = submit(ctl, partitions=["low"], min_nodes=2, qos="train", requeue=True)
    schedule(ctl)
    nodes = ctl.jobs[job].nodes
    ctl.liveness.update_nodes(Identity(0, 0, "root", "root", "h", admin=True), [nodes[0]], "DOWN", "dead")
    assert ctl.jobs[job].expedited and ctl.jobs[job].held_nodes == [nodes[1]]
    schedule(ctl)  # first in the queue, on its held node plus one
    assert ctl.jobs[job].state is JobState.RUNNING and nodes[1] in ctl.jobs[job].nodes
