"""Local clusters' addressing: every node its own loopback address, past 250 nodes too."""

from __future__ import annotations

from muster.cluster.local import node_addr


def test_the_first_nodes_keep_their_addresses_and_later_ones_go_to_the_next_block() -> None:
    assert [node_addr(k) for k in (1, 2, 250)] == ["127.0.0.2", "127.0.0.3", "127.0.0.251"]
    assert [node_addr(k) for k in (251, 500, 501, 4096)] == ["127.0.1.2", "127.0.1.251", "127.0.2.2", "127.0.16.97"]


def test_no_two_of_sixteen_thousand_nodes_share_an_address() -> None:
    addrs = [node_addr(k) for k in range(1, 16385)]
    assert len(set(addrs)) == len(addrs)
    assert all(a != "127.0.0.1" and not a.endswith((".0", ".1", ".255")) for a in addrs)
