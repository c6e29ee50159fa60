"""Step placement inside an allocation: fits now, waits, or never fits (core.steps)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from muster.core.steps import (
    NodeShare,
    Step,
    StepLayout,
    StepRejected,
    StepRequest,
    StepWait,
    format_step_id,
    master_port,
    plan_step,
)


def shares(*cpus: int, gpus: int = 0) -> list[NodeShare]:
    return [NodeShare(f"node{i + 1}", c, tuple(range(gpus))) for i, c in enumerate(cpus)]


def place(request: StepRequest, nodes: list[NodeShare]) -> StepLayout:
    out = plan_step(request, nodes)
    assert isinstance(out, StepLayout), out
    return out


@pytest.mark.parametrize(
    ("request_", "cpus", "tasks"),
    [
        pytest.param(StepRequest(), (1, 1), [[0], [1]], id="no options: one task on every node"),
        pytest.param(StepRequest(min_nodes=2, ntasks=4), (2, 2), [[0, 1], [2, 3]], id="-N2 -n4 in 2x2 CPUs: 2+2"),
        pytest.param(
            StepRequest(min_nodes=2, ntasks=4),
            (32, 32),
            [[0, 1, 2], [3]],
            id="-N2 -n4 on big nodes: block fills the first (3+1, as Slurm)",
        ),
        pytest.param(
            StepRequest(min_nodes=2, ntasks=4, distribution="cyclic"),
            (32, 32),
            [[0, 2], [1, 3]],
            id="cyclic deals tasks round the nodes",
        ),
        pytest.param(StepRequest(ntasks=2), (2, 2), [[0, 1]], id="-n alone packs onto the fewest nodes"),
        pytest.param(
            StepRequest(ntasks_per_node=2),
            (2, 2, 2),
            [[0, 1], [2, 3], [4, 5]],
            id="--ntasks-per-node alone: every node",
        ),
        pytest.param(
            StepRequest(ntasks=4, ntasks_per_node=2),
            (8, 8, 8),
            [[0, 1], [2, 3]],
            id="-n4 --ntasks-per-node=2: two nodes",
        ),
        pytest.param(StepRequest(ntasks=3, cpus_per_task=2), (4, 4), [[0, 1], [2]], id="-c counts CPUs per task"),
        pytest.param(
            StepRequest(min_nodes=3, ntasks=2), (4, 4, 4), [[0], [1]], id="more nodes than tasks: nodes cut to tasks"
        ),
        pytest.param(StepRequest(nodelist=("node2",)), (1, 1), [[0]], id="--nodelist picks the nodes"),
        pytest.param(StepRequest(exclude=("node1",)), (1, 1), [[0]], id="--exclude leaves nodes out"),
    ],
)
def test_tasks_are_laid_out(request_: StepRequest, cpus: tuple[int, ...], tasks: list[list[int]]) -> None:
    layout = place(request_, shares(*cpus))
    assert layout.tasks == tasks
    assert layout.ntasks == sum(len(t) for t in tasks)


def test_eight_tasks_on_eight_gpus_each_see_all_of_them_as_in_slurm() -> None:
    layout = place(StepRequest(ntasks=8, gpus_per_node=8), shares(32, gpus=8))
    assert layout.nodes == ["node1"]
    assert layout.task_gpus == [[list(range(8))] * 8]
    assert layout.holds_gpus


def test_gpu_bind_single_gives_each_of_eight_tasks_its_own_gpu() -> None:
    layout = place(StepRequest(ntasks=8, gpus_per_node=8, gpu_bind="single:1"), shares(32, gpus=8))
    assert layout.task_gpus == [[[g] for g in range(8)]]


def test_a_map_gpu_naming_a_gpu_the_step_lacks_rejects_the_step() -> None:
    with pytest.raises(StepRejected, match="map_gpu"):
        place(StepRequest(ntasks=2, gpus_per_node=2, gpu_bind="map_gpu:0,2"), shares(4, gpus=2))


def test_gpus_per_task_binds_each_task_and_holds_them() -> None:
    layout = place(StepRequest(ntasks_per_node=2, gpus_per_task=1), shares(2, 2, gpus=2))
    assert layout.task_gpus == [[[0], [1]], [[0], [1]]]
    assert layout.gpus == [[0, 1], [0, 1]] and layout.holds_gpus


def test_a_step_without_a_gpu_request_shows_every_task_the_jobs_gpus() -> None:
    layout = place(StepRequest(ntasks_per_node=2), shares(2, 2, gpus=2))
    assert layout.task_gpus == [[[0, 1], [0, 1]], [[0, 1], [0, 1]]]
    assert not layout.holds_gpus  # seen, not held: another step may see them too


def test_gpu_bind_none_shows_every_task_all_gpus() -> None:
    layout = place(StepRequest(ntasks=2, gpus_per_node=2, gpu_bind="none"), shares(4, gpus=2))
    assert layout.task_gpus == [[[0, 1], [0, 1]]]


def test_gpus_that_do_not_split_evenly_are_all_shown_to_every_task() -> None:
    layout = place(StepRequest(ntasks=3), shares(4, gpus=8))
    assert layout.task_gpus == [[list(range(8))] * 3]


def test_a_busy_allocation_makes_the_step_wait() -> None:
    nodes = [NodeShare("node1", 2, (0, 1), used_cpus=2), NodeShare("node2", 2, (0, 1))]
    assert isinstance(plan_step(StepRequest(ntasks=3), nodes), StepWait)
    layout = place(StepRequest(ntasks=2), nodes)
    assert layout.nodes == ["node2"]  # it fits beside the running step


def test_held_gpus_are_never_given_twice() -> None:
    nodes = [NodeShare("node1", 8, tuple(range(4)), used_cpus=1, used_gpus=frozenset({0, 1}))]
    layout = place(StepRequest(ntasks=2, gpus_per_task=1), nodes)
    assert layout.gpus == [[2, 3]]
    assert isinstance(plan_step(StepRequest(ntasks=3, gpus_per_task=1), nodes), StepWait)


def test_overlap_ignores_other_steps_and_holds_nothing() -> None:
    nodes = [NodeShare("node1", 2, (0,), used_cpus=2, used_gpus=frozenset({0}))]
    layout = place(StepRequest(ntasks=2, overlap=True), nodes)
    assert layout.cpus == [0] and not layout.holds_gpus


def test_exclusive_takes_whole_idle_nodes() -> None:
    nodes = [NodeShare("node1", 4, (0, 1), used_cpus=1), NodeShare("node2", 4, (0, 1))]
    layout = place(StepRequest(ntasks=1, exclusive=True), nodes)
    assert layout.nodes == ["node2"] and layout.cpus == [4] and layout.gpus == [[0, 1]]


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (StepRequest(min_nodes=3), "Requested node configuration is not available"),
        (StepRequest(ntasks=5), "More processors requested than permitted"),
        (StepRequest(ntasks=1, gpus_per_node=9), "Invalid generic resource (gres) specification"),
        (StepRequest(ntasks=5, gpus_per_task=1), "Invalid generic resource (gres) specification"),
        (StepRequest(nodelist=("node9",)), "Requested node configuration is not available"),
    ],
)
def test_what_can_never_fit_is_rejected_with_slurms_words(request_: StepRequest, message: str) -> None:
    with pytest.raises(StepRejected, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan_step(request_, shares(2, 2, gpus=2))


def test_a_request_that_names_nonsense_is_rejected() -> None:
    with pytest.raises(StepRejected):
        StepRequest(distribution="plane")
    with pytest.raises(StepRejected):
        StepRequest(ntasks=0)


def test_master_port_is_shared_by_a_steps_tasks_and_stays_below_ephemeral_ports() -> None:
    assert master_port(12, 0) == master_port(12, 0)
    assert master_port(12, 0) != master_port(12, 1) != master_port(13, 0)
    assert all(12000 <= master_port(j, s) < 30000 for j in range(0, 5000, 7) for s in range(40))


def test_step_records_round_trip_with_flat_fields_for_accounting() -> None:
    layout = place(StepRequest(min_nodes=2, ntasks=4, gpus_per_node=2), shares(2, 2, gpus=2))
    step = Step(7, 0, 0, "train", 1001, "alice", "RUNNING", 100.0, layout, StepRequest(ntasks=4))
    d = step.to_dict()
    assert d["nodes"] == ["node1", "node2"] and d["ntasks"] == 4 and d["ncpus"] == 4 and d["gpus"] == 4
    assert Step.from_dict(d) == step
    assert format_step_id(7, 0) == "7.0" and format_step_id(7, -5) == "7.batch"


@settings(max_examples=200, deadline=None)
@given(
    cpus=st.lists(st.integers(1, 8), min_size=1, max_size=4),
    gpus=st.integers(0, 4),
    ntasks=st.one_of(st.none(), st.integers(1, 12)),
    nodes=st.one_of(st.none(), st.integers(1, 4)),
    per_node=st.one_of(st.none(), st.integers(1, 4)),
    gpt=st.one_of(st.none(), st.integers(1, 2)),
    cyclic=st.booleans(),
)
def test_placement_invariants(cpus, gpus, ntasks, nodes, per_node, gpt, cyclic) -> None:  # type: ignore[no-untyped-def]
    request = StepRequest(
        min_nodes=nodes,
        ntasks=ntasks,
        ntasks_per_node=per_node,
        gpus_per_task=gpt,
        distribution="cyclic" if cyclic else "block",
    )
    try:
        layout = plan_step(request, shares(*cpus, gpus=gpus))
    except StepRejected:
        return
    assert isinstance(layout, StepLayout)  # nothing else runs: never StepWait
    ids = sorted(t for node in layout.tasks for t in node)
    assert ids == list(range(layout.ntasks))  # every task once
    if ntasks is not None:
        assert layout.ntasks == ntasks
    by_name = {s.name: s for s in shares(*cpus, gpus=gpus)}
    for name, tasks, held, node_gpus in zip(layout.nodes, layout.tasks, layout.cpus, layout.gpus, strict=True):
        assert tasks, "a chosen node runs at least one task"
        assert held <= by_name[name].cpus
        assert len(set(node_gpus)) == len(node_gpus) <= gpus
        if per_node:
            assert len(tasks) <= per_node


def test_overcommit_runs_more_tasks_than_the_node_has_cpus() -> None:
    request = StepRequest(min_nodes=1, ntasks=33)
    with pytest.raises(StepRejected):
        plan_step(request, shares(32))
    layout = place(StepRequest(min_nodes=1, ntasks=33, overcommit=True), shares(32))
    assert (layout.ntasks, layout.cpus) == (33, [32])  # the tasks share the node's CPUs


def test_arbitrary_puts_each_task_on_the_node_the_host_file_names() -> None:
    # srun(1) -m arbitrary: "allocate processes in-order as listed in file designated by the
    # environment variable SLURM_HOSTFILE"
    req = StepRequest(distribution="arbitrary", task_nodes=("node3", "node1", "node3", "node3"))
    layout = plan_step(req, shares(4, 4, 4))
    assert isinstance(layout, StepLayout)
    assert layout.nodes == ["node3", "node1"]
    assert layout.tasks == [[0, 2, 3], [1]]
    assert layout.distribution == "arbitrary"


def test_arbitrary_refuses_what_it_cannot_place() -> None:
    with pytest.raises(StepRejected):
        plan_step(StepRequest(distribution="arbitrary", task_nodes=("node9",)), shares(4))
    with pytest.raises(StepRejected):  # node1 has room for 2 tasks, not 3: never
        plan_step(StepRequest(distribution="arbitrary", task_nodes=("node1",) * 3), shares(2))
    with pytest.raises(StepRejected):
        StepRequest(distribution="arbitrary")  # no host file
    with pytest.raises(StepRejected):
        StepRequest(distribution="arbitrary", task_nodes=("node1", "node2"), ntasks=3)
    round_trip = StepRequest.from_dict(StepRequest(distribution="arbitrary", task_nodes=("node1",)).to_dict())
    assert round_trip.task_nodes == ("node1",)
