"""Host certificates (``TLSType=tls/muster``): one agent process hosting several nodes sends
their heartbeats in one request over its host certificate, which names the nodes it may
speak for; the controller refuses, over that certificate, any node it does not name.

Four nodes in two agent processes: host A hosts node[1-2], host B node[3-4]. The attacker
holds the cluster key and host A's certificate (a stolen host)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from harness import Harness, wait_for
from muster.cluster.local import ClusterShape
from muster.protocol.tls import client_context
from security.test_tls import addr_of, https, log_of, signed, wait_for_line

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def racks() -> Iterator[Harness]:
    h = Harness(
        ClusterShape(nodes=4, gpus_per_node=1, cpus_per_node=2, mem_per_node=4000, nodes_per_agent=2),
        settings={"SlurmdTimeout": "5"},
        tls=True,
    )
    h.up()
    try:
        yield h
    finally:
        h.down()


def host_a(h: Harness):  # type: ignore[no-untyped-def]
    tls = h.cluster.config().tls
    return client_context(tls.ca_cert, tls.host("node[1-2]"))


def batch(*nodes: str) -> bytes:
    return json.dumps({"heartbeats": [{"node": n, "running": []} for n in nodes]}).encode()


def post(h: Harness, body: bytes, sender: str, path: str = "/v1/agent/heartbeats") -> tuple[int, dict]:  # type: ignore[type-arg]
    headers = signed(h, "POST", path, body, sender, "ctld")
    return https(host_a(h), addr_of(h, "ctld"), "ctld", "POST", path, body, headers)


def test_the_agents_heartbeat_in_one_request_per_process_over_tls(racks: Harness) -> None:
    h = racks
    assert set(h.node_states().values()) == {"IDLE"}
    for agent in h.cluster.agents():
        assert "no host certificate" not in log_of(h, agent)

    def batched() -> str | None:  # two heartbeat intervals (SlurmdTimeout/5 = 1 s) or more
        diag = h.run(["sdiag"]).stdout
        batches = re.search(r"POST /v1/agent/heartbeats\s+\(\s*0\)\s+count:(\d+)", diag)
        return diag if batches is not None and int(batches.group(1)) >= 2 else None

    diag = wait_for(batched, 30, interval=0.2, what="two batched heartbeats in sdiag")
    single = re.search(r"POST /v1/agent/heartbeat\s+\(\s*0\)\s+count:(\d+)", diag)
    assert single is None, diag  # no node heartbeats alone


def test_host_a_heartbeats_for_its_own_nodes(racks: Harness) -> None:
    status, answer = post(racks, batch("node1", "node2"), "node[1-2]")
    assert status == 200 and len(answer["answers"]) == 2 and all("status" not in a for a in answer["answers"])


def test_host_a_cannot_heartbeat_for_a_node_of_host_b(racks: Harness) -> None:
    h = racks
    before = len(log_of(h, "ctld"))
    # signed (with the stolen key) as a sender naming node3 too: the certificate does not
    status, answer = post(h, batch("node1", "node3"), "node[1,3]")
    assert status == 401 and "client certificate names node[1-2]" in answer["error"], answer
    line = wait_for_line(h, "ctld", "client certificate names node[1-2]", before)
    assert "sender node[1,3]" in line
    # signed as host A's nodes, carrying node3's heartbeat: the sender does not name node3
    status, answer = post(h, batch("node1", "node3"), "node[1-2]")
    assert status == 401 and "speaks for node node3" in answer["error"], answer
    # alone, as node3
    body = json.dumps({"node": "node3", "running": []}).encode()
    status, answer = post(h, body, "node3", path="/v1/agent/heartbeat")
    assert status == 401 and "client certificate names node[1-2]" in answer["error"], answer
