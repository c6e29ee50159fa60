"""Accounting in the controller on a manual clock, on SQLite and on PostgreSQL: records per
attempt, associations at submit, limits with Slurm's reasons, fair-share in the snapshot."""

from __future__ import annotations

from typing import Any

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.errors import MusterError
from muster.core.job import JobSpec
from muster.core.states import JobState, Reason
from muster.ctld.actions import Launch
from muster.ctld.controller import Controller, Identity
from muster.ctld.loop import run_pass
from muster.ctld.records import Query
from muster.sched.config import SchedConfig
from stores import make_store  # noqa: F401 - fixture

pytestmark = pytest.mark.integration

CONF = """
ClusterName=t
AccountingStorageEnforce=associations,limits,qos
PriorityType=priority/multifactor
PriorityWeightFairshare=10000
PriorityWeightAge=0
PriorityDecayHalfLife=0
# a requeued job is eligible again 3 s later (Slurm's default requeue_delay is 120 s)
SchedulerParameters=requeue_delay=3
NodeName=node[1-4] CPUs=32 RealMemory=128000 Gres=gpu:8
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""

ROOT = Identity(0, 0, "root", "root", "h", admin=True)
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
BOB = Identity(1002, 1002, "bob", "bob", "h", admin=False)


def make(store: Any, clock: ManualClock | None = None) -> Controller:
    ctl = Controller(parse_config(CONF, "t.conf"), store, clock or ManualClock(1000.0))
    ctl.load()
    for name in ctl.nodes:
        ctl.agents.register({"node": name, "gpus": 8, "running": []})
    return ctl


def mgr(ctl: Controller, words: str, **sets: str) -> None:
    verb, entity, *names = words.split()
    assert ctl.accounting is not None
    ctl.accounting.sacctmgr({"verb": verb, "entity": entity, "names": names, "set": sets}, ROOT, ctl.clock.now())


def setup_accounts(ctl: Controller) -> None:
    mgr(ctl, "add account A B")  # kept as a and b, as Slurm keeps account names
    mgr(ctl, "add user alice", Account="A")
    mgr(ctl, "add user bob", Account="B")


def spec(gpus: int = 1, **kw: Any) -> JobSpec:
    return JobSpec(name="j", script="#!/bin/sh\n", workdir="/tmp", gpus_per_node=gpus, **kw)


def one_pass(ctl: Controller) -> list[int]:
    """One pass of the real loop (accounting before and after the decision); the jobs it
    started, their launches taken as done."""
    now = ctl.clock.now()
    result = run_pass(ctl, SchedConfig.from_settings(dict(ctl.config.settings)), now)
    started = [a.job.job_id for a in result.actions if isinstance(a, Launch)]
    for job_id in started:
        ctl.launches.launch_done(job_id)
    return started


def test_an_unknown_account_is_refused_with_slurms_words(make_store) -> None:  # noqa: F811
    ctl = make(make_store())
    setup_accounts(ctl)
    with pytest.raises(MusterError, match="^Invalid account or account/partition combination specified$"):
        ctl.queue.submit(spec(account="nosuch"), ALICE)
    with pytest.raises(MusterError, match="Invalid account"):
        ctl.queue.submit(spec(account="b"), ALICE)  # alice has no association with B
    job = ctl.queue.submit(spec(), ALICE)
    assert (job.spec.account, job.spec.qos) == ("a", "normal")


def test_the_ninth_gpu_of_an_account_waits_with_assoc_grp_gres(make_store) -> None:  # noqa: F811
    ctl = make(make_store())
    setup_accounts(ctl)
    mgr(ctl, "modify account A", GrpTRES="gres/gpu=8")
    ids = [ctl.queue.submit(spec(gpus=4), ALICE).job_id for _ in range(3)]
    started = one_pass(ctl)  # all three fit the cluster; the limit lets two start
    assert started == ids[:2]
    assert ctl.jobs[ids[2]].reason is Reason.ASSOC_GRP_GRES
    one_pass(ctl)
    assert ctl.jobs[ids[2]].state is JobState.PENDING
    assert ctl.jobs[ids[2]].reason is Reason.ASSOC_GRP_GRES
    other = ctl.queue.submit(spec(gpus=4), BOB)  # B has no limit
    assert other.job_id in one_pass(ctl)


def test_qos_limits_hold_with_slurms_reasons_or_refuse_with_deny_on_limit(make_store) -> None:  # noqa: F811
    ctl = make(make_store())
    setup_accounts(ctl)
    acct = ctl.accounting
    assert acct is not None
    acct.sacctmgr(
        {"verb": "add", "entity": "qos", "names": ["short"], "set": {"MaxWall": "01:00:00", "MaxJobsPerUser": "1"}},
        ROOT,
        0,
    )
    acct.sacctmgr(
        {"verb": "add", "entity": "qos", "names": ["strict"], "set": {"MaxWall": "01:00:00", "Flags": "DenyOnLimit"}},
        ROOT,
        0,
    )
    acct.sacctmgr(
        {"verb": "modify", "entity": "user", "names": ["alice"], "set": {"QOS": "normal,short,strict"}}, ROOT, 0
    )
    long_job = ctl.queue.submit(spec(qos="short", time_limit=7200), ALICE)
    first = ctl.queue.submit(spec(qos="short", time_limit=600), ALICE)
    second = ctl.queue.submit(spec(qos="short", time_limit=600), ALICE)
    assert one_pass(ctl) == [first.job_id]
    assert long_job.reason is Reason.QOS_MAX_WALL
    assert second.reason is Reason.QOS_MAX_JOBS_PER_USER
    with pytest.raises(MusterError, match="Job violates accounting/QOS policy"):
        ctl.queue.submit(spec(qos="strict", time_limit=7200), ALICE)
    with pytest.raises(MusterError, match="Invalid qos specification"):
        ctl.queue.submit(spec(qos="nosuch"), ALICE)
    unlimited = ctl.queue.submit(spec(qos="short"), ALICE)  # no --time: the QOS's MaxWall
    assert unlimited.time_limit == 3600


def test_a_user_in_two_accounts_gets_each_associations_fair_share(make_store) -> None:  # noqa: F811
    clock = ManualClock(1000.0)
    ctl = make(make_store(), clock)
    setup_accounts(ctl)
    mgr(ctl, "add user alice", Account="B")  # both users in both accounts
    mgr(ctl, "add user bob", Account="A")
    flood = [ctl.queue.submit(spec(gpus=8, account="a"), ALICE).job_id for _ in range(6)]
    assert len(one_pass(ctl)) == 4
    clock.advance(600)
    under_a = ctl.queue.submit(spec(gpus=8, account="a"), ALICE)
    under_b = ctl.queue.submit(spec(gpus=8, account="b"), ALICE)
    bob_a = ctl.queue.submit(spec(gpus=8, account="a"), BOB)
    one_pass(ctl)
    assert under_b.priority > under_a.priority  # B has used nothing; A the whole cluster
    assert ctl.jobs[flood[4]].priority == under_a.priority
    assert bob_a.priority > under_a.priority  # within A, bob has used nothing
    rows = {r["job_id"]: r for r in ctl.accounting.priorities(ctl, clock.now())["jobs"]}  # type: ignore[union-attr]
    assert rows[under_b.job_id]["fairshare"] > rows[under_a.job_id]["fairshare"]


def test_assoc_max_jobs_and_submit_limits(make_store) -> None:  # noqa: F811
    ctl = make(make_store())
    setup_accounts(ctl)
    mgr(ctl, "modify account A", MaxJobs="1", MaxSubmitJobs="3")
    a, b, _c = (ctl.queue.submit(spec(gpus=0), ALICE) for _ in range(3))
    with pytest.raises(MusterError, match="Job violates accounting/QOS policy"):
        ctl.queue.submit(spec(gpus=0), ALICE)
    assert one_pass(ctl) == [a.job_id]
    assert b.reason is Reason.ASSOC_MAX_JOBS


def test_fair_share_lets_the_quiet_account_overtake(make_store) -> None:  # noqa: F811
    clock = ManualClock(1000.0)
    ctl = make(make_store(), clock)
    setup_accounts(ctl)
    flood = [ctl.queue.submit(spec(gpus=8), ALICE).job_id for _ in range(8)]
    assert len(one_pass(ctl)) == 4  # the whole cluster
    clock.advance(600)
    late = ctl.queue.submit(spec(gpus=8), BOB)
    one_pass(ctl)
    waiting = [ctl.jobs[i] for i in flood[4:]]
    assert all(j.state is JobState.PENDING for j in waiting)
    assert all(late.priority > j.priority for j in waiting)
    rows = {r["job_id"]: r for r in ctl.accounting.priorities(ctl, clock.now())["jobs"]}  # type: ignore[union-attr]
    assert rows[late.job_id]["fairshare"] > rows[flood[4]]["fairshare"]
    shares = {(r["account"], r["user"]): r for r in ctl.accounting.shares()}  # type: ignore[union-attr]
    assert shares[("a", "alice")]["raw_usage"] > 0 and shares[("b", "bob")]["raw_usage"] == 0
    # the first job to end lets bob's job start before alice's queued ones
    done = ctl.jobs[flood[0]]
    ctl.launches.job_done({"job_id": done.job_id, "node": done.nodes[0], "restart_count": 0, "exit_code": 0})
    assert one_pass(ctl) == [late.job_id]


def test_every_attempt_is_a_record_and_survives_a_restart(make_store) -> None:  # noqa: F811
    clock = ManualClock(1000.0)
    ctl = make(make_store(), clock)
    setup_accounts(ctl)
    job = ctl.queue.submit(spec(gpus=2, requeue=True), ALICE)
    one_pass(ctl)
    clock.advance(30)
    ctl.node_failed_job(job, clock.now(), "test")
    clock.advance(5)
    one_pass(ctl)
    clock.advance(10)
    ctl.launches.job_done({"job_id": job.job_id, "node": job.nodes[0], "restart_count": 1, "exit_code": 3})
    ctl.store.close()
    again = make(make_store(), clock)  # a restarted controller reads the same records
    acct = again.accounting
    assert acct is not None
    recs = acct.jobs(Query(job_ids=[job.job_id], duplicates=True), clock.now())
    assert [(r["state"], r["exit_code"], r["elapsed"]) for r in recs] == [
        ("NODE_FAIL", "0:0", 30),
        ("FAILED", "3:0", 10),
    ]
    assert recs[0]["steps"][0]["state"] == "CANCELLED"
    assert [r["state"] for r in acct.jobs(Query(job_ids=[job.job_id]), clock.now())] == ["FAILED"]
    assert {(a["account"], a["user"]) for a in acct.db.objects()["assocs"]} >= {("a", "alice"), ("b", "bob")}
    report = acct.usage_report(0, clock.now(), clock.now(), again)
    gpu_seconds = {(u["account"], u["user"]): u["tres"]["gres/gpu"] for u in report["usage"]}
    assert gpu_seconds[("a", "alice")] == pytest.approx(2 * 30 + 2 * 10)


def test_node_outages_are_recorded_for_sreports_down_column(make_store) -> None:  # noqa: F811
    clock = ManualClock(1000.0)
    ctl = make(make_store(), clock)
    ctl.liveness.check_nodes()
    assert ctl.store.node_events() == []  # all four in service: nothing to record
    ctl.liveness.update_nodes(ROOT, ["node1"], "DRAIN", "disk")
    clock.advance(100)
    for name in ("node1", "node3", "node4"):  # node2 falls silent
        ctl.agents.heartbeat({"node": name, "running": []})
    clock.advance(ctl.config.slurmd_timeout + 1)
    for name in ("node1", "node3", "node4"):
        ctl.agents.heartbeat({"node": name, "running": []})
    ctl.liveness.check_nodes()  # node1 drained at 1000 (seen now), node2 DOWN at 1401
    down_at = clock.now()
    clock.advance(600)
    for name in ("node1", "node3", "node4"):
        ctl.agents.heartbeat({"node": name, "running": []})
    ctl.agents.register({"node": "node2", "gpus": 8, "running": []})
    ctl.liveness.check_nodes()  # ReturnToService=0: node2 stays DOWN until an admin resumes it
    ctl.liveness.update_nodes(ROOT, ["node1", "node2"], "RESUME", None)
    ctl.liveness.check_nodes()
    events = [(n, d, r) for n, _t, d, r, _s in ctl.store.node_events()]
    assert events == [
        ("node1", True, "disk"),
        ("node2", True, "Not responding"),
        ("node1", False, ""),
        ("node2", False, ""),
    ]
    acct = ctl.accounting
    assert acct is not None
    report = acct.usage_report(down_at - 1000, clock.now() + 1000, clock.now(), ctl)
    # both nodes out of service from down_at to now (node1's drain is seen at down_at too)
    assert report["down"]["cpu"] == pytest.approx(2 * 32 * 600)
    assert report["down"]["gres/gpu"] == pytest.approx(2 * 8 * 600)
    ctl.store.close()
    again = make(make_store(), clock)  # a restart keeps what was recorded
    assert again.out_of_service == {"node1": False, "node2": False}


def test_priority_usage_reset_period_clears_usage_at_the_periods_start(make_store) -> None:  # noqa: F811
    clock = ManualClock(1000.0)
    ctl = Controller(parse_config(CONF + "PriorityUsageResetPeriod=DAILY\n", "t.conf"), make_store(), clock)
    ctl.load()
    for name in ctl.nodes:
        ctl.agents.register({"node": name, "gpus": 8, "running": []})
    setup_accounts(ctl)
    job = ctl.queue.submit(spec(gpus=8), ALICE)
    one_pass(ctl)
    clock.advance(600)
    ctl.launches.job_done({"job_id": job.job_id, "node": job.nodes[0], "restart_count": 0, "exit_code": 0})
    one_pass(ctl)

    def raw() -> float:
        shares = {(r["account"], r["user"]): r for r in ctl.accounting.shares()}  # type: ignore[union-attr]
        return shares[("a", "alice")]["raw_usage"]

    assert raw() > 0
    clock.set(86400 * 2 + 10)  # past the next local midnight (whatever the time zone)
    one_pass(ctl)
    assert raw() == 0


def test_a_qos_that_does_not_exist_is_refused_even_without_enforcement(make_store) -> None:  # noqa: F811
    conf = CONF.replace("AccountingStorageEnforce=associations,limits,qos\n", "")
    ctl = Controller(parse_config(conf, "t.conf"), make_store(), ManualClock(1000.0))
    ctl.load()
    with pytest.raises(MusterError, match="Invalid qos specification"):
        ctl.queue.submit(spec(qos="nosuch"), ALICE)
    assert not ctl.jobs
    assert ctl.queue.submit(spec(qos="normal"), ALICE).spec.qos == "normal"
