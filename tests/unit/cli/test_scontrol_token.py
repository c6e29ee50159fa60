"""``scontrol token``'s arguments, and what it prints from the controller's answer."""

from __future__ import annotations

import pytest

from muster.cli import scontrol, scontrol_token
from muster.cli.common import CommandError


def test_arguments_are_read_case_blind() -> None:
    assert scontrol_token.parse_token_args([]) == {}
    assert scontrol_token.parse_token_args(["Lifespan=60", "USERNAME=alice"]) == {"lifespan": 60, "username": "alice"}


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["lifespan=0"], "Invalid lifespan: 0"),
        (["lifespan=-5"], "Invalid lifespan: -5"),
        (["lifespan=1h"], "Invalid lifespan: 1h"),
        (["username="], "Invalid username"),
        (["user=alice"], "Invalid token option: user=alice"),
        (["lifespan"], "Invalid token option: lifespan"),
    ],
)
def test_bad_arguments_are_named(words: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        scontrol_token.parse_token_args(words)


def test_prints_slurm_jwt_for_export(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    sent = {}

    class Controller:
        def post(self, path: str, body: object) -> dict:
            sent.update(path=path, body=body)
            return {"token": "a.b.c", "user": "alice", "lifespan": 60}

    monkeypatch.setattr(scontrol_token, "connect", lambda prog: Controller())
    assert scontrol.main(["token", "lifespan=60"]) == 0
    assert capsys.readouterr().out == "SLURM_JWT=a.b.c\n"
    assert sent == {"path": "/v1/token", "body": {"lifespan": 60}}


def test_a_refusal_is_slurms_message(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from muster.protocol.client import ApiError

    class Controller:
        def post(self, path: str, body: object) -> dict:
            raise ApiError(403, "Unable to fetch JWT token: Access/permission denied", "permission_denied")

    monkeypatch.setattr(scontrol_token, "connect", lambda prog: Controller())
    assert scontrol.main(["token", "username=bob"]) == 1
    assert capsys.readouterr().err == "scontrol: error: Unable to fetch JWT token: Access/permission denied\n"
