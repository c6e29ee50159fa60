"""sched.replace: the choice of the node that replaces a running job's failed node."""

from __future__ import annotations

from muster.core.topoconf import parse_topology
from muster.sched.replace import Candidate, Need, choose_replacement
from muster.sched.topology import Topology

NAMES = [f"n{i}" for i in range(1, 9)]
TREE = "SwitchName=s1 Nodes=n[1-4]\nSwitchName=s2 Nodes=n[5-8]\nSwitchName=top Switches=s[1-2]\n"
BLOCKS = "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-8]\n"
NEED = Need(cpus=4, mem=1000, gpus=2)


def free(name: str, **kw: object) -> Candidate:
    fields: dict[str, object] = dict(
        name=name, index=NAMES.index(name), usable=True, free_cpus=8, free_mem=4000, free_gpu_ids=(0, 1, 2, 3)
    )
    fields.update(kw)
    return Candidate(**fields)  # type: ignore[arg-type]


def topo(text: str = TREE) -> Topology:
    return Topology(parse_topology(text, "t", NAMES), NAMES)


def test_a_node_in_the_failed_nodes_leaf_switch_comes_first_even_before_a_spare_elsewhere() -> None:
    job = ["n1", "n2", "n3"]
    cands = [free("n5", spare=True), free("n4"), free("n6")]
    assert choose_replacement("n2", NEED, cands, job, topology=topo()) == ("n4", (0, 1))


def test_a_spare_in_the_same_block_comes_before_an_idle_node_of_that_block() -> None:
    job = ["n5", "n6"]
    cands = [free("n7"), free("n8", spare=True), free("n1", spare=True)]
    assert choose_replacement("n6", NEED, cands, job, topology=topo(BLOCKS)) == ("n8", (0, 1))


def test_without_a_free_node_nearby_the_spare_pool_comes_before_other_idle_nodes() -> None:
    job = ["n1", "n2", "n3", "n4"]
    cands = [free("n5"), free("n7", spare=True), free("n6")]
    assert choose_replacement("n2", NEED, cands, job, topology=topo())[0] == "n7"  # type: ignore[index]
    assert choose_replacement("n2", NEED, cands, job)[0] == "n7"  # type: ignore[index]


def test_never_a_drained_down_excluded_held_or_too_small_node() -> None:
    job = ["n1", "n2"]
    cands = [
        free("n3", usable=False, spare=True),  # drained or down
        free("n4", spare=True),  # excluded by the job
        free("n1"),  # already the job's
        free("n5", free_cpus=2),
        free("n6", free_mem=10),
        free("n7", free_gpu_ids=(3,)),
    ]
    assert choose_replacement("n2", NEED, cands, job, exclude=["n4"], topology=topo()) is None
    assert choose_replacement("n2", NEED, [*cands, free("n8")], job, exclude=["n4"])[0] == "n8"  # type: ignore[index]


def test_gpu_type_whole_node_and_features_are_honoured() -> None:
    job = ["n1", "n2"]
    need = Need(cpus=1, mem=0, gpus=1, gpu_type="a100", whole_node=True, features=frozenset({"ib"}))
    cands = [
        free("n3", gpu_type="h100", idle=True, features=frozenset({"ib"})),
        free("n4", gpu_type="a100", idle=False, features=frozenset({"ib"})),
        free("n5", gpu_type="a100", idle=True),
        free("n6", gpu_type="a100", idle=True, features=frozenset({"ib", "nvme"}), free_gpu_ids=(3, 1)),
    ]
    assert choose_replacement("n2", need, cands, job) == ("n6", (1,))


def test_weight_then_configuration_order_break_ties() -> None:
    job = ["n1"]
    need = Need(cpus=1, mem=0, gpus=0)
    assert choose_replacement("n1", need, [free("n7"), free("n3")], job) == ("n3", ())
    assert choose_replacement("n1", need, [free("n7", weight=1), free("n3", weight=5)], job) == ("n7", ())


def test_a_failed_node_outside_the_topology_uses_the_unit_holding_most_of_the_job() -> None:
    names = [*NAMES, "x1"]
    t = Topology(parse_topology(TREE, "t", names), names)
    job = ["n5", "n6", "x1"]
    cands = [free("n2"), free("n8")]
    assert choose_replacement("x1", NEED, cands, job, topology=t)[0] == "n8"  # type: ignore[index]
