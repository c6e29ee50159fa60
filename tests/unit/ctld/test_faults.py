"""The controller under faults, on a manual clock: its own stalls, launches that fail on a
node or by the job's fault, site programs that fail, and a store that cannot commit."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.errors import PermissionDenied, StorageError
from muster.core.job import JobSpec, NodeAlloc
from muster.core.states import JobState, Reason
from muster.ctld.controller import Controller, Identity, Launch, Terminate
from muster.ctld.store import Store, storage_cause

CONF = """
ClusterName=t
SlurmdTimeout=10
ReturnToService=1
SchedulerParameters=max_batch_requeue=3
NodeName=node[1-4] CPUs=32 RealMemory=128000 Gres=gpu:8
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""

ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
ROOT = Identity(0, 0, "root", "root", "h", admin=True)


class FlakyStore(Store):
    """A store whose disk can be made full: every write then fails as SQLite's would."""

    full = False

    def record(self, *args: Any, **kw: Any) -> None:
        if self.full:
            raise StorageError("No space left on device")
        super().record(*args, **kw)

    def put_node(self, *args: Any, **kw: Any) -> None:
        if self.full:
            raise StorageError("No space left on device")
        super().put_node(*args, **kw)


@pytest.fixture
def ctl(tmp_path: pathlib.Path) -> Controller:
    c = Controller(parse_config(CONF, "t.conf"), FlakyStore(str(tmp_path / "m.db")), ManualClock(1000.0))
    c.load()
    for name in c.nodes:
        c.agents.register({"node": name, "gpus": 8, "running": []})
    return c


def clock(ctl: Controller) -> ManualClock:
    assert isinstance(ctl.clock, ManualClock)
    return ctl.clock


def start(ctl: Controller, job_id: int, nodes: list[str]) -> list[Any]:
    class S:
        def __init__(self) -> None:
            self.job_id, self.partition, self.backfilled = job_id, "gpu", False
            self.alloc = [NodeAlloc(n, 1, 0, []) for n in nodes]

    return ctl.launches.apply_starts([S()], ctl.clock.now())


def heartbeat(ctl: Controller, node: str, running: list[list[int]] | None = None, **extra: Any) -> None:
    ctl.agents.heartbeat({"node": node, "running": running or [], **extra})


# --- stalls ----------------------------------------------------------------------------


def test_silence_during_a_stall_of_the_controller_fails_no_node(ctl: Controller) -> None:
    job = ctl.queue.submit(JobSpec(), ALICE)
    start(ctl, job.job_id, ["node1"])
    ctl.launches.launch_done(job.job_id)
    ctl.liveness.loop_tick()
    clock(ctl).advance(40)  # SIGSTOP: nothing ran for 4 x SlurmdTimeout
    assert ctl.liveness.loop_tick() == pytest.approx(40)
    assert ctl.liveness.check_nodes() == []
    assert all(n.responding for n in ctl.nodes.values())
    assert job.state is JobState.RUNNING and job.restart_count == 0


def test_after_a_stall_a_node_that_stays_silent_still_goes_down(ctl: Controller) -> None:
    job = ctl.queue.submit(JobSpec(), ALICE)
    start(ctl, job.job_id, ["node1"])
    ctl.launches.launch_done(job.job_id)
    ctl.liveness.loop_tick()
    clock(ctl).advance(40)
    ctl.liveness.loop_tick()
    for _ in range(12):  # the others answer, node1 never again
        clock(ctl).advance(1)
        ctl.liveness.loop_tick()
        for name in ("node2", "node3", "node4"):
            heartbeat(ctl, name)
        actions = ctl.liveness.check_nodes()
    assert not ctl.nodes["node1"].responding and ctl.nodes["node1"].reason == "Not responding"
    assert job.state is JobState.PENDING and job.restart_count == 1
    assert actions == [] or all(isinstance(a, Terminate) for a in actions)


def test_a_node_silent_for_a_while_is_flagged_before_it_goes_down(ctl: Controller) -> None:
    ctl.liveness.loop_tick()
    for _ in range(6):
        clock(ctl).advance(1)
        ctl.liveness.loop_tick()
        for name in ("node2", "node3", "node4"):
            heartbeat(ctl, name)
        ctl.liveness.check_nodes()
    node = ctl.nodes["node1"]
    assert node.silent and node.responding  # "idle*": not responding, not yet DOWN


def test_a_job_whose_end_is_being_reported_is_not_lost(ctl: Controller) -> None:
    job = ctl.queue.submit(JobSpec(), ALICE)
    start(ctl, job.job_id, ["node1"])
    ctl.launches.launch_done(job.job_id)
    for _ in range(30):  # the agent keeps saying: it ended, the report is on its way
        clock(ctl).advance(1)
        heartbeat(ctl, "node1", ended=[[job.job_id, 0]])
    assert job.state is JobState.RUNNING
    ctl.launches.job_done({"node": "node1", "job_id": job.job_id, "restart_count": 0, "exit_code": 0})
    assert job.state is JobState.COMPLETED and job.restart_count == 0


def test_a_job_its_node_neither_runs_nor_reports_is_reconciled_while_running(ctl: Controller) -> None:
    job = ctl.queue.submit(JobSpec(), ALICE)
    start(ctl, job.job_id, ["node1"])
    ctl.launches.launch_done(job.job_id)
    for _ in range(15):
        clock(ctl).advance(1)
        heartbeat(ctl, "node1")
    assert job.state is JobState.PENDING and job.restart_count == 1
    assert ctl.nodes["node1"].allocs == {}


# --- launch failures -------------------------------------------------------------------


def test_a_launch_the_node_cannot_perform_drains_it_and_requeues_the_job(ctl: Controller) -> None:
    job = ctl.queue.submit(JobSpec(), ALICE)
    start(ctl, job.job_id, ["node2"])
    ctl.launches.launch_failed(
        job.job_id, 0, "cannot write the batch script into /spool: Read-only file system", "node"
    )
    node = ctl.nodes["node2"]
    assert node.drain and node.reason.startswith("launch failed: cannot write the batch script")
    assert job.state is JobState.PENDING and job.restart_count == 1 and not job.hold
    assert node.allocs == {}
    # the same failure reported again (the agent's saved report) changes nothing
    ctl.launches.job_done(
        {
            "node": "node2",
            "job_id": job.job_id,
            "restart_count": 0,
            "exit_code": 1,
            "reason": "again",
            "launch_failure": "node",
        }
    )
    assert job.restart_count == 1 and job.launch_failures == 1


def test_repeated_launch_failures_hold_the_job(ctl: Controller) -> None:
    job = ctl.queue.submit(JobSpec(), ALICE)
    for attempt, node in enumerate(["node1", "node2", "node3"]):
        start(ctl, job.job_id, [node])
        ctl.launches.launch_failed(job.job_id, attempt, f"fork failed {attempt}", None)  # unreachable
    assert job.state is JobState.PENDING and job.hold
    assert job.reason is Reason.HOLD_MAX_REQUEUE and job.launch_failures == 3
    assert "fork failed" in (job.system_comment or "")


def test_a_launch_that_fails_the_same_way_on_two_nodes_is_the_jobs_and_drains_none(ctl: Controller) -> None:
    job = ctl.queue.submit(JobSpec(), ALICE)
    for attempt, node in enumerate(["node1", "node2"]):
        start(ctl, job.job_id, [node])
        ctl.launches.launch_failed(job.job_id, attempt, "fork failed", "node")
    assert job.state is JobState.PENDING and job.hold  # held at the second: no third node tried
    assert job.reason is Reason.LAUNCH_FAILED and job.launch_failures == 2
    assert not any(n.drain for n in ctl.nodes.values())  # node1, drained first, given back
    kinds = [(e.failure.node, e.attribution) for n in ("node1", "node2") for e in ctl.ledger.history(n)]
    assert kinds == [("node1", "unknown"), ("node2", "job")]


def test_a_launch_that_fails_by_the_jobs_own_fault_fails_the_job_not_the_node(ctl: Controller) -> None:
    job = ctl.queue.submit(JobSpec(), ALICE)
    start(ctl, job.job_id, ["node3"])
    msg = "changing to the working directory /nope: No such file or directory"
    ctl.launches.job_done(
        {
            "node": "node3",
            "job_id": job.job_id,
            "restart_count": 0,
            "exit_code": 1,
            "reason": msg,
            "launch_failure": "job",
        }
    )
    assert job.state is JobState.FAILED and job.exit_code == 1
    assert job.reason is Reason.LAUNCH_FAILURE and msg in (job.system_comment or "")
    assert not ctl.nodes["node3"].drain and ctl.nodes["node3"].allocs == {}


def test_a_failing_prolog_drains_the_node_and_requeues_the_job_held(ctl: Controller) -> None:
    job = ctl.queue.submit(JobSpec(min_nodes=2), ALICE)
    start(ctl, job.job_id, ["node1", "node2"])
    actions = ctl.agents.node_faults(
        {
            "node": "node2",
            "faults": [
                {
                    "kind": "prolog",
                    "reason": "Prolog error: /etc/prolog failed (exit code 1)",
                    "job_id": job.job_id,
                    "attempt": 0,
                }
            ],
        }
    )
    assert ctl.nodes["node2"].drain and ctl.nodes["node2"].reason.startswith("Prolog error")
    assert job.state is JobState.PENDING and job.hold and job.reason is Reason.LAUNCH_FAILED
    assert [(type(a), a.nodes) for a in actions] == [(Terminate, ["node1"])]


def test_a_failing_epilog_drains_the_node(ctl: Controller) -> None:
    ctl.agents.node_faults({"node": "node4", "faults": [{"kind": "epilog", "reason": "Epilog error: x"}]})
    assert ctl.nodes["node4"].drain and ctl.nodes["node4"].reason == "Epilog error: x"


def test_the_health_check_drains_and_returns_only_what_it_drained(ctl: Controller) -> None:
    ctl.agents.node_faults({"node": "node1", "health": {"ok": False, "reason": "HealthCheck: gpu 3 lost"}})
    assert ctl.nodes["node1"].drain and ctl.nodes["node1"].reason == "HealthCheck: gpu 3 lost"
    ctl.agents.node_faults({"node": "node1", "health": {"ok": True, "reason": ""}})
    assert not ctl.nodes["node1"].drain
    ctl.liveness.update_nodes(ROOT, ["node1"], "DRAIN", "maintenance")
    ctl.agents.node_faults({"node": "node1", "health": {"ok": True, "reason": ""}})
    assert ctl.nodes["node1"].drain and ctl.nodes["node1"].reason == "maintenance"


# --- the store is the truth ------------------------------------------------------------


def test_a_cancel_that_cannot_commit_is_not_applied(ctl: Controller) -> None:
    job = ctl.queue.submit(JobSpec(), ALICE)
    assert isinstance(ctl.store, FlakyStore)
    ctl.store.full = True
    with pytest.raises(StorageError, match="No space left on device"):
        ctl.queue.cancel(job, ALICE)
    assert job.state is JobState.PENDING
    ctl.store.full = False
    ctl.queue.cancel(job, ALICE)
    assert job.state is JobState.CANCELLED


def test_a_submission_that_cannot_commit_leaves_no_job_and_no_id_used(ctl: Controller) -> None:
    assert isinstance(ctl.store, FlakyStore)
    ctl.store.full = True
    with pytest.raises(StorageError):
        ctl.queue.submit(JobSpec(), ALICE)
    assert ctl.jobs == {}
    ctl.store.full = False
    assert ctl.queue.submit(JobSpec(), ALICE).job_id == 1


def test_starts_that_cannot_commit_start_nothing_and_hold_nothing(ctl: Controller) -> None:
    job = ctl.queue.submit(JobSpec(), ALICE)
    assert isinstance(ctl.store, FlakyStore)
    ctl.store.full = True
    with pytest.raises(StorageError):
        start(ctl, job.job_id, ["node1"])
    assert job.state is JobState.PENDING and job.alloc == []
    assert ctl.nodes["node1"].allocs == {} and job.job_id not in ctl.launching
    ctl.store.full = False
    assert [type(a) for a in start(ctl, job.job_id, ["node1"])] == [Launch]


def test_an_update_refused_half_way_changes_nothing(ctl: Controller) -> None:
    job = ctl.queue.submit(JobSpec(name="before"), ALICE)
    with pytest.raises(PermissionDenied):
        ctl.queue.update(job, ALICE, {"name": "after", "priority": 5})
    assert job.spec.name == "before" and job.admin_priority is None


def test_a_node_that_cannot_be_marked_down_is_judged_again_later(ctl: Controller) -> None:
    job = ctl.queue.submit(JobSpec(), ALICE)
    start(ctl, job.job_id, ["node1"])
    ctl.launches.launch_done(job.job_id)
    assert isinstance(ctl.store, FlakyStore)
    ctl.store.full = True
    clock(ctl).advance(11)
    ctl.liveness.check_nodes()
    assert ctl.nodes["node1"].responding and job.state is JobState.RUNNING
    ctl.store.full = False
    ctl.liveness.check_nodes()
    assert not ctl.nodes["node1"].responding and job.restart_count == 1


@pytest.mark.parametrize(
    ("message", "cause"),
    [
        ("database or disk is full", "No space left on device"),
        ("attempt to write a readonly database", "Read-only file system"),
        ("database is locked", "state database /x/m.db is locked by another process"),
        ("database disk image is malformed", "state database /x/m.db is corrupt"),
    ],
)
def test_storage_errors_are_said_in_plain_words(message: str, cause: str) -> None:
    import sqlite3

    assert storage_cause(sqlite3.OperationalError(message), "/x/m.db") == cause


def test_the_jobs_are_checked_against_the_event_log_at_load(ctl: Controller) -> None:
    job = ctl.queue.submit(JobSpec(), ALICE)
    start(ctl, job.job_id, ["node1"])
    done = ctl.queue.submit(JobSpec(), ALICE)
    ctl.queue.cancel(done, ALICE)
    assert ctl.check_log() == []
    # a record that disagrees with the history (a hand edit, a bug): said, not repaired
    ctl.store.db.execute(
        "INSERT INTO events(time, job_id, kind, data) VALUES(?,?,?,?)", (2000.0, job.job_id, "cancel", "{}")
    )
    again = Controller(ctl.config, ctl.store, ctl.clock)
    again.load()
    assert again.check_log() == [
        f"job {job.job_id}: its record says RUNNING but its last event is 'cancel' (expected CANCELLED)"
    ]
    assert again.jobs[job.job_id].state is JobState.RUNNING
