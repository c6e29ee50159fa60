"""scontrol reconfigure: validation, the plan (what is live, what is refused) and its
application to a controller on a manual clock, whole or not at all."""

from __future__ import annotations

import pathlib

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.errors import InvalidRequest, StorageError
from muster.core.job import JobSpec, NodeAlloc
from muster.ctld.controller import Controller, Identity
from muster.ctld.reconfig import in_use, reconfigure
from muster.ctld.reconfig_plan import InUse, plan, validate
from muster.ctld.store import Store
from muster.ctld.view import build_snapshot
from muster.ctld.wire import node_wire

CONF = """\
ClusterName=t
SlurmdTimeout=10
PriorityWeightAge=1000
NodeName=node[1-2] NodeAddr=127.0.0.[2-3] CPUs=4 RealMemory=1000 Gres=gpu:2
NodeName=node3 NodeHostname=h3 CPUs=4 RealMemory=1000 Features=a
PartitionName=p Nodes=ALL Default=YES State=UP MaxTime=60
"""

ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
ROOT = Identity(0, 0, "root", "root", "h", admin=True)
IDLE = InUse()


def conf(text: str = CONF, path: str = "t.conf"):  # type: ignore[no-untyped-def]
    return parse_config(text, path)


def verdict(new_text: str, use: InUse = IDLE):  # type: ignore[no-untyped-def]
    return plan(conf(), conf(new_text), use)


# --- validation -----------------------------------------------------------------------------


def test_a_good_configuration_passes_every_check() -> None:
    assert validate(conf()) == []


@pytest.mark.parametrize(
    ("extra", "complaint"),
    [
        ("PriorityUsageResetPeriod=FORTNIGHTLY", "t.conf: PriorityUsageResetPeriod='FORTNIGHTLY' is not one of"),
        ("SchedulerParameters=max_script_size=big", "max_script_size=big is not an integer"),
        ("SchedulerInterval=often", "SchedulerInterval='often' is not an integer"),
    ],
)
def test_values_read_only_when_the_controller_loads_are_checked(extra: str, complaint: str) -> None:
    problems = validate(conf(CONF + extra + "\n"))
    assert len(problems) == 1 and complaint in problems[0]


def test_a_partition_billing_weight_that_does_not_read_is_named_with_its_line() -> None:
    text = CONF.replace("MaxTime=60", "MaxTime=60 TRESBillingWeights=CPU=x")
    assert validate(conf(text)) == ["t.conf:6: partition 'p': Invalid TRESBillingWeights item: CPU=x"]


# --- the plan -----------------------------------------------------------------------------


def test_the_same_file_changes_nothing() -> None:
    p = verdict(CONF)
    assert p.ok and p.diff == [] and p.node_side == []


def test_a_priority_weight_is_live_and_logged_as_one_line() -> None:
    p = verdict(CONF.replace("PriorityWeightAge=1000", "PriorityWeightAge=2000"))
    assert p.ok
    assert p.diff == ["reconfigure: PriorityWeightAge 1000 -> 2000"]


def test_a_key_set_for_the_first_time_reads_from_null() -> None:
    p = verdict(CONF + "KillWait=5\n")
    assert p.ok and p.diff == ["reconfigure: KillWait (null) -> 5"]


@pytest.mark.parametrize(
    "key", ["ClusterName=other", "StateSaveLocation=/elsewhere", "SlurmctldPort=7000", "AuthType=auth/munge"]
)
def test_a_key_fixed_for_the_life_of_the_controller_refuses_the_whole_file(key: str) -> None:
    name = key.split("=")[0]
    text = CONF.replace("PriorityWeightAge=1000", "PriorityWeightAge=5")  # live, yet refused with the rest
    text = text.replace("ClusterName=t", key) if name == "ClusterName" else text + key + "\n"
    p = verdict(text)
    assert not p.ok and "reconfigure: PriorityWeightAge 1000 -> 5" in p.diff
    assert [r for r in p.refusals if r.startswith(f"{name} cannot change while musterctld runs")]


def test_node_side_keys_are_accepted_and_named_for_the_agents() -> None:
    p = verdict(CONF + "Prolog=/bin/true\nHealthCheckInterval=30\n")
    assert p.ok and p.node_side == ["HealthCheckInterval", "Prolog"]


def test_a_slurmd_timeout_the_running_agents_cannot_meet_is_refused() -> None:
    # the agents beat every 2 s (10/5): 3 s is less than two beats
    p = verdict(CONF.replace("SlurmdTimeout=10", "SlurmdTimeout=3"))
    assert not p.ok and "two heartbeats" in p.refusals[0]
    assert verdict(CONF.replace("SlurmdTimeout=10", "SlurmdTimeout=60")).ok


def test_a_partition_added_changed_and_removed_is_live_when_unused() -> None:
    text = CONF.replace("MaxTime=60", "MaxTime=120") + "PartitionName=gpu Nodes=node[1-2] PriorityTier=5\n"
    p = verdict(text)
    assert p.ok
    assert p.diff == ["reconfigure: PartitionName=p MaxTime 60 -> 120", "reconfigure: PartitionName=gpu added"]
    renamed = verdict(CONF.replace("PartitionName=p ", "PartitionName=q "))
    assert renamed.ok and renamed.diff == ["reconfigure: PartitionName=p removed", "reconfigure: PartitionName=q added"]


def test_a_partition_in_use_is_not_removed() -> None:
    text = CONF.replace("PartitionName=p ", "PartitionName=q ")
    p = verdict(text, InUse(partition_jobs={"p": (7, 8)}))
    assert p.refusals == ["partition p cannot be removed: job(s) 7,8 use it"]
    p = verdict(text, InUse(reservations={"maint": ("p", ())}))
    assert p.refusals == ["partition p cannot be removed: reservation(s) maint use it"]


def test_a_partitions_node_list_follows_nodes_added_to_all() -> None:
    p = verdict(CONF.replace("PartitionName", "NodeName=node4 CPUs=4 RealMemory=1000\nPartitionName"))
    assert p.ok and p.added_nodes == ["node4"]
    assert "reconfigure: PartitionName=p Nodes node[1-3],h3 -> node[1-4]" not in p.diff  # names, not hosts
    assert "reconfigure: PartitionName=p Nodes node[1-3] -> node[1-4]" in p.diff


def test_a_node_running_jobs_keeps_its_size_and_its_place() -> None:
    busy = InUse(node_jobs={"node1": (5,)})
    resized = CONF.replace(
        "NodeName=node[1-2] NodeAddr=127.0.0.[2-3] CPUs=4", "NodeName=node[1-2] NodeAddr=127.0.0.[2-3] CPUs=8"
    )
    p = verdict(resized, busy)
    assert p.refusals == ["node node1: CPUs cannot change while it runs job(s) 5"]
    assert verdict(resized).ok  # nothing runs: the node takes its new size
    gpus = verdict(CONF.replace("Gres=gpu:2", "Gres=gpu:4"), busy)
    assert gpus.refusals == ["node node1: Gres cannot change while it runs job(s) 5"]
    removed = CONF.replace("node[1-2] NodeAddr=127.0.0.[2-3]", "node2 NodeAddr=127.0.0.3")
    assert verdict(removed, busy).refusals == ["node node1 cannot be removed: it runs job(s) 5"]
    p = verdict(removed)
    assert p.ok and p.removed_nodes == ["node1"]


def test_features_weight_and_state_change_under_running_jobs() -> None:
    busy = InUse(node_jobs={"node3": (5,)})
    p = verdict(CONF.replace("Features=a", "Features=a,b Weight=10 State=DRAIN Reason=maint"), busy)
    assert p.ok and p.restated_nodes == ["node3"]
    assert "reconfigure: NodeName=node3 Features a -> a,b" in p.diff
    assert "reconfigure: NodeName=node3 Weight (null) -> 10" in p.diff
    down = verdict(CONF.replace("Features=a", "Features=a State=DOWN"), busy)
    assert not down.ok and "State=DOWN while it runs job(s) 5" in down.refusals[0]


def test_every_reason_is_given_at_once() -> None:
    text = CONF.replace("ClusterName=t", "ClusterName=u").replace("Gres=gpu:2", "Gres=gpu:4")
    p = verdict(text, InUse(node_jobs={"node2": (9,)}))
    assert len(p.refusals) == 2


# --- applied to a controller --------------------------------------------------------------


@pytest.fixture
def ctl(tmp_path: pathlib.Path) -> Controller:
    path = tmp_path / "muster.conf"
    path.write_text(CONF)
    c = Controller(conf(CONF, str(path)), Store(str(tmp_path / "m.db")), ManualClock(1000.0))
    c.load()
    for name in c.nodes:
        c.agents.register({"node": name, "gpus": c.nodes[name].gpus, "running": []})
    return c


def rewrite(c: Controller, text: str) -> None:
    pathlib.Path(c.config.path).write_text(text)


def test_a_refused_file_leaves_the_running_configuration_untouched(ctl: Controller) -> None:
    before_config, before_nodes = ctl.config, {n: node_wire(v, []) for n, v in ctl.nodes.items()}
    rewrite(ctl, CONF.replace("ClusterName=t", "ClusterName=u") + "PartitionName=new Nodes=node1\n")
    with pytest.raises(InvalidRequest, match="refused and the running one kept: ClusterName cannot change"):
        reconfigure(ctl)
    rewrite(ctl, CONF + "PartitionName=new Nodes=node9\n")
    with pytest.raises(InvalidRequest, match="unknown node 'node9'"):
        reconfigure(ctl)
    assert ctl.config is before_config
    assert {n: node_wire(v, []) for n, v in ctl.nodes.items()} == before_nodes
    assert ctl.config.partition("new") is None


def test_a_partition_added_is_scheduled_at_once(ctl: Controller) -> None:
    rewrite(ctl, CONF + "PartitionName=gpu Nodes=node[1-2] PriorityTier=5 MaxTime=30\n")
    applied = reconfigure(ctl)
    assert applied.diff == ["reconfigure: PartitionName=gpu added"]
    assert ctl.nodes["node1"].partitions == ["p", "gpu"] and ctl.nodes["node3"].partitions == ["p"]
    snap = build_snapshot(ctl)
    assert snap.partitions["gpu"].nodes == ("node1", "node2") and snap.partitions["gpu"].priority_tier == 5
    job = ctl.queue.submit(JobSpec(partitions=["gpu"], script="#!/bin/sh\ntrue\n", workdir="/tmp"), ALICE)
    assert job.partition == "gpu" and job.time_limit == 1800


def test_priority_weights_reach_accounting_and_the_jobs_in_use_are_seen(ctl: Controller) -> None:
    rewrite(ctl, CONF.replace("PriorityWeightAge=1000", "PriorityWeightAge=2000"))
    reconfigure(ctl)
    assert ctl.accounting is not None and ctl.accounting.sched_config.weight_age == 2000
    job = ctl.queue.submit(JobSpec(script="#!/bin/sh\ntrue\n", workdir="/tmp"), ALICE)
    assert in_use(ctl).partition_jobs == {"p": (job.job_id,)}


def test_a_configured_drain_is_committed_and_lifted_by_the_file(ctl: Controller) -> None:
    rewrite(ctl, CONF.replace("Features=a", "Features=a,b State=DRAIN Reason=maint"))
    reconfigure(ctl)
    node = ctl.nodes["node3"]
    assert node.drain and node.reason == "maint" and node.features == ("a", "b")
    assert ctl.store.load_nodes()["node3"]["drain"] is True
    rewrite(ctl, CONF)
    reconfigure(ctl)
    assert not node.drain and ctl.store.load_nodes()["node3"]["drain"] is False


def test_a_commit_that_fails_applies_nothing(ctl: Controller, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(_nodes: object) -> None:
        raise StorageError("No space left on device")

    monkeypatch.setattr(ctl.store, "put_nodes", full)
    before = ctl.config
    rewrite(ctl, CONF.replace("Features=a", "Features=a State=DRAIN") + "PartitionName=gpu Nodes=node1\n")
    with pytest.raises(StorageError):
        reconfigure(ctl)
    assert ctl.config is before and not ctl.nodes["node3"].drain and ctl.nodes["node3"].partitions == ["p"]


def test_nodes_added_resized_and_removed_when_idle(ctl: Controller) -> None:
    text = CONF.replace("node[1-2] NodeAddr=127.0.0.[2-3] CPUs=4", "node2 NodeAddr=127.0.0.3 CPUs=8").replace(
        "PartitionName", "NodeName=node4 CPUs=2 RealMemory=500 TmpDisk=100\nPartitionName"
    )
    rewrite(ctl, text)
    reconfigure(ctl)
    assert sorted(ctl.nodes) == ["node2", "node3", "node4"]
    assert ctl.nodes["node2"].cpus == 8 and not ctl.nodes["node4"].registered
    assert ctl.nodes["node4"].tmp_disk == 100 and ctl.nodes["node4"].real_memory == 500
    assert ctl.nodes["node4"].index == 3 and ctl.nodes["node4"].partitions == ["p"]


def test_a_node_with_a_running_job_is_kept(ctl: Controller) -> None:
    job = ctl.queue.submit(JobSpec(script="#!/bin/sh\ntrue\n", workdir="/tmp"), ALICE)

    class S:
        job_id, partition, backfilled = job.job_id, "p", False
        alloc = [NodeAlloc("node1", 1, 0, [])]

    ctl.launches.apply_starts([S()], ctl.clock.now())
    rewrite(ctl, CONF.replace("node[1-2] NodeAddr=127.0.0.[2-3]", "node2 NodeAddr=127.0.0.3"))
    with pytest.raises(InvalidRequest, match=f"node node1 cannot be removed: it runs job\\(s\\) {job.job_id}"):
        reconfigure(ctl)
    assert "node1" in ctl.nodes


def test_the_app_schedules_with_the_applied_configuration(tmp_path: pathlib.Path) -> None:
    from muster.ctld.app import CtldApp

    path = tmp_path / "muster.conf"
    path.write_text(CONF + f"StateSaveLocation={tmp_path}\n")
    app = CtldApp(conf(path.read_text(), str(path)), b"k" * 32, ManualClock(1000.0))
    assert app.sched_config.weight_age == 1000 and app.sched_config.backfill
    path.write_text(
        path.read_text().replace("PriorityWeightAge=1000", "PriorityWeightAge=7") + "SchedulerType=sched/builtin\n"
    )
    app.use_config(reconfigure(app.controller).fresh)
    assert app.sched_config.weight_age == 7 and not app.sched_config.backfill
    assert app.config is app.controller.config
    app.store.close()


def test_an_administrators_own_drain_is_not_lifted_by_the_file(ctl: Controller) -> None:
    ctl.liveness.update_nodes(ROOT, ["node3"], "drain", "bad fan")
    rewrite(ctl, CONF.replace("Features=a", "Features=a State=IDLE"))
    reconfigure(ctl)
    assert ctl.nodes["node3"].drain and ctl.nodes["node3"].reason == "bad fan"
