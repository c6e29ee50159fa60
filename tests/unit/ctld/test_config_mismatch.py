"""A node whose agent read another muster.conf than the controller (``Agents.check_config``):
kept for ``scontrol show node`` and /metrics, logged once per node and change."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from muster.core.clock import ManualClock
from muster.core.confhash import config_hash
from muster.core.config import parse_config
from muster.ctld.controller import Controller
from muster.ctld.store import Store

CONF = """ClusterName=t
NodeName=node[1-2] CPUs=4 RealMemory=4000
PartitionName=p Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
LINE = "Node node1 appears to have a different muster.conf than the musterctld"


def _controller(tmp_path: Path) -> tuple[Controller, str]:
    path = tmp_path / "muster.conf"
    path.write_text(CONF)
    ctl = Controller(parse_config(CONF, str(path)), Store(str(tmp_path / "m.db")), ManualClock(1000.0))
    ctl.load()
    return ctl, config_hash(CONF.encode())


def test_a_differing_config_is_kept_and_logged_once_per_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ctl, ours = _controller(tmp_path)
    caplog.set_level(logging.INFO, "musterctld")
    ctl.agents.register({"node": "node1", "config_hash": ours}, protocol=3)
    node = ctl.nodes["node1"]
    assert (node.config_hash, node.config_mismatch) == (ours, "")
    for _ in range(3):  # the same other file, heartbeat after heartbeat: one line
        ctl.agents.heartbeat({"node": "node1", "config_hash": "aaaa"})
    assert (node.config_hash, node.config_mismatch) == ("aaaa", ours)
    assert caplog.text.count(f"{LINE} (hash aaaa vs the controller's {ours})") == 1
    ctl.agents.heartbeat({"node": "node1", "config_hash": "bbbb"})  # another change: logged
    assert caplog.text.count(f"{LINE} (hash bbbb vs the controller's {ours})") == 1
    ctl.agents.heartbeat({"node": "node1"})  # a heartbeat that does not say changes nothing
    assert node.config_mismatch == ours
    ctl.agents.heartbeat({"node": "node1", "config_hash": ours})
    assert node.config_mismatch == ""
    assert "node node1: its muster.conf is the controller's again" in caplog.text
    assert caplog.text.count(LINE) == 2


def test_an_agent_that_does_not_say_is_not_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ctl, ours = _controller(tmp_path)
    caplog.set_level(logging.INFO, "musterctld")
    ctl.agents.register({"node": "node2", "config_hash": "aaaa"}, protocol=3)
    assert ctl.nodes["node2"].config_mismatch == ours
    ctl.agents.register({"node": "node2", "version": "0.1.0"}, protocol=2)  # a 0.2.0 agent now
    assert (ctl.nodes["node2"].config_hash, ctl.nodes["node2"].config_mismatch) == ("", "")
    assert "again" not in caplog.text  # nothing known of its file: no news either way
