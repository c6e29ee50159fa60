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


def test_backup_controllers_get_their_own_slurmctldhost_lines_and_addresses(tmp_path) -> None:
    from muster.cluster.local import ClusterShape, render_config
    from muster.core.config import parse_config

    text = render_config(str(tmp_path), ClusterShape(nodes=2, backup_controllers=2), {"AccountingStorageURL": "x"})
    config = parse_config(text, "t.conf")
    assert [addr for _host, addr in config.ctld_addrs] == ["127.0.0.1", "127.1.0.1", "127.1.0.2"]
    assert config.slurmctld_timeout == 10
    assert config.ctld_socket_for(2) == config.ctld_socket + ".2"


def test_muster_up_with_backups_needs_postgresql() -> None:
    from muster.cli.muster import _backup_problem

    assert _backup_problem(0, {}) is None
    assert "needs the PostgreSQL store" in (_backup_problem(1, {}) or "")
    assert "from 0 to 8" in (_backup_problem(9, {"AccountingStorageURL": "postgresql://x"}) or "")
