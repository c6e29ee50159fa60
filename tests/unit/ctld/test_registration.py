"""A node configured larger than its machine is drained at registration with Slurm's reason,
unless its agent emulates it or the site trusts the configuration (config_overrides)."""

from __future__ import annotations

import pathlib

import pytest

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.ctld.controller import Controller
from muster.ctld.store import Store

CONF = """
ClusterName=t
GresTypes=gpu
NodeName=node1 CPUs=16 RealMemory=64000 Gres=gpu:4
NodeName=node2 Sockets=2 CoresPerSocket=8 ThreadsPerCore=2 RealMemory=1000
PartitionName=p Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
# What a machine with enough of everything reports for node1 (musterd --gpu-detect nvidia).
REAL = {"cpus": 16, "sockets": 1, "cores_per_socket": 16, "threads_per_core": 1, "real_memory": 64000, "gpus": 4}


def make(tmp_path: pathlib.Path, extra: str = "") -> Controller:
    ctl = Controller(parse_config(CONF + extra, "t.conf"), Store(str(tmp_path / "m.db")), ManualClock(1000.0))
    ctl.load()
    return ctl


def register(ctl: Controller, node: str = "node1", **changes: object) -> None:
    ctl.agents.register({"node": node, "running": [], "version": "0.2.0", **REAL, **changes})


def test_a_machine_with_enough_is_accepted(tmp_path: pathlib.Path) -> None:
    ctl = make(tmp_path)
    register(ctl, real_memory=64500, cpus=32)  # more than configured is fine, as in Slurm
    node = ctl.nodes["node1"]
    assert node.registered and not node.drain and node.reason == ""
    assert node.version == "0.2.0"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"real_memory": 63999}, "Low RealMemory (reported:63999 < 100.00% of configured:64000)"),
        ({"cpus": 8}, "Low CPUs (reported:8 < configured:16)"),
        ({"gpus": 2}, "gres/gpu count reported lower than configured (2 < 4)"),
    ],
)
def test_a_node_configured_larger_than_its_machine_is_drained_with_slurms_reason(
    tmp_path: pathlib.Path, changes: dict, reason: str
) -> None:
    ctl = make(tmp_path)
    register(ctl, **changes)
    node = ctl.nodes["node1"]
    assert node.drain and node.reason == reason and node.reason_user == "root"
    assert not node.available
    # the drain is kept (in the store too) until an administrator resumes the node
    register(ctl)
    assert ctl.nodes["node1"].drain and ctl.nodes["node1"].reason == reason
    again = make(tmp_path)
    assert again.nodes["node1"].drain and again.nodes["node1"].reason == reason


def test_the_topology_is_checked_where_the_configuration_gives_one(tmp_path: pathlib.Path) -> None:
    ctl = make(tmp_path)
    register(ctl, "node2", cpus=32, sockets=2, cores_per_socket=4, threads_per_core=2, gpus=0)
    assert ctl.nodes["node2"].reason == "Low socket*core*thread count (reported:16 < configured:32)"
    # node1 names no topology: its CPUs alone are compared
    register(ctl, sockets=1, cores_per_socket=1, threads_per_core=1)
    assert not ctl.nodes["node1"].drain


def test_an_emulating_agent_reports_the_configuration_and_is_taken_at_its_word(tmp_path: pathlib.Path) -> None:
    ctl = make(tmp_path)
    register(ctl, real_memory=1, cpus=1, emulated=True)
    assert not ctl.nodes["node1"].drain


def test_config_overrides_trusts_the_configuration(tmp_path: pathlib.Path) -> None:
    ctl = make(tmp_path, "SlurmdParameters=config_overrides\n")
    register(ctl, real_memory=100, cpus=2, gpus=0)
    assert not ctl.nodes["node1"].drain
