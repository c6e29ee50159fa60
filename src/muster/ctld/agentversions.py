"""Which agent versions the registered nodes run, for ``/metrics``: during a rolling upgrade
several, for a while; for long, an upgrade that stopped half-way (docs/runbook.md).

``AgentVersions`` is a Prometheus collector in the controller's registry: at each scrape,
``muster_agent_versions{version}`` counts the registered nodes whose agent reported that
version when it registered (``NodeRuntime.version``, what ``scontrol show node`` prints as
``Version=``). One pass over the nodes per scrape, as the other node figures.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["AgentVersions", "ConfigMismatch"]


class AgentVersions(Collector):
    def __init__(self, nodes: Callable[[], Iterable[Any]]) -> None:
        self.nodes = nodes

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = Counter(n.version or "unknown" for n in self.nodes() if n.registered)
        fam = GaugeMetricFamily(
            "muster_agent_versions", "Registered nodes by the version their agent runs", labels=["version"]
        )
        for version, count in sorted(counts.items()):
            fam.add_metric([version], count)
        yield fam


class ConfigMismatch(Collector):
    """``muster_node_config_mismatch{node}`` 1 for each registered node whose agent runs a
    muster.conf other than the controller's (``Agents.check_config``); nodes that agree,
    or do not say (muster 0.2.0), have no series. The alert ``MusterNodeConfigMismatch``
    (deploy/prometheus/muster-alerts.yml) fires on it."""

    def __init__(self, nodes: Callable[[], Iterable[Any]]) -> None:
        self.nodes = nodes

    def collect(self) -> Iterator[GaugeMetricFamily]:
        fam = GaugeMetricFamily(
            "muster_node_config_mismatch",
            "1: the node's agent runs a muster.conf that differs from the controller's",
            labels=["node"],
        )
        for node in self.nodes():
            if node.registered and node.config_mismatch:
                fam.add_metric([node.name], 1)
        yield fam
