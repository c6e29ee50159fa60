"""Containment per node: sinfo's ``%K`` / ``-O Containment`` and scontrol show node's
``Containment=`` (muster's own field; docs/containment.md)."""

from __future__ import annotations

from muster.cli import sinfo
from muster.cli.scontrol_records import node_record
from muster.slurm.sinfo_fields import node_keys

NOW = 1796227645.0


def _lines(parts: list[dict], nodes: list[dict], argv: list[str]) -> list[str]:
    req = sinfo.parse_args(argv, {})
    assert isinstance(req, sinfo.Request)
    return sinfo.report_lines(parts, nodes, req, NOW)


def test_sinfo_shows_each_nodes_containment_and_splits_rows_by_it(partitions, nodes) -> None:
    for n in nodes:
        n["containment"] = "cgroup/v1:freezer,memory"
    nodes[1]["containment"] = "none"
    got = _lines(partitions, nodes, ["-N", "-p", "gpu", "-o", "%N %K"])
    assert got[0].split() == ["NODELIST", "CONTAINMENT"]
    rows = {line.split()[0]: line.split()[1] for line in got[1:]}
    assert rows["node2"] == "none"
    assert rows["node1"] == "cgroup/v1:freezer,memory"
    named = _lines(partitions, nodes, ["-N", "-p", "gpu", "-O", "NodeList,Containment:40"])
    assert named[0].split() == ["NODELIST", "CONTAINMENT"]
    assert "containment" in node_keys(["K"])


def test_a_node_that_did_not_say_shows_na(partitions, nodes) -> None:
    got = _lines(partitions, nodes, ["-N", "-p", "gpu", "-h", "-o", "%N %K"])
    assert all(line.split()[1] == "N/A" for line in got)


def test_scontrol_show_node_says_containment_when_known(nodes) -> None:
    nodes[0]["containment"] = "cgroup/v2:freeze,memory,devices(ebpf)"
    assert "Containment=cgroup/v2:freeze,memory,devices(ebpf)" in node_record(nodes[0])
    nodes[0]["containment"] = ""
    assert not [line for line in node_record(nodes[0]) if line.startswith("Containment=")]
