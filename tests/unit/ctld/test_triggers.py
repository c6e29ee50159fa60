"""strigger's triggers in the controller: set, listed, cleared, kept across a restart, and
fired by the node and job events strigger(1) names (a manual clock, a real SQLite store)."""

from __future__ import annotations

import pathlib

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.errors import InvalidJobId, InvalidRequest, PermissionDenied
from muster.core.job import JobSpec, NodeAlloc
from muster.ctld.controller import Controller, Identity, Launch
from muster.ctld.store import Store

CONF = """
ClusterName=t
SlurmdTimeout=10
NodeName=node[1-4] CPUs=32 RealMemory=128000 Gres=gpu:8
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""

ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
BOB = Identity(1002, 1002, "bob", "bob", "h", admin=False)
ROOT = Identity(0, 0, "root", "root", "h", admin=True)


@pytest.fixture
def db(tmp_path: pathlib.Path) -> str:
    return str(tmp_path / "muster.db")


def make(db: str, conf: str = CONF, clock: ManualClock | None = None) -> Controller:
    ctl = Controller(parse_config(conf, "test.conf"), Store(db), clock or ManualClock(1000.0))
    ctl.load()
    for name in ctl.nodes:
        ctl.agents.register({"node": name, "gpus": 8, "running": []})
    return ctl


def start(ctl: Controller, job_id: int, nodes: list[str]) -> None:
    class S:
        def __init__(self) -> None:
            self.job_id, self.partition, self.backfilled = job_id, "gpu", False
            self.alloc = [NodeAlloc(n, 1, 0, []) for n in nodes]

    actions = ctl.launches.apply_starts([S()], ctl.clock.now())
    assert [type(a) for a in actions] == [Launch]
    ctl.launches.launch_done(job_id)


def check(ctl: Controller) -> list[tuple[str, str, str]]:
    return [(str(t.trig_id), t.event, arg) for t, arg in ctl.triggers.check(ctl.clock.now())]


def test_node_down_fires_once_with_the_nodes_then_is_purged(db: str) -> None:
    ctl = make(db)
    t = ctl.triggers.set(ROOT, {"event": "down", "node": "node[1-2]", "program": "/bin/true"})
    assert (t.res_type, t.res_id, t.event) == ("node", "node[1-2]", "down")
    assert check(ctl) == []
    ctl.liveness.update_nodes(ROOT, ["node2", "node3"], "DOWN", "broken")
    assert check(ctl) == [("1", "down", "node2")]  # node3 is not watched
    assert ctl.triggers.get({}) == []  # fired once, purged


def test_perm_triggers_stay_and_up_follows_down(db: str) -> None:
    ctl = make(db)
    ctl.triggers.set(ROOT, {"event": "down", "program": "/bin/true", "flags": ["PERM"]})
    ctl.triggers.set(ROOT, {"event": "up", "program": "/bin/true"})
    check(ctl)
    ctl.liveness.update_nodes(ROOT, ["node1", "node4"], "DOWN", "x")
    assert check(ctl) == [("1", "down", "node[1,4]")]
    ctl.liveness.update_nodes(ROOT, ["node1"], "RESUME", None)
    assert check(ctl) == [("2", "up", "node1")]
    ctl.liveness.update_nodes(ROOT, ["node1"], "DOWN", "again")
    assert check(ctl) == [("1", "down", "node1")]
    assert [t.trig_id for t in ctl.triggers.get({})] == [1]


def test_drained_and_idle_with_offset(db: str) -> None:
    clock = ManualClock(1000.0)
    ctl = make(db, clock=clock)
    ctl.triggers.set(ROOT, {"event": "drained", "node": "node3", "program": "/bin/true"})
    ctl.triggers.set(ROOT, {"event": "idle", "node": "node4", "offset": 60, "program": "/bin/true"})
    assert check(ctl) == []
    ctl.liveness.update_nodes(ROOT, ["node3"], "DRAIN", "maint")
    clock.advance(30)
    assert check(ctl) == [("1", "drained", "node3")]
    clock.advance(31)
    assert check(ctl) == [("2", "idle", "node4")]


def test_job_fini_and_time_with_a_negative_offset(db: str) -> None:
    clock = ManualClock(1000.0)
    ctl = make(db, clock=clock)
    job = ctl.queue.submit(JobSpec(time_limit=600), ALICE)
    start(ctl, job.job_id, ["node1"])
    ctl.triggers.set(ALICE, {"event": "time", "job_id": job.job_id, "offset": -120, "program": "/bin/true"})
    ctl.triggers.set(ALICE, {"event": "fini", "job_id": job.job_id, "program": "/bin/true"})
    assert check(ctl) == []
    clock.advance(470)
    assert check(ctl) == []
    clock.advance(20)  # 490 s: within 120 s of its limit
    assert check(ctl) == [("1", "time", str(job.job_id))]
    ctl.queue.cancel(job, ALICE)
    ctl.launches.job_done({"job_id": job.job_id, "node": "node1", "exit_code": 0, "signal": 15})
    assert check(ctl) == [("2", "fini", str(job.job_id))]
    assert ctl.triggers.get({}) == []


def test_triggers_survive_a_restart(db: str) -> None:
    ctl = make(db)
    ctl.triggers.set(ROOT, {"event": "down", "program": "/bin/echo hi", "flags": ["PERM"]})
    reborn = make(db)
    (t,) = reborn.triggers.get({})
    assert (t.trig_id, t.program, t.perm, t.user) == (1, "/bin/echo hi", True, "root")
    assert reborn.triggers.set(ROOT, {"event": "up", "program": "/bin/true"}).trig_id == 2


def test_who_may_set_and_clear(db: str) -> None:
    ctl = make(db)
    job = ctl.queue.submit(JobSpec(), ALICE)
    with pytest.raises(PermissionDenied):  # another user's job
        ctl.triggers.set(BOB, {"event": "fini", "job_id": job.job_id, "program": "/bin/true"})
    with pytest.raises(InvalidJobId):
        ctl.triggers.set(ALICE, {"event": "fini", "job_id": 999, "program": "/bin/true"})
    t = ctl.triggers.set(ALICE, {"event": "fini", "job_id": job.job_id, "program": "/bin/true"})
    with pytest.raises(PermissionDenied):
        ctl.triggers.clear(BOB, {"trig_id": t.trig_id})
    with pytest.raises(InvalidRequest):
        ctl.triggers.clear(ALICE, {})
    assert ctl.triggers.clear(ALICE, {"job_id": job.job_id}) == 1
    with pytest.raises(InvalidRequest):
        ctl.triggers.clear(ALICE, {"trig_id": t.trig_id})  # already gone
    # SlurmUser other than root: only it (and root) may set triggers
    other = make(db + "2", CONF + "SlurmUser=slurm\n")
    with pytest.raises(PermissionDenied):
        other.triggers.set(ALICE, {"event": "down", "program": "/bin/true"})


@pytest.mark.parametrize(
    "req",
    [
        {"event": "time", "program": "/bin/true"},  # --time needs --jobid
        {"event": "down", "program": "relative/path"},
        {"event": "down", "program": ""},
        {"event": "down", "program": "/bin/true", "flags": ["SOMETIMES"]},
        {"event": "idle", "node": "node[3-", "program": "/bin/true"},
    ],
)
def test_bad_requests_are_refused_and_nothing_is_stored(db: str, req: dict[str, object]) -> None:
    ctl = make(db)
    with pytest.raises(InvalidRequest):
        ctl.triggers.set(ROOT, req)
    assert ctl.triggers.get({}) == [] and make(db).triggers.get({}) == []


def test_reconfig_fires_when_the_configuration_is_read_again(db: str) -> None:
    ctl = make(db)
    ctl.triggers.set(ROOT, {"event": "reconfig", "program": "/bin/true"})
    ctl.triggers.set(ROOT, {"event": "fail", "program": "/bin/true"})
    assert check(ctl) == []
    ctl.config = parse_config(CONF, "test.conf")  # what scontrol reconfigure swaps in
    assert check(ctl) == [("1", "reconfig", "")]
    assert [t.event for t in ctl.triggers.get({})] == ["fail"]  # never fires: no FAILING state


def test_a_jobs_down_trigger_watches_its_nodes_only(db: str) -> None:
    ctl = make(db)
    job = ctl.queue.submit(JobSpec(min_nodes=2), ALICE)
    start(ctl, job.job_id, ["node2", "node3"])
    ctl.triggers.set(ALICE, {"event": "down", "job_id": job.job_id, "program": "/bin/true"})
    check(ctl)
    ctl.liveness.update_nodes(ROOT, ["node1"], "DOWN", "x")
    assert check(ctl) == []
    ctl.liveness.update_nodes(ROOT, ["node3"], "DOWN", "x")
    assert check(ctl) == [("1", "down", "node3")]
