"""Feasibility: reasons that resolve later versus jobs that can never run, and the
submit-time check with Slurm's wording."""

from __future__ import annotations

import pytest

from muster.core.job import JobSpec, Shape
from muster.core.states import Reason
from muster.sched.filters import check_submit, validate_submit
from muster.sched.snapshot import NodeView, PartitionView, ReservationView
from muster.sched.testing import SchedHarness, job, node


def cluster() -> SchedHarness:
    h = SchedHarness()
    h.gpu_nodes(2, gpus=8, gpu_type="a100", features=("ib",), partitions=("gpu", "all"))
    h.gpu_nodes(2, gpus=4, gpu_type="v100", prefix="old", partitions=("old", "all"))
    return h


def test_a_down_partition_keeps_its_jobs_pending_with_partition_down() -> None:
    h = cluster()
    h.partition("gpu", state="DOWN")
    j = h.submit(job().partition("gpu"))
    d = h.schedule(at=0)
    assert d.reasons[j] is Reason.PARTITION_DOWN and j not in d.never
    h.partition("gpu", state="UP")
    assert h.started(h.schedule(at=1)) == [j]


def test_an_inactive_partition_gives_partition_inactive() -> None:
    h = cluster()
    h.partition("gpu", state="INACTIVE")
    j = h.submit(job().partition("gpu"))
    assert h.schedule(at=0).reasons[j] is Reason.PARTITION_INACTIVE


def test_a_drained_partition_still_runs_the_jobs_it_queued() -> None:
    h = cluster()
    h.partition("gpu", state="DRAIN")
    j = h.submit(job().partition("gpu"))
    assert h.started(h.schedule(at=0)) == [j]


def test_a_time_limit_over_max_time_waits_with_partition_time_limit() -> None:
    h = cluster()
    h.partition("gpu", max_time=3600)
    j = h.submit(job().partition("gpu").time("2:00:00"))
    d = h.schedule(at=0)
    assert d.reasons[j] is Reason.PARTITION_TIME_LIMIT and j not in d.never
    h.partition("gpu", max_time=None)
    assert h.started(h.schedule(at=1)) == [j]


def test_a_job_without_a_time_limit_gets_the_partition_default() -> None:
    h = cluster()
    h.partition("gpu", default_time=600, max_time=3600)
    h.run_job(job().partition("gpu").nodes(2).gpus(8))
    waiting = h.submit(job().partition("gpu").nodes(2).gpus(8), at=1)
    assert h.schedule(at=2).plans[waiting].start_time == 600


def test_too_many_nodes_for_the_partition_waits_with_partition_node_limit() -> None:
    h = cluster()
    h.partition("gpu", max_nodes=1)
    j = h.submit(job().partition("gpu").nodes(2))
    k = h.submit(job().partition("old").nodes(3))
    d = h.schedule(at=0)
    assert d.reasons[j] is Reason.PARTITION_NODE_LIMIT
    assert d.reasons[k] is Reason.PARTITION_NODE_LIMIT


def test_a_required_node_that_is_down_gives_req_node_not_avail() -> None:
    h = cluster()
    h.node_named("gpu1").available = False
    j = h.submit(job().partition("gpu").nodelist("gpu1"))
    k = h.submit(job().partition("gpu").nodes(2))
    d = h.schedule(at=0)
    assert d.reasons[j] is Reason.REQ_NODE_NOT_AVAIL
    assert d.reasons[k] is Reason.REQ_NODE_NOT_AVAIL
    assert j not in d.never and k not in d.never


def test_unsatisfiable_constraints_are_never_satisfiable() -> None:
    h = cluster()
    nvlink = h.submit(job().partition("gpu").constraint("nvlink"))
    bad = h.submit(job().partition("gpu").constraint("ib&&"))
    too_big = h.submit(job().partition("gpu").gpus(16))
    d = h.schedule(at=0)
    for j in (nvlink, bad, too_big):
        assert d.reasons[j] is Reason.BAD_CONSTRAINTS
        assert j in d.never
    assert d.never[bad] == "Invalid feature specification"


@pytest.mark.parametrize(
    "expr, started",
    [("ib", True), ("ib&a100", False), ("ib|nvlink", True), ("[nvlink|ib]", True), ("x", False)],
)
def test_constraints_select_nodes_by_feature(expr: str, started: bool) -> None:
    h = cluster()
    j = h.submit(job().partition("all").constraint(expr))
    d = h.schedule(at=0)
    assert (j in h.started(d)) is started
    if started:
        assert d.starts[0].alloc[0].node.startswith("gpu")


def test_a_partition_that_denies_the_account_never_runs_the_job() -> None:
    h = cluster()
    h.partition("gpu", allow_accounts=("physics",))
    chem = h.submit(job().partition("gpu").account("chem"))
    phys = h.submit(job().partition("gpu").account("physics"))
    d = h.schedule(at=0)
    assert chem in d.never
    assert h.started(d) == [phys]


def test_a_job_naming_several_partitions_starts_in_the_first_that_fits() -> None:
    h = cluster()
    h.run_job(job().partition("gpu").nodes(2).gpus(8).time("1:00:00"))
    j = h.submit(job().partition("gpu", "old").gpus(4), at=1)
    d = h.schedule(at=2)
    assert [(s.job_id, s.partition) for s in d.starts] == [(j, "old")]


def test_a_job_naming_several_partitions_is_planned_at_the_earliest_of_them() -> None:
    h = cluster()
    h.run_job(job().partition("gpu").nodes(2).gpus(8).time("1:00:00"))
    h.run_job(job().partition("old").nodes(2).gpus(4).time("10:00"))
    j = h.submit(job().partition("gpu", "old").gpus(4), at=1)
    assert h.schedule(at=2).plans[j].start_time == 600


# -- validate_submit ------------------------------------------------------------------


def views() -> tuple[dict[str, PartitionView], list[NodeView]]:
    nodes = [node(f"n{i}").cpus(32).mem(128_000).gpus("a100", 8).features("ib").build(i) for i in range(8)]
    parts = {
        "gpu": PartitionView("gpu", tuple(n.name for n in nodes), is_default=True),
        "debug": PartitionView("debug", tuple(n.name for n in nodes[4:]), max_time=3600),
        "closed": PartitionView("closed", ("n0",), state="DRAIN"),
        "physics": PartitionView("physics", ("n0",), allow_accounts=("physics",)),
    }
    return parts, nodes


def submit(spec: JobSpec | None = None, **shape: object) -> str | None:
    parts, nodes = views()
    spec = spec or JobSpec()
    res = [ReservationView("team", 0, 10**10, ("n1",), users=("alice",))]
    return validate_submit(spec, Shape(**shape), parts, nodes, res, user="bob", group="bob")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "spec, shape, message",
    [
        (JobSpec(), {}, None),
        (JobSpec(partitions=["nosuch"]), {}, "Invalid partition name specified"),
        (JobSpec(), {"gpus_per_node": 9}, "Requested node configuration is not available"),
        (JobSpec(), {"cpus_per_node": 33}, "Requested node configuration is not available"),
        (JobSpec(), {"mem_per_node": 999 * 1024}, "Requested node configuration is not available"),
        (
            JobSpec(gpu_type="h100"),
            {"gpus_per_node": 1, "gpu_type": "h100"},
            "Invalid generic resource (gres) specification",
        ),
        # EnforcePartLimits=NO: over MaxTime waits (PartitionTimeLimit); more nodes than the
        # partition has can never run
        (JobSpec(partitions=["debug"], time_limit=7200), {}, None),
        (JobSpec(), {"nodes": 9}, "Requested node configuration is not available"),
        (JobSpec(), {"nodes": 10**12}, "Requested node configuration is not available"),
        (
            JobSpec(partitions=["closed"]),
            {},
            "Required partition not available (inactive or drain)",
        ),
        (
            JobSpec(partitions=["physics"], account="chem"),
            {},
            "Invalid account or account/partition combination specified",
        ),
        (JobSpec(constraint="ib&(x"), {}, "Invalid feature specification"),
        (JobSpec(constraint="nvlink"), {}, "Requested node configuration is not available"),
        (JobSpec(nodelist=["n99"]), {}, "Invalid node name specified"),
        (
            JobSpec(partitions=["debug"], nodelist=["n0"]),
            {},
            "Requested node configuration is not available",
        ),
        (JobSpec(reservation="nosuch"), {}, "Requested reservation is invalid"),
        (JobSpec(reservation="team"), {}, "Access denied to requested reservation"),
        (JobSpec(partitions=["closed", "gpu"]), {}, None),
        # --tmp: no node has any TmpDisk here (Slurm's default, 0 MB)
        (JobSpec(tmp_disk=1), {}, "Requested node configuration is not available"),
        (JobSpec(tmp_disk=0), {}, None),
        # --segment cuts the job's nodes in equal parts
        (JobSpec(segment=2), {"nodes": 4}, None),
        (JobSpec(segment=3), {"nodes": 4}, "Requested node configuration is not available"),
    ],
)
def test_validate_submit_refuses_only_what_can_never_run(
    spec: JobSpec, shape: dict[str, object], message: str | None
) -> None:
    assert submit(spec, **shape) == message


def test_memory_that_no_node_has_names_memory_in_the_detail() -> None:
    parts, nodes = views()
    r = check_submit(JobSpec(), Shape(mem_per_node=999 * 1024), parts, nodes)
    assert r is not None
    assert (r.message, r.detail) == (
        "Requested node configuration is not available",
        "Memory specification can not be satisfied",
    )


def test_enforced_partition_limits_refuse_at_submit() -> None:
    parts, nodes = views()
    over_time = JobSpec(partitions=["debug"], time_limit=7200)
    assert validate_submit(over_time, Shape(), parts, nodes, enforce_part_limits="ALL") == (
        "Requested time limit is invalid (missing or exceeds some limit)"
    )
    assert validate_submit(JobSpec(), Shape(nodes=9), parts, nodes, enforce_part_limits="ALL") == (
        "Node count specification invalid"
    )


def test_without_a_default_partition_a_job_must_name_one() -> None:
    parts, nodes = views()
    parts["gpu"].is_default = False
    assert validate_submit(JobSpec(), Shape(), parts, nodes) == ("No partition specified or system default partition")


def test_tmp_asks_for_nodes_with_that_much_tmp_disk() -> None:
    parts, nodes = views()
    for n in nodes[:2]:
        n.tmp_disk = 50_000
    assert validate_submit(JobSpec(tmp_disk=40_000), Shape(nodes=2), parts, nodes) is None
    assert validate_submit(JobSpec(tmp_disk=40_000), Shape(nodes=3), parts, nodes) == (
        "Requested node configuration is not available"
    )
