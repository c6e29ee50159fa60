"""topology.conf: the tree and block grammars, and the errors people can act on."""

from __future__ import annotations

import pytest

from muster.core.config import ConfigError, parse_config
from muster.core.topoconf import attach_topology, parse_topology, show_topology, topology_addr

NODES = [f"node{i}" for i in range(1, 17)]

TREE = """\
# four leaves of four nodes, one switch above them
SwitchName=s0 Nodes=node[1-4] LinkSpeed=100
SwitchName=s1 Nodes=node[5-8]
switchname=s2 nodes=node[9-12]
SwitchName=s3 Nodes=node[13-16]
SwitchName=top Switches=s[0-3]
"""


def test_a_two_level_tree_parses_with_its_leaves_and_link_speed() -> None:
    t = parse_topology(TREE, "topology.conf", NODES)
    assert t.plugin == "topology/tree"
    assert [s.name for s in t.switches] == ["s0", "s1", "s2", "s3", "top"]
    assert t.switches[0].nodes == ("node1", "node2", "node3", "node4")
    assert t.switches[0].link_speed == 100
    assert t.switches[4].switches == ("s0", "s1", "s2", "s3")
    assert t.warnings == ()


def test_blocks_parse_with_their_sizes() -> None:
    t = parse_topology("BlockName=b1 Nodes=node[1-8]\nBlockName=b2 Nodes=node[9-16]\nBlockSizes=8,16\n", nodes=NODES)
    assert t.plugin == "topology/block"
    assert [b.name for b in t.blocks] == ["b1", "b2"]
    assert t.block_sizes == (8, 16)


def test_nodes_left_out_are_a_warning() -> None:
    t = parse_topology("SwitchName=s0 Nodes=node[1-4]\n", nodes=NODES)
    assert t.warnings == ("topology.conf: nodes node[5-16] are in no switch",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "SwitchName=s0 Nodes=node[1-4,99]\n",
            "topology.conf:1: switch 's0' names unknown node 'node99'",
        ),
        (
            "SwitchName=s0 Nodes=node[1-4]\nSwitchName=s1 Nodes=node[4-8]\n",
            "topology.conf:2: node 'node4' is under two leaf switches: 's0' and 's1'",
        ),
        (
            "SwitchName=s0 Nodes=node[1-4]\nSwitchName=a Switches=s0,b\nSwitchName=b Switches=a\n",
            "switch loop: a -> b -> a",
        ),
        ("SwitchName=a Switches=a\n", "topology.conf:1: switch loop: a -> a"),
        ("SwitchName=top Switches=s0\n", "topology.conf:1: switch 'top' names unknown switch 's0'"),
        (
            "SwitchName=s0 Nodes=node1\nSwitchName=a Switches=s0\nSwitchName=b Switches=s0\n",
            "topology.conf:3: switch 's0' has two parents: 'a' and 'b'",
        ),
        ("SwitchName=s0 Nodes=node1\nSwitchName=s0 Nodes=node2\n", "duplicate switch 's0' (first defined at line 1)"),
        ("SwitchName=s0\n", "switch 's0' connects nothing"),
        ("SwitchName=s0 Nodes=node1 Switches=s1\n", "has both Nodes and Switches"),
        ("SwitchName=s0 Nodes=node1 LinkSpeed=fast\n", "bad LinkSpeed 'fast'"),
        ("SwitchName=s0 Nodes=node1 Speed=1\n", "topology.conf:1: unknown switch key 'Speed'"),
        ("SwitchName=s0 Nodes=node1\nBlockName=b1 Nodes=node2\n", "not both"),
        (
            "BlockName=b1 Nodes=node[1-4]\nBlockName=b2 Nodes=node[4-8]\n",
            "node 'node4' is in two blocks: 'b1' and 'b2'",
        ),
        ("BlockName=b1 Nodes=node[1-4]\nBlockSizes=4,12\n", "each size must be the one before it times a power of two"),
        ("BlockName=b1 Nodes=node[1-4]\nBlockSizes=0\n", "bad BlockSizes '0'"),
        ("BlockSizes=4\n", "BlockSizes given but no BlockName line"),
        ("NodeName=node1\n", "unknown key 'NodeName'"),
        ("# nothing\n", "the topology is empty"),
        ("SwitchName=s0 Nodes=node[1-\n", "topology.conf:1: bad Nodes"),
    ],
)
def test_bad_files_are_refused_with_a_clear_message(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_topology(text, "topology.conf", NODES)
    assert message in str(err.value)


def test_show_topology_prints_switches_with_their_level_and_nodes() -> None:
    t = parse_topology(TREE, "topology.conf", NODES)
    assert show_topology(t) == [
        "SwitchName=s0 Level=0 LinkSpeed=100 Nodes=node[1-4]",
        "SwitchName=s1 Level=0 LinkSpeed=1 Nodes=node[5-8]",
        "SwitchName=s2 Level=0 LinkSpeed=1 Nodes=node[9-12]",
        "SwitchName=s3 Level=0 LinkSpeed=1 Nodes=node[13-16]",
        "SwitchName=top Level=1 LinkSpeed=1 Nodes=node[1-16] Switches=s[0-3]",
    ]
    assert show_topology(t, "node6") == [show_topology(t)[1], show_topology(t)[4]]
    assert show_topology(t, "s3") == [show_topology(t)[3]]
    assert show_topology(t, "nowhere") == []


def test_show_topology_prints_blocks_and_their_aggregates() -> None:
    text = "".join(f"BlockName=b{i + 1} Nodes=node[{4 * i + 1}-{4 * i + 4}]\n" for i in range(4))
    t = parse_topology(text, nodes=NODES)
    assert show_topology(t) == [
        "BlockName=b1 BlockIndex=0 Nodes=node[1-4] BlockSize=4",
        "BlockName=b2 BlockIndex=1 Nodes=node[5-8] BlockSize=4",
        "BlockName=b3 BlockIndex=2 Nodes=node[9-12] BlockSize=4",
        "BlockName=b4 BlockIndex=3 Nodes=node[13-16] BlockSize=4",
        "AggregatedBlock=b[1-2] BlockIndex=0 Nodes=node[1-8] BlockSize=8",
        "AggregatedBlock=b[3-4] BlockIndex=1 Nodes=node[9-16] BlockSize=8",
        "AggregatedBlock=b[1-4] BlockIndex=0 Nodes=node[1-16] BlockSize=16",
    ]


def test_the_plugin_decides_whether_topology_conf_is_read() -> None:
    conf = parse_config("NodeName=node[1-16] CPUs=4\nPartitionName=p Nodes=ALL\n", "slurm.conf")
    attach_topology(conf, None, "topology.conf")  # no TopologyPlugin: nothing is read
    assert conf.topology is None
    conf.settings["TopologyPlugin"] = "topology/tree"
    with pytest.raises(ConfigError, match="cannot read topology.conf, which TopologyPlugin=topology/tree needs"):
        attach_topology(conf, None, "topology.conf")
    with pytest.raises(ConfigError, match="TopologyPlugin=topology/tree but this file defines blocks"):
        attach_topology(conf, "BlockName=b1 Nodes=node[1-4]\n", "topology.conf")
    attach_topology(conf, "SwitchName=s0 Nodes=node[1-4]\n", "topology.conf")
    assert conf.topology is not None and conf.warnings == ["topology.conf: nodes node[5-16] are in no switch"]
    conf.settings["TopologyPlugin"] = "topology/3d_torus"
    with pytest.raises(ConfigError, match="bad TopologyPlugin 'topology/3d_torus'"):
        attach_topology(conf, "", "topology.conf")


def test_topology_addr_walks_from_the_top_switch_to_the_node() -> None:
    t = parse_topology(
        TREE.replace(
            "SwitchName=top Switches=s[0-3]", "SwitchName=pod Switches=s[0-1]\nSwitchName=top Switches=pod,s[2-3]"
        ),
        nodes=NODES,
    )
    assert topology_addr(t, "node2") == ("top.pod.s0.node2", "switch.switch.switch.node")
    assert topology_addr(t, "node9") == ("top.s2.node9", "switch.switch.node")
    assert topology_addr(parse_topology("SwitchName=s0 Nodes=node1\n", nodes=NODES), "node5") == ("node5", "node")
    assert topology_addr(None, "node1") == ("node1", "node")
