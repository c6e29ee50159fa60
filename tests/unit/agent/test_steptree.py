"""The launch tree's relay (``agent.steptree``), its pure parts: which nodes a relaying
agent contacts and where (from the signed grant only), and the frames that name a node."""

from __future__ import annotations

import asyncio

from muster.agent.steptree import Relay, failure_frame, tagged
from muster.protocol.stream import FrameDecoder, frame, json_frame
from muster.protocol.wirejson import loads

GRANT = {
    "step": {
        "nodes": [f"node{i}" for i in range(1, 9)],
        "addrs": [f"10.0.0.{i}" for i in range(1, 9)],
        "ports": [6818 + i for i in range(1, 9)],
    }
}


def relay(tree: list[str], width: int) -> Relay:
    return Relay({"grant": "g"}, GRANT, tree, width, 3.0, None, asyncio.Queue())


def test_a_relay_splits_its_subtree_in_at_most_width_groups() -> None:
    r = relay([f"node{i}" for i in range(2, 9)], 2)
    assert r.children == [["node2", "node3", "node4", "node5"], ["node6", "node7", "node8"]]


def test_addresses_come_from_the_grant_never_from_the_request() -> None:
    r = relay(["node2", "evil"], 2)
    assert r.where["node2"] == ("10.0.0.2", 6820)
    assert "evil" not in r.where  # so it is reported failed, never contacted


def test_a_tagged_frame_carries_the_node_and_its_own_frames() -> None:
    inner = frame(b"o", 3, b"hello\n") + json_frame(b"x", 3, {"code": 0})
    [(kind, task, payload)] = FrameDecoder().feed(tagged("node7", inner))
    assert (kind, task) == (b"t", -1)
    name, _, rest = payload.partition(b"\n")
    assert name == b"node7"
    assert [f[0] for f in FrameDecoder().feed(rest)] == [b"o", b"x"]


def test_a_failure_names_the_node_says_whose_call_it_is_and_ends_its_part() -> None:
    [(_, _, payload)] = FrameDecoder().feed(failure_frame("node6", "no answer within 3 s", True))
    name, _, rest = payload.partition(b"\n")
    frames = FrameDecoder().feed(rest)
    assert name == b"node6"
    assert loads(frames[0][2]) == {"failed": "no answer within 3 s", "judge": True}
    assert frames[1][0] == b"d"
