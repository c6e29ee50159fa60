"""Step grants are used once per node, across restarts, without refusing a new step's grant
signed just before a restart (``protocol.replay.GrantLedger``; no sockets)."""

from __future__ import annotations

import os

import pytest

from muster.protocol.replay import GrantLedger, SignatureError, StaleMessage


def test_a_new_grant_signed_before_a_restart_is_honoured_and_a_used_one_is_not(tmp_path) -> None:  # noqa: ANN001
    path = str(tmp_path / "step-grants")
    first = GrantLedger(path, now=1000.0)
    first.admit((7, 0, 1), issued=1001.0, expires=1301.0, now=1001.0)
    with pytest.raises(SignatureError, match="already launched"):
        first.admit((7, 0, 1), issued=1001.0, expires=1301.0, now=1001.5)
    again = GrantLedger(path, now=1002.0)  # the agent restarted
    # a grant for a step never launched here, signed just before the restart: honoured
    again.admit((7, 0, 2), issued=1001.9, expires=1301.9, now=1002.1)
    # the grant a previous run launched, captured and replayed: refused
    with pytest.raises(SignatureError, match="already launched"):
        again.admit((7, 0, 1), issued=1001.0, expires=1301.0, now=1002.2)
    with pytest.raises(SignatureError, match="already launched"):
        GrantLedger(path, now=1003.0).admit((7, 0, 2), issued=1001.9, expires=1301.9, now=1003.0)


def test_a_grant_from_before_the_ledger_began_is_refused_as_a_floor_would(tmp_path) -> None:  # noqa: ANN001
    ledger = GrantLedger(str(tmp_path / "step-grants"), now=500.0)  # first start: no notes before
    with pytest.raises(StaleMessage) as err:
        ledger.admit((1, 0, 0), issued=499.0, expires=799.0, now=500.0)
    assert err.value.floor == 500.0


def test_expired_notes_are_dropped_and_a_clock_set_back_does_not_revive_their_grants(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "step-grants"
    GrantLedger(str(path), now=100.0).admit((1, 0, 0), issued=100.0, expires=400.0, now=100.0)
    later = GrantLedger(str(path), now=401.0)  # compacted: the expired note is gone
    assert "1 0 0" not in path.read_text()
    back = GrantLedger(str(path), now=150.0)  # the clock was set back
    with pytest.raises(SignatureError, match="expired"):
        back.admit((1, 0, 0), issued=100.0, expires=400.0, now=150.0)
    assert later.pruned == 401.0


def test_a_torn_last_note_is_skipped_and_an_unwritable_ledger_refuses_the_launch(tmp_path) -> None:  # noqa: ANN001
    path = tmp_path / "step-grants"
    GrantLedger(str(path), now=10.0).admit((3, 1, 0), issued=10.0, expires=310.0, now=10.0)
    with open(path, "a") as f:
        f.write("3 1 ")  # a crash while appending: that launch was never accepted
    again = GrantLedger(str(path), now=11.0)
    with pytest.raises(SignatureError, match="already launched"):
        again.admit((3, 1, 0), issued=10.0, expires=310.0, now=11.0)
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    gone = GrantLedger(str(tmp_path / "missing" / "step-grants"), now=20.0)  # every write fails
    with pytest.raises(SignatureError, match="cannot record"):
        gone.admit((4, 0, 0), issued=20.0, expires=320.0, now=20.0)
