"""Stragglers in the controller (ctld.stragglers), on a manual clock: a node whose ranks
step slower than its peers' is flagged with its evidence, shown, counted, and under
``Stragglers=exclude`` kept out of the job's next attempt; equal nodes never are."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from muster.cli.scontrol_records import job_record
from muster.core.clock import ManualClock
from muster.core.config import ConfigError, parse_config
from muster.core.job import JobSpec, NodeAlloc
from muster.ctld.controller import Controller, Identity
from muster.ctld.metrics import ControllerCollector
from muster.ctld.stats import ServerStats
from muster.ctld.store import Store
from muster.ctld.wire import job_wire
from muster.rest.layout import job_info

CONF = """
ClusterName=t
SlurmdTimeout=1000
NodeName=node[1-5] CPUs=32 RealMemory=128000 Gres=gpu:8
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=ex Nodes=ALL MaxTime=INFINITE State=UP Stragglers=exclude
PartitionName=quiet Nodes=ALL MaxTime=INFINITE State=UP Stragglers=off
PartitionName=quick Nodes=ALL MaxTime=INFINITE State=UP StragglerWindow=10
PartitionName=swap Nodes=ALL MaxTime=INFINITE State=UP Stragglers=swap StragglerWindow=10
"""
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
NODES = ["node1", "node2", "node3"]


@pytest.fixture
def ctl(tmp_path: pathlib.Path) -> Controller:
    c = Controller(parse_config(CONF, "t.conf"), Store(str(tmp_path / "m.db")), ManualClock(1000.0))
    c.load()
    for name in c.nodes:
        c.agents.register({"node": name, "gpus": 8, "running": []})
    return c


def run(ctl: Controller, partition: str = "gpu", **spec: Any) -> Any:
    job = ctl.queue.submit(JobSpec(partitions=[partition], **spec), ALICE)

    class S:
        job_id, backfilled = job.job_id, False
        alloc = [NodeAlloc(n, 1, 0, [0, 1]) for n in NODES]

    S.partition = partition
    ctl.launches.apply_starts([S()], ctl.clock.now())
    ctl.launches.launch_done(job.job_id)
    return job


def steps(
    ctl: Controller, job: Any, medians: dict[str, float], seconds: int, every: int = 10, ckpt: int | None = None
) -> list[Any]:
    """Every ``every`` seconds for ``seconds``: each node of the job reports its two ranks'
    steps and medians (as the agent measures them; ``ckpt``: a checkpoint too), and the
    controller checks its jobs; the actions of the checks."""
    assert isinstance(ctl.clock, ManualClock)
    actions: list[Any] = []
    for _ in range(seconds // every):
        ctl.clock.advance(every)
        t = ctl.clock.now()
        for node in job.nodes:
            step = int(t - 1000)
            ranks = {"0": [step, t, 1.0, 9], "1": [step, t, medians.get(node, 1.0), 9]}
            r = {"job_id": job.job_id, "attempt": job.restart_count, "first": 1000.0, "step": step, "step_time": t}
            if ckpt is not None:
                r.update(ckpt_step=ckpt, ckpt_time=t)
            ctl.agents.heartbeat({"node": node, "running": [[job.job_id, 0]], "progress": [{**r, "ranks": ranks}]})
        actions += ctl.training.check_hangs()
    return actions


def test_a_slow_node_is_flagged_shown_and_counted(ctl: Controller) -> None:
    job = run(ctl)
    steps(ctl, job, {"node1": 1.0, "node2": 1.02, "node3": 1.34}, 50)
    assert not (job.progress or {}).get("stragglers")  # not yet sustained
    steps(ctl, job, {"node1": 1.0, "node2": 1.02, "node3": 1.34}, 30)
    found = job.progress["stragglers"]
    assert list(found) == ["node3"]
    assert found["node3"]["slower"] == pytest.approx(0.33, abs=0.01)
    assert found["node3"]["median"] == 1.34 and found["node3"]["peers"] == pytest.approx(1.01)
    assert job.progress["pace"]["node3"] == [1.34, 9, "1"]  # the node's slowest rank
    wire = job_wire(job, ctl.clock.now())
    assert wire["stragglers"] == "node3(+33%)"
    assert job_wire(job, ctl.clock.now(), brief=True)["stragglers"] == "node3(+33%)"
    assert "Stragglers=node3(+33%)" in job_record(wire)
    (rest,) = job_info(wire)["stragglers"]  # the REST job view
    assert rest["node"] == "node3" and rest["median_step_seconds"] == 1.34
    assert job.spec.exclude == []  # the default only flags
    kinds = [k for _t, k, _d in ctl.store.events(job.job_id)]
    assert "straggler" in kinds
    text = ControllerCollector(ctl, ServerStats(1000.0), user_labels=True).render().decode()
    assert f'muster_job_straggler{{job="{job.job_id}",node="node3"}} 0.327' in text


def test_equal_nodes_are_never_flagged(ctl: Controller) -> None:
    job = run(ctl)
    steps(ctl, job, {"node1": 1.0, "node2": 1.05, "node3": 0.97}, 600)
    assert not job.progress.get("stragglers")
    assert "straggler" not in [k for _t, k, _d in ctl.store.events(job.job_id)]


def test_stragglers_exclude_keeps_the_node_out_of_the_next_attempt(ctl: Controller) -> None:
    job = run(ctl, "ex")
    steps(ctl, job, {"node1": 1.0, "node2": 1.0, "node3": 1.6}, 80)
    assert job.spec.exclude == ["node3"]
    assert job.nodes == NODES  # the running attempt is left alone


def test_stragglers_off_judges_nothing(ctl: Controller) -> None:
    job = run(ctl, "quiet")
    steps(ctl, job, {"node1": 1.0, "node2": 1.0, "node3": 2.0}, 120)
    assert not job.progress.get("stragglers")


def test_the_partition_window_shortens_the_wait(ctl: Controller) -> None:
    job = run(ctl, "quick")
    steps(ctl, job, {"node1": 1.0, "node2": 1.0, "node3": 1.5}, 20)
    assert list(job.progress["stragglers"]) == ["node3"]


def test_stragglers_swap_replaces_the_node_at_the_next_checkpoint(ctl: Controller) -> None:
    job = run(ctl, "swap", spare_nodes=1)
    steps(ctl, job, {"node3": 1.5}, 20, ckpt=100)
    assert list(job.progress["stragglers"]) == ["node3"] and job.spec.exclude == ["node3"]
    steps(ctl, job, {"node3": 1.5}, 20, ckpt=100)  # no newer checkpoint: not yet
    assert job.nodes == NODES
    actions = steps(ctl, job, {"node3": 1.5}, 10, ckpt=200)
    assert "node3" not in job.nodes and len(job.nodes) == 3 and job.nodes[:2] == NODES[:2]
    (event,) = job.replacements
    assert (event["old"], event["cause"]) == ("node3", "straggler") and "slower than its peers" in event["why"]
    assert any(type(a).__name__ == "Terminate" and a.nodes == ["node3"] for a in actions)  # ended there
    assert "replaced" in [k for _t, k, _d in ctl.store.events(job.job_id)]
    steps(ctl, job, {}, 30, ckpt=200)
    assert not job.progress.get("stragglers") and not job.progress.get("straggler_swap")


def test_stragglers_swap_without_spare_nodes_only_excludes(ctl: Controller) -> None:
    job = run(ctl, "swap")
    steps(ctl, job, {"node3": 1.5}, 20, ckpt=100)
    steps(ctl, job, {"node3": 1.5}, 20, ckpt=200)
    assert job.nodes == NODES and job.spec.exclude == ["node3"] and not job.replacements
    assert list(job.progress["stragglers"]) == ["node3"]


def test_a_bad_stragglers_value_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="Stragglers='later': expected flag, exclude, swap or off"):
        parse_config(CONF + "PartitionName=bad Nodes=ALL Stragglers=later\n", "t.conf")
    with pytest.raises(ConfigError, match="bad StragglerWindow 'soon'"):
        parse_config(CONF + "PartitionName=bad Nodes=ALL StragglerWindow=soon\n", "t.conf")
