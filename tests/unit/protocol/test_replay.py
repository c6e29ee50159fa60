"""The replay guard: once per receiver, ever, restarts included (no sockets)."""

from __future__ import annotations

import pytest

from muster.protocol.replay import ReplayGuard, SignatureError, StaleMessage
from muster.protocol.signing import WrongReceiver, sign_request, verify_request

KEY = b"k" * 32


def test_a_message_accepted_before_a_restart_is_refused_after_it(tmp_path) -> None:
    path = str(tmp_path / "replay-floor")
    first = ReplayGuard(path=path, now=1000.0)
    first.check("n1", 1000.5, 1000.5)
    with pytest.raises(SignatureError, match="replayed"):
        first.check("n1", 1000.5, 1000.6)
    again = ReplayGuard(path=path, now=1001.0)  # the receiver restarted
    with pytest.raises(StaleMessage) as err:
        again.check("n1", 1000.5, 1001.0)
    assert err.value.floor >= 1000.5
    again.check("n2", err.value.floor + 0.001, 1001.0)  # an honest sender signs at the floor


def test_the_floor_is_written_once_per_step_not_per_message(tmp_path) -> None:
    path = tmp_path / "replay-floor"
    guard = ReplayGuard(path=str(path), now=0.0, step=2.0)
    guard.check("a", 10.0, 10.0)
    assert float(path.read_text()) == 12.0
    guard.check("b", 11.0, 11.0)
    assert float(path.read_text()) == 12.0
    guard.check("c", 12.5, 12.5)
    assert float(path.read_text()) == 14.5


def test_a_missing_floor_file_starts_at_the_receivers_clock(tmp_path) -> None:
    guard = ReplayGuard(path=str(tmp_path / "replay-floor"), now=500.0)
    with pytest.raises(StaleMessage):
        guard.check("n", 499.0, 500.0)


def test_a_message_for_one_node_is_refused_by_another() -> None:
    headers = sign_request(KEY, "GET", "/v1/status", b"", 100.0, sender="ctld", receiver="node1")
    with pytest.raises(WrongReceiver, match="addressed to node1, not to node2"):
        verify_request(KEY, "GET", "/v1/status", b"", headers, 100.0, ReplayGuard(), "node2")
    assert verify_request(KEY, "GET", "/v1/status", b"", headers, 100.0, ReplayGuard(), "node1") == "ctld"


def test_the_names_are_signed() -> None:
    headers = sign_request(KEY, "GET", "/v1/status", b"", 100.0, sender="ctld", receiver="node1")
    headers["x-muster-to"] = "node2"
    with pytest.raises(SignatureError, match="bad signature"):
        verify_request(KEY, "GET", "/v1/status", b"", headers, 100.0, ReplayGuard(), "node2")


def test_a_floor_that_cannot_be_written_refuses_nothing_new_and_a_restart_starts_at_the_clock(tmp_path) -> None:
    path = tmp_path / "sub" / "replay-floor"  # its directory is missing: every write fails
    guard = ReplayGuard(path=str(path), now=100.0)
    guard.check("a", 100.5, 100.5)  # accepted: a full disk must not cut the daemons off
    with pytest.raises(SignatureError, match="replayed"):
        guard.check("a", 100.5, 100.6)
    again = ReplayGuard(path=str(path), now=101.0)  # restarted, nothing was persisted
    with pytest.raises(StaleMessage):
        again.check("a", 100.5, 101.0)  # still refused: signed before the restart
