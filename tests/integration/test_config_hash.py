"""A muster.conf pushed to one host and not the others is reported (docs/runbook.md, "bad
config pushed"): each agent says the hash of the file it read (``core.confhash``) at
registration and in its heartbeats; the controller logs a node whose file differs from its
own once, in Slurm's words, shows it in ``scontrol show node`` and counts it in /metrics
(``muster_node_config_mismatch{node}``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

import oldrelease
from harness import Harness
from muster.cluster.local import ClusterShape
from muster.core.confhash import config_hash

pytestmark = pytest.mark.integration

SHAPE = ClusterShape(nodes=2, gpus_per_node=0, cpus_per_node=2, mem_per_node=2000)


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = Harness(SHAPE, settings={"MetricsType": "metrics/openmetrics"}, tls=False)
    try:
        yield h
    finally:
        h.down()


def _nodes(h: Harness) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in h.cluster.api("GET", "/v1/nodes")["nodes"]}


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_an_agent_with_another_config_file_is_reported(harness: Harness, request: pytest.FixtureRequest) -> None:
    h = harness
    h.cluster.create(h.shape, h.settings)
    ours = h.cluster.conf_path
    pushed = os.path.join(h.root, "pushed", "muster.conf")  # node2's host got another file
    os.makedirs(os.path.dirname(pushed))
    shutil.copy(ours, pushed)
    with open(pushed, "a") as f:
        f.write("# pushed to node2 only\n")
    with open(ours, "rb") as f:
        ctld_hash = config_hash(f.read())
    with open(pushed, "rb") as f:
        node2_hash = config_hash(f.read())
    oldrelease.spawn_ctld(h, None)
    oldrelease.spawn_agent(h, "node1", None)
    node2 = oldrelease.spawn_agent(h, "node2", None, conf=pushed)
    # The cluster's stop knows its daemons by the cluster's muster.conf on their command
    # line: this one reads another file, so the test stops it itself.
    request.addfinalizer(lambda: _stop(node2))
    logs = ("node1", "node2")
    nodes = oldrelease.wait(
        lambda: (n := _nodes(h))["node2"]["config_mismatch"] and n["node1"]["state"] == "IDLE" and n,
        "node2's muster.conf was never reported",
        h,
        logs=logs,
    )
    assert nodes["node2"]["config_hash"] == node2_hash
    assert nodes["node2"]["config_mismatch"] == ctld_hash
    assert nodes["node1"]["config_hash"] == ctld_hash
    assert nodes["node1"]["config_mismatch"] == ""
    # scontrol show node says it of node2 only
    shown = h.run(["scontrol", "show", "node", "node2"])
    assert shown.returncode == 0, shown.stderr
    assert f"ConfigHash={node2_hash} DiffersFromController={ctld_hash}" in shown.stdout
    shown = h.run(["scontrol", "show", "node", "node1"])
    assert "DiffersFromController" not in shown.stdout
    # /metrics: a series for node2 alone
    cfg = h.cluster.config()
    scraped = subprocess.run(
        ["curl", "-sf", "--unix-socket", cfg.ctld_socket, "http://ctld/metrics"], capture_output=True, text=True
    )
    assert scraped.returncode == 0, scraped.stderr
    metrics = scraped.stdout
    assert re.findall(r"^muster_node_config_mismatch\{.*$", metrics, re.M) == [
        'muster_node_config_mismatch{node="node2"} 1.0'
    ]
    # logged once, in Slurm's words, however many heartbeats follow
    line = (
        f"Node node2 appears to have a different muster.conf than the musterctld "
        f"(hash {node2_hash} vs the controller's {ctld_hash})"
    )
    seen = _nodes(h)["node2"]["last_seen"]
    oldrelease.wait(lambda: _nodes(h)["node2"]["last_seen"] > seen, "node2 sent no heartbeat", h, logs=logs)
    assert oldrelease.log(h, "musterctld").count(line) == 1
    assert "node1 appears" not in oldrelease.log(h, "musterctld")
