"""scontrol reconfigure's controller side and the node's host name on the wire."""

from __future__ import annotations

import pathlib

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.errors import InvalidRequest
from muster.ctld.controller import Controller
from muster.ctld.reconfig import differences, reread
from muster.ctld.store import Store
from muster.ctld.wire import node_wire

CONF = """\
ClusterName=t
SlurmdTimeout=10
NodeName=node[1-2] NodeAddr=127.0.0.[2-3] CPUs=4 RealMemory=1000
NodeName=node3 NodeHostname=h3 CPUs=4 RealMemory=1000
PartitionName=p Nodes=ALL Default=YES State=UP
"""


def test_a_file_as_it_was_changes_nothing(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "muster.conf"
    path.write_text(CONF)
    running = parse_config(CONF, str(path))
    assert reread(running) == {"changed": []}


def test_changed_settings_nodes_and_partitions_are_named(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "muster.conf"
    text = CONF.replace("SlurmdTimeout=10", "SlurmdTimeout=5\nMinJobAge=30").replace(
        "CPUs=4 RealMemory", "CPUs=8 RealMemory", 1
    )
    path.write_text(text)
    running = parse_config(CONF, str(path))
    # a partition counts its nodes' CPUs: it changes with them
    assert reread(running) == {"changed": ["MinJobAge", "SlurmdTimeout", "NodeName", "PartitionName"]}
    assert differences(running, parse_config(CONF.replace("State=UP", "State=DOWN"), "x")) == ["PartitionName"]


def test_a_file_that_no_longer_parses_is_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "muster.conf"
    path.write_text(CONF + "SlurmdTimeout=soon\n")
    running = parse_config(CONF, str(path))
    with pytest.raises(InvalidRequest, match="SlurmdTimeout"):
        reread(running)
    path.unlink()
    with pytest.raises(InvalidRequest, match="Unable to read"):
        reread(running)


def test_node_host_name_defaults_to_the_node_name_not_its_address(tmp_path: pathlib.Path) -> None:
    ctl = Controller(parse_config(CONF, "t.conf"), Store(str(tmp_path / "m.db")), ManualClock(1000.0))
    ctl.load()
    wires = {n: node_wire(ctl.nodes[n], []) for n in ctl.nodes}
    assert wires["node1"]["hostname"] == "node1" and wires["node1"]["addr"] == "127.0.0.2"
    assert wires["node3"]["hostname"] == "h3"
