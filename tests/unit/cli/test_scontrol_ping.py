"""scontrol ping: one line per controller in Slurm's words, the active one marked."""

from __future__ import annotations

from typing import Any

import pytest

from muster.cli import scontrol_ha
from muster.client.settings import parse_client_settings
from muster.protocol import client
from muster.protocol.client import ApiError, ConnectError

CONF = "".join(f"SlurmctldHost=head{i}(10.0.0.{i})\n" for i in range(1, 4)) + "StateSaveLocation=/nonexistent\n"


@pytest.fixture
def answers(monkeypatch: Any) -> dict[str, Any]:
    by_addr: dict[str, Any] = {}

    def fake(method: str, path: str, body: Any = None, **kw: Any) -> Any:
        outcome = by_addr[kw["address"][0]]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(client, "request", fake)
    monkeypatch.setattr(scontrol_ha, "user_credential", lambda settings: None)
    return by_addr


def test_the_active_controller_is_marked_and_a_refusal_is_an_answer(answers: dict[str, Any]) -> None:
    answers.update(
        {
            "10.0.0.1": ConnectError("connection refused"),
            "10.0.0.2": ApiError(401, "Authentication failure: no credential", "auth"),  # up, active
            "10.0.0.3": {"ok": True, "mode": "standby"},
        }
    )
    lines, up = scontrol_ha.ping_lines(parse_client_settings(CONF, "t.conf"))
    assert lines == [  # with three controllers, Slurm numbers the backups
        "Slurmctld(primary) at head1 is DOWN",
        "Slurmctld(backup1) at head2 is UP (active)",
        "Slurmctld(backup2) at head3 is UP",
    ]
    assert up == 2


def test_one_controller_prints_slurms_line_alone(answers: dict[str, Any]) -> None:
    answers["10.0.0.1"] = {"ok": True}
    lines, up = scontrol_ha.ping_lines(parse_client_settings("SlurmctldHost=head1(10.0.0.1)\n", "t.conf"))
    assert lines == ["Slurmctld(primary) at head1 is UP"] and up == 1
