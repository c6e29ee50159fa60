"""``muster sim --topology``: the same parser and placement as the controller, and the
fragmentation it reports."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from muster.sim.main import main

TREE = "SwitchName=s0 Nodes=n[1-4]\nSwitchName=s1 Nodes=n[5-8]\nSwitchName=top Switches=s[0-1]\n"
# 8 single-CPU nodes: a 1-node job on n1, then a 4-node job, then two 2-node jobs
ROWS = [(0, 100, 1, 100), (1, 50, 4, 50), (2, 50, 2, 50), (3, 50, 2, 50)]


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main([*args, "--nodes", "8", "--cpus-per-node", "1", "--json", "-"]) == 0
    metrics = json.loads(capsys.readouterr().out)["runs"][0]["metrics"]
    assert isinstance(metrics, dict)
    return metrics


def test_sim_with_a_tree_places_each_job_in_one_leaf_and_reports_the_share(
    write_swf: Callable[..., str], write_text: Callable[[str, str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_swf(ROWS, max_procs=8)
    m = _run([trace, "--topology", write_text("topology.conf", TREE)], capsys)
    assert m["topology_unit"] == "leaf switch"
    assert m["multi_node_jobs"] == 3
    assert m["multi_node_within_one_unit"] == 1.0 and m["units_per_multi_node_job"] == 1.0
    # without the topology the 4-node job takes the contiguous run n2-n5, across both leaves
    assert "topology_unit" not in _run([trace], capsys)


def test_the_table_shows_fragmentation_rows(
    write_swf: Callable[..., str], write_text: Callable[[str, str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_swf(ROWS, max_procs=8)
    assert main([trace, "--nodes", "8", "--cpus-per-node", "1", "--topology", write_text("t.conf", TREE)]) == 0
    out = capsys.readouterr().out
    assert "multi-node jobs" in out and "leaf switches per job (mean)" in out and "share within one leaf switch" in out


def test_blocks_report_blocks(
    write_swf: Callable[..., str], write_text: Callable[[str, str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = write_text("blocks.conf", "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-8]\n")
    m = _run([write_swf(ROWS, max_procs=8), "--topology", blocks], capsys)
    assert m["topology_unit"] == "block" and m["multi_node_within_one_unit"] == 1.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SwitchName=s0 Nodes=n[1-9]\n", "switch 's0' names unknown node 'n9'"),
        ("SwitchName=a Switches=a\n", "switch loop: a -> a"),
    ],
)
def test_a_bad_topology_fails_with_a_clear_message(
    write_swf: Callable[..., str],
    write_text: Callable[[str, str], str],
    capsys: pytest.CaptureFixture[str],
    text: str,
    message: str,
) -> None:
    trace = write_swf(ROWS, max_procs=8)
    assert main([trace, "--nodes", "8", "--cpus-per-node", "1", "--topology", write_text("t.conf", text)]) == 1
    assert message in capsys.readouterr().err


def test_an_unreadable_topology_fails_clearly(
    write_swf: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([write_swf(ROWS, max_procs=8), "--topology", "/nonexistent/topology.conf"]) == 1
    assert "--topology: cannot read /nonexistent/topology.conf" in capsys.readouterr().err


CONF = "NodeName=n[1-8] CPUs=1 RealMemory=1000\nPartitionName=p Nodes=ALL Default=YES\n"


def test_a_conf_with_a_topology_plugin_brings_its_topology_conf(
    write_swf: Callable[..., str], write_text: Callable[[str, str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_swf(ROWS, max_procs=8)
    conf = write_text("slurm.conf", "TopologyPlugin=topology/tree\n" + CONF)
    assert main([trace, "--conf", conf]) == 1  # no topology.conf beside it
    assert "--conf: TopologyPlugin=topology/tree needs: cannot read" in capsys.readouterr().err
    write_text("topology.conf", TREE)
    assert main([trace, "--conf", conf, "--json", "-"]) == 0
    metrics = json.loads(capsys.readouterr().out)["runs"][0]["metrics"]
    assert metrics["topology_unit"] == "leaf switch" and metrics["multi_node_within_one_unit"] == 1.0
    # without the plugin the file beside it is not read
    plain = write_text("plain.conf", CONF)
    assert main([trace, "--conf", plain, "--json", "-"]) == 0
    assert "topology_unit" not in json.loads(capsys.readouterr().out)["runs"][0]["metrics"]
