"""Topology-aware placement (sched.topology through the pass): as few leaf switches or
blocks as possible, best fit, --switches waits then gives up, --segment, topology order."""

from __future__ import annotations

import dataclasses
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from muster.core.states import Reason
from muster.core.topoconf import parse_topology
from muster.sched import SchedConfig
from muster.sched.testing import SchedHarness, job
from muster.sched.topology import Topology

TREE = """\
SwitchName=s0 Nodes=node[1-4]
SwitchName=s1 Nodes=node[5-8]
SwitchName=s2 Nodes=node[9-12]
SwitchName=s3 Nodes=node[13-16]
SwitchName=top Switches=s[0-3]
"""


def cluster(topology: str | None = TREE, nodes: int = 16, config: SchedConfig | None = None) -> SchedHarness:
    h = SchedHarness(config or SchedConfig(priority_type="priority/basic"))
    h.gpu_nodes(nodes, gpus=0, cpus=4, mem=1000, prefix="node")
    if topology is not None:
        h.topology_conf(topology)
    return h


def whole_node() -> object:
    return job().cpus(4).mem(100).time(3600)


def nodes_of(h: SchedHarness, job_id: int) -> list[str]:
    return [a.node for a in h.running[job_id].alloc]


def test_a_four_node_job_lands_on_one_free_leaf_switch() -> None:
    for topology, expected in (
        (None, ["node2", "node3", "node4", "node5"]),
        (TREE, [f"node{i}" for i in range(9, 13)]),
    ):
        h = cluster(topology)
        h.run_job(job().nodelist("node1").cpus(4).mem(100).time(3600))
        h.run_job(job().nodelist("node6").cpus(4).mem(100).time(3600))
        big = h.run_job(job().nodes(4).cpus(4).mem(100).time(3600), at=1)
        assert nodes_of(h, big) == expected  # without topology: a contiguous run across s0 and s1


def test_best_fit_takes_the_leaf_left_with_fewest_free_nodes() -> None:
    h = cluster()
    h.run_job(job().nodelist("node1").cpus(4).mem(100).time(3600))  # s0: 3 free, the others 4
    three = h.run_job(job().nodes(3).cpus(4).mem(100).time(3600), at=1)
    assert nodes_of(h, three) == ["node2", "node3", "node4"]


def test_a_job_bigger_than_a_leaf_stays_under_the_lowest_switch_that_holds_it() -> None:
    pods = """\
SwitchName=l0 Nodes=node[1-4]
SwitchName=l1 Nodes=node[5-8]
SwitchName=l2 Nodes=node[9-12]
SwitchName=l3 Nodes=node[13-16]
SwitchName=podA Switches=l[0-1]
SwitchName=podB Switches=l[2-3]
SwitchName=core Switches=podA,podB
"""
    h = cluster(pods)
    h.run_job(job().nodelist("node1").cpus(4).mem(100).time(3600))
    h.run_job(job().nodelist("node5").cpus(4).mem(100).time(3600))  # podA: 6 free, podB: 8
    six = h.run_job(job().nodes(6).cpus(4).mem(100).time(3600), at=1)
    assert nodes_of(h, six) == ["node2", "node3", "node4", "node6", "node7", "node8"]  # podA, best fit
    seven = h.run_job(job().nodes(7).cpus(4).mem(100).time(3600), at=2)
    assert nodes_of(h, seven) == [f"node{i}" for i in range(9, 16)]  # podB: l2 whole, then l3


def test_nodes_come_in_topology_order() -> None:
    h = cluster("SwitchName=s0 Nodes=node[5-8]\nSwitchName=s1 Nodes=node[1-4]\nSwitchName=top Switches=s[0-1]\n", 8)
    j = h.run_job(job().nodes(8).cpus(4).mem(100).time(3600))
    assert nodes_of(h, j) == [f"node{i}" for i in (5, 6, 7, 8, 1, 2, 3, 4)]


def test_switches_waits_for_one_leaf_then_takes_any_after_its_wait() -> None:
    h = cluster()
    for name in ("node1", "node5", "node9", "node13"):  # every leaf has 3 free nodes
        h.run_job(job().nodelist(name).cpus(4).mem(100).time(3600))
    j = h.submit(job().nodes(4).cpus(4).mem(100).time(600).switches(1, 300), at=10)
    d = h.schedule(at=10)
    assert j not in h.started(d) and d.reasons[j] is Reason.RESOURCES
    assert d.plans[j].start_time == 3600  # a leaf frees when the first of those jobs ends
    assert j not in h.started(h.schedule(at=309))
    assert j in h.started(h.schedule(at=310))  # waited its 300 s: any 4 nodes
    assert h.topology is not None and h.topology.units_of(nodes_of(h, j)) == 2


def test_switches_without_a_wait_uses_max_switch_wait() -> None:
    h = cluster(config=SchedConfig(priority_type="priority/basic", max_switch_wait=60))
    for name in ("node1", "node5", "node9", "node13"):
        h.run_job(job().nodelist(name).cpus(4).mem(100).time(3600))
    j = h.submit(job().nodes(4).cpus(4).mem(100).time(600).switches(1), at=0)
    assert j not in h.started(h.schedule(at=59))
    assert j in h.started(h.schedule(at=60))


def test_switches_takes_a_free_leaf_at_once() -> None:
    h = cluster()
    h.run_job(job().nodelist("node1").cpus(4).mem(100).time(3600))
    j = h.run_job(job().nodes(4).cpus(4).mem(100).time(600).switches(1, 3600), at=1)
    assert nodes_of(h, j) == ["node5", "node6", "node7", "node8"]


BLOCKS = """\
BlockName=b1 Nodes=node[1-4]
BlockName=b2 Nodes=node[5-8]
BlockName=b3 Nodes=node[9-12]
BlockName=b4 Nodes=node[13-16]
BlockSizes=4,8,16
"""


def test_block_placement_with_segments_keeps_each_segment_in_one_block() -> None:
    for segment, expected in ((None, ["node2", "node3", "node4", "node6"]), (2, ["node2", "node3", "node6", "node7"])):
        h = cluster(BLOCKS)
        h.run_job(job().nodes(8).nodelist(*[f"node{i}" for i in range(9, 17)]).cpus(4).mem(100).time(3600))
        for name in ("node1", "node5"):
            h.run_job(job().nodelist(name).cpus(4).mem(100).time(3600))
        # free: b1 3, b2 3
        b = job().nodes(4).cpus(4).mem(100).time(600)
        j = h.run_job(b.segment(segment) if segment else b, at=1)
        assert nodes_of(h, j) == expected  # without segments 3 + 1, with segments of 2: 2 + 2


def test_segments_that_do_not_divide_the_node_count_can_never_run() -> None:
    h = cluster(BLOCKS)
    j = h.submit(job().nodes(4).cpus(4).mem(100).time(600).segment(3))
    d = h.schedule(at=0)
    assert d.reasons[j] is Reason.BAD_CONSTRAINTS and "node configuration" in d.never[j]


def test_a_block_job_uses_the_smallest_aggregated_block() -> None:
    h = cluster(BLOCKS)
    h.run_job(job().nodelist("node1").cpus(4).mem(100).time(3600))
    h.run_job(job().nodelist("node5").cpus(4).mem(100).time(3600))  # b1-b2 has 6 free, b3-b4 8
    six = h.run_job(job().nodes(6).cpus(4).mem(100).time(3600), at=1)
    assert nodes_of(h, six) == ["node2", "node3", "node4", "node6", "node7", "node8"]


def test_node_weight_comes_before_the_topology() -> None:
    h = cluster()
    for v in h.nodes[:4]:
        v.weight = 5  # s0 is the last resort
    four = h.run_job(job().nodes(4).cpus(4).mem(100).time(3600))
    assert nodes_of(h, four) == ["node5", "node6", "node7", "node8"]
    for name in ("node9", "node13"):
        h.run_job(job().nodelist(name).cpus(4).mem(100).time(3600))
    # 6 light nodes left: all of them, then 2 of s0
    rest = h.run_job(job().nodes(8).cpus(4).mem(100).time(3600), at=1)
    assert nodes_of(h, rest) == ["node1", "node2"] + [f"node{i}" for i in (10, 11, 12, 14, 15, 16)]


@dataclasses.dataclass
class _N:
    name: str
    index: int


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=6),  # nodes per leaf
    st.integers(2, 3),  # leaves per upper switch
    st.data(),
)
def test_placement_takes_one_leaf_whenever_one_can_hold_the_job(
    sizes: list[int], fan: int, data: st.DataObject
) -> None:
    lines, names, k = [], [], 0
    for i, size in enumerate(sizes):
        leaf = [f"n{k + j}" for j in range(size)]
        k += size
        names += leaf
        lines.append(f"SwitchName=l{i} Nodes={','.join(leaf)}")
    uppers = [f"l{i}" for i in range(len(sizes))]
    level = 0
    while len(uppers) > 1:
        level += 1
        groups = [uppers[i : i + fan] for i in range(0, len(uppers), fan)]
        uppers = [f"u{level}x{j}" for j in range(len(groups))]
        lines += [f"SwitchName={u} Switches={','.join(g)}" for u, g in zip(uppers, groups, strict=True)]
    topo = Topology(parse_topology("\n".join(lines) + "\n", "t", names), names)
    free = data.draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
    names_all = list(topo.rank)
    count = data.draw(st.integers(1, len(free)))
    fitting = [((1, 0, 0, 0), _N(n, names_all.index(n))) for n in free]
    chosen = topo.pick(fitting, count, frozenset())
    assert chosen is not None and len(chosen) == count and len({n.name for n in chosen}) == count
    assert {n.name for n in chosen} <= set(free)
    assert [topo.rank[n.name] for n in chosen] == sorted(topo.rank[n.name] for n in chosen)  # topology order
    per_leaf = Counter(topo.unit_of[n] for n in free)
    if max(per_leaf.values()) >= count:
        assert topo.units_of([n.name for n in chosen]) == 1
    # never more leaves than the fullest leaves could do it with, within the chosen switch
    assert topo.units_of([n.name for n in chosen]) <= len(per_leaf)


def test_exclusive_topo_takes_a_whole_free_block_and_keeps_the_rest_of_it_idle() -> None:
    h = cluster(BLOCKS)
    h.run_job(job().nodelist("node1").cpus(1).mem(100).time(3600))  # b1 is not wholly free
    topo = h.run_job(job().nodes(2).cpus(1).mem(100).time(600).exclusive_topo(), at=1)
    assert nodes_of(h, topo) == ["node5", "node6"]  # b2, whole nodes
    assert [a.cpus for a in h.running[topo].alloc] == [4, 4]
    # fill b3 and b4: the next 1-node job could only go on node7 or node8, kept idle for b2's job
    h.run_job(job().nodes(8).nodelist(*[f"node{i}" for i in range(9, 17)]).cpus(4).mem(100).time(3600), at=2)
    h.run_job(job().nodes(3).nodelist("node2", "node3", "node4").cpus(4).mem(100).time(3600), at=2)
    late = h.submit(job().cpus(4).mem(100).time(60), at=3)
    d = h.schedule(at=3)
    assert late not in h.started(d) and d.plans[late].start_time == 601  # when b2's job ends
    h.finish(topo)
    assert late in h.started(h.schedule(at=4))


def test_blocks_past_the_last_whole_aggregate_still_take_jobs() -> None:
    three = "BlockName=b1 Nodes=node[1-4]\nBlockName=b2 Nodes=node[5-8]\nBlockName=b3 Nodes=node[9-12]\n"
    h = cluster(three, nodes=12)
    j = h.run_job(job().nodes(12).cpus(4).mem(100).time(600))  # b1-b2 aggregate, and b3 beside it
    assert nodes_of(h, j) == [f"node{i}" for i in range(1, 13)]
    h.finish(j)
    h.run_job(job().nodes(8).nodelist(*[f"node{i}" for i in range(1, 9)]).cpus(4).mem(100).time(600), at=1)
    four = h.run_job(job().nodes(4).cpus(4).mem(100).time(600), at=1)
    assert nodes_of(h, four) == ["node9", "node10", "node11", "node12"]


def test_a_heterogeneous_job_is_planned_by_the_topology_too() -> None:
    def busy(nums: tuple[int, ...], limit: int) -> int:
        names = [f"node{i}" for i in nums]
        return h.run_job(job().nodes(len(names)).nodelist(*names).cpus(4).mem(100).time(limit))

    for topology, leaves in ((None, 2), (TREE, 1)):
        h = cluster(topology)
        busy((1, 2, 7, 8, 13, 14, 15, 16), 3600)
        short = busy((3, 4, 5, 6, 9, 10, 11, 12), 600)
        # at 600, node3-6 (two leaves, a contiguous run) and node9-12 (one leaf) free up
        ids = h.submit_het(job().nodes(4).cpus(4).mem(100).time(600), job().cpus(4).mem(100).time(600), at=1)
        d = h.schedule(at=1)
        assert d.plans[ids[0]].start_time == 600
        tree = Topology(parse_topology(TREE, "t", [v.name for v in h.nodes]), [v.name for v in h.nodes])
        assert tree.units_of(d.plans[ids[0]].nodes) == leaves
        h.finish(short)
        h.schedule(at=600)
        assert tree.units_of(nodes_of(h, ids[0])) == leaves
