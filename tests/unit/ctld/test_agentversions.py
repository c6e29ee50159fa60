"""Registered nodes counted by their agent's version on /metrics (``ctld.agentversions``)."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest

from muster.ctld.agentversions import AgentVersions


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
