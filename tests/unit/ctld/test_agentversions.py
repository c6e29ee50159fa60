"""Registered nodes counted by their agent's version on /metrics (``ctld.agentversions``)."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest

from muster.ctld.agentversions import AgentVersions, ConfigMismatch
from muster.protocol.messages import Heartbeat, Register, dump


def test_registered_nodes_are_counted_by_agent_version() -> None:
    nodes = [
        SimpleNamespace(registered=True, version="0.9.0"),
        SimpleNamespace(registered=True, version="0.9.1"),
        SimpleNamespace(registered=True, version="0.9.1"),
        SimpleNamespace(registered=False, version="0.8.0"),
    ]
    registry = CollectorRegistry()
    registry.register(AgentVersions(lambda: nodes))
    text = generate_latest(registry).decode()
    assert 'muster_agent_versions{version="0.9.0"} 1.0' in text
    assert 'muster_agent_versions{version="0.9.1"} 2.0' in text
    assert "0.8.0" not in text


def test_nodes_whose_config_differs_have_a_series() -> None:
    nodes = [
        SimpleNamespace(name="n1", registered=True, config_mismatch=""),
        SimpleNamespace(name="n2", registered=True, config_mismatch="9c41"),
        SimpleNamespace(name="n3", registered=False, config_mismatch="9c41"),
    ]
    registry = CollectorRegistry()
    registry.register(ConfigMismatch(lambda: nodes))
    text = generate_latest(registry).decode()
    assert 'muster_node_config_mismatch{node="n2"} 1.0' in text
    assert "n1" not in text and "n3" not in text
    assert "# TYPE muster_node_config_mismatch gauge" in text  # the family, even without nodes


def test_a_protocol_2_peer_is_not_sent_the_config_hash() -> None:
    reg = Register(node="n1", config_hash="abc")
    assert dump(reg)["config_hash"] == "abc"
    assert "config_hash" not in dump(reg, 2)
    beat = Heartbeat(node="n1", config_hash="abc")
    assert "config_hash" not in dump(beat, 2)
    assert "config_hash" not in dump(Heartbeat(node="n1"))  # None: not said
