"""Commands reach the active controller among several (client.failover), on a fake transport."""

from __future__ import annotations

from typing import Any

import pytest

from muster.client import failover
from muster.client.settings import parse_client_settings
from muster.protocol import client
from muster.protocol.client import ApiError, ConnectError

CONF = """
SlurmctldHost=head1(10.0.0.1)
SlurmctldHost=head2(10.0.0.2)
SlurmctldHost=head3(10.0.0.3)
SlurmctldPort=6817
SlurmctldTimeout=1
MessageTimeout=1
StateSaveLocation=/nonexistent
"""


class Fake:
    """Each controller's behaviour, by address: a list of outcomes, one per request."""

    def __init__(self, outcomes: dict[str, list[Any]]) -> None:
        self.outcomes = outcomes
        self.calls: list[tuple[str, str, dict[str, str] | None]] = []

    def __call__(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        addr = kw["address"][0]
        self.calls.append((addr, method, kw.get("headers")))
        todo = self.outcomes[addr]
        outcome = todo.pop(0) if len(todo) > 1 else todo[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


STANDBY = ApiError(503, "Slurm backup controller in standby mode", "standby")
REFUSED = ConnectError("connection refused")
LOST = ConnectError("controller connection failed: reset", sent=True)


@pytest.fixture
def settings(tmp_path: Any, monkeypatch: Any) -> Any:
    failover._last[0] = 0
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # this test's own memory of controllers
    return parse_client_settings(CONF, "t.conf")


def run(settings: Any, fake: Fake, method: str = "GET", path: str = "/v1/jobs") -> Any:
    return failover.call_active(settings, method, path, None, 5.0, lambda s: None)


def test_settings_list_every_controller_primary_first(settings: Any) -> None:
    assert settings.controllers == [("head1", "10.0.0.1"), ("head2", "10.0.0.2"), ("head3", "10.0.0.3")]
    assert settings.ctld_socket_for(2).endswith("musterctld.sock.2")


def test_past_a_dead_primary_and_a_standby_to_the_active_one(settings: Any, monkeypatch: Any) -> None:
    fake = Fake({"10.0.0.1": [REFUSED], "10.0.0.2": [STANDBY], "10.0.0.3": [{"ok": 3}]})
    monkeypatch.setattr(client, "request", fake)
    assert run(settings, fake) == {"ok": 3}
    fake.calls.clear()
    assert run(settings, fake) == {"ok": 3}  # the next request starts where the last answered
    assert [c[0] for c in fake.calls] == ["10.0.0.3"]


def test_rounds_repeat_while_a_backup_takes_over(settings: Any, monkeypatch: Any) -> None:
    fake = Fake({"10.0.0.1": [REFUSED], "10.0.0.2": [STANDBY, STANDBY, {"ok": 2}], "10.0.0.3": [REFUSED]})
    monkeypatch.setattr(client, "request", fake)
    assert run(settings, fake) == {"ok": 2}


def test_no_controller_within_slurmctld_timeout_raises_the_last_error(settings: Any, monkeypatch: Any) -> None:
    fake = Fake({"10.0.0.1": [REFUSED], "10.0.0.2": [STANDBY], "10.0.0.3": [REFUSED]})
    monkeypatch.setattr(client, "request", fake)
    with pytest.raises(ConnectError):
        run(settings, fake)


def test_a_submission_whose_answer_was_lost_is_sent_again_with_the_same_token(settings: Any, monkeypatch: Any) -> None:
    fake = Fake({"10.0.0.1": [LOST], "10.0.0.2": [{"job_id": 7}], "10.0.0.3": [REFUSED]})
    monkeypatch.setattr(client, "request", fake)
    assert run(settings, fake, "POST", "/v1/jobs") == {"job_id": 7}
    tokens = {c[2][failover.REQUEST_HEADER] for c in fake.calls if c[2]}
    assert len(tokens) == 1


def test_another_change_whose_answer_was_lost_is_not_repeated(settings: Any, monkeypatch: Any) -> None:
    fake = Fake({"10.0.0.1": [LOST], "10.0.0.2": [{"ok": True}], "10.0.0.3": [REFUSED]})
    monkeypatch.setattr(client, "request", fake)
    with pytest.raises(ConnectError):
        run(settings, fake, "POST", "/v1/jobs/5/requeue")
    assert [c[0] for c in fake.calls] == ["10.0.0.1"]


def test_an_error_of_the_active_controller_is_its_answer(settings: Any, monkeypatch: Any) -> None:
    fake = Fake({"10.0.0.1": [ApiError(404, "Invalid job id specified", "invalid_job_id")], "10.0.0.2": [{}]})
    monkeypatch.setattr(client, "request", fake)
    with pytest.raises(ApiError, match="Invalid job id"):
        run(settings, fake)


def test_a_long_poll_is_given_its_wait_on_top_of_message_timeout(settings: Any, monkeypatch: Any) -> None:
    seen: list[float] = []

    def fake(method: str, path: str, body: Any = None, **kw: Any) -> Any:
        seen.append(kw["timeout"])
        return {}

    monkeypatch.setattr(client, "request", fake)
    failover.call_active(settings, "POST", "/v1/jobs/4/await", {"wait": 30.0}, 60.0, lambda s: None)
    failover.call_active(settings, "GET", "/v1/jobs", None, 60.0, lambda s: None)
    assert seen == [31.0, 1.0]  # MessageTimeout + the wait; then MessageTimeout
    assert failover.repeatable("POST", "/v1/jobs/4/await") and not failover.repeatable("POST", "/v1/jobs/4/cancel")


HUNG = ConnectError("controller not responding (hung: it accepted but does not answer)", sent=True)


def test_a_hung_controller_is_passed_over_and_remembered_by_the_next_command(settings: Any, monkeypatch: Any) -> None:
    fake = Fake({"10.0.0.1": [HUNG], "10.0.0.2": [{"ok": 2}], "10.0.0.3": [REFUSED]})
    monkeypatch.setattr(client, "request", fake)
    assert run(settings, fake) == {"ok": 2}
    active, hung = failover.recall(settings, 1e12)
    assert active == 1 and list(hung) == [0]
    failover._last[0] = 0  # a new command: only the file remembers
    fake.calls.clear()
    assert run(settings, fake) == {"ok": 2}
    assert [c[0] for c in fake.calls] == ["10.0.0.2"]


def test_hung_controllers_are_tried_last_until_forgotten() -> None:
    assert failover.order(3, None, {}, 100.0, 10.0) == [0, 1, 2]
    assert failover.order(3, 2, {}, 100.0, 10.0) == [2, 0, 1]
    assert failover.order(3, 0, {0: 95.0}, 100.0, 10.0) == [1, 2, 0]
    assert failover.order(3, 0, {0: 85.0}, 100.0, 10.0) == [0, 1, 2]  # long ago: tried first again
    assert failover.order(2, 7, {}, 100.0, 10.0) == [0, 1]  # a stale index from another configuration


def test_the_memory_is_private_and_only_a_hint(settings: Any, tmp_path: Any) -> None:
    import os

    failover.remember(settings, 1, {0: 12.5})
    path = failover.memory_path(settings)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert failover.recall(settings, 100.0) == (1, {0: 12.5})
    assert failover.recall(settings, 10.0) == (1, {})  # a time to come (before a reboot) is ignored
    with open(path, "w") as f:
        f.write("active=x\nhung=junk\n")
    assert failover.recall(settings, 100.0) == (None, {})
    os.chmod(tmp_path, 0o777)  # a directory others may write: its file is not trusted
    try:
        assert failover.recall(settings, 100.0) == (None, {})
    finally:
        os.chmod(tmp_path, 0o700)


def test_one_controller_that_refuses_is_retried_within_message_timeout(monkeypatch: Any, tmp_path: Any) -> None:
    settings = parse_client_settings("SlurmctldHost=head1(10.0.0.1)\nMessageTimeout=5\n", "one.conf")
    fake = Fake({"10.0.0.1": [REFUSED, REFUSED, {"ok": 1}]})
    monkeypatch.setattr(client, "request", fake)
    assert failover.call_active(settings, "POST", "/v1/jobs", {}, 60.0, lambda s: None) == {"ok": 1}
    assert len(fake.calls) == 3
    assert not any(p.name.startswith("muster-ctld") for p in tmp_path.iterdir())


def test_a_credential_made_before_a_takeover_is_made_again_once(settings: Any, monkeypatch: Any) -> None:
    stale = ApiError(401, "Invalid credential: message signed before this daemon's replay floor 5.000", "stale")
    fake = Fake({"10.0.0.1": [stale, {"job_id": 9}], "10.0.0.2": [STANDBY], "10.0.0.3": [REFUSED]})
    monkeypatch.setattr(client, "request", fake)
    made = iter(range(100))
    answer = failover.call_active(settings, "POST", "/v1/jobs", None, 5.0, lambda s: f"cred-{next(made)}")
    assert answer == {"job_id": 9}
    to_active = [c[2] for c in fake.calls if c[0] == "10.0.0.1"]
    assert len(to_active) == 2  # refused once, then accepted: the same request (its token), a new credential
    assert to_active[0][failover.REQUEST_HEADER] == to_active[1][failover.REQUEST_HEADER]
    assert to_active[0]["X-Muster-Credential"] != to_active[1]["X-Muster-Credential"]


def test_a_credential_refused_as_stale_twice_is_the_answer(settings: Any, monkeypatch: Any) -> None:
    stale = ApiError(401, "Invalid credential: message signed before this daemon's replay floor 5.000", "stale")
    fake = Fake({"10.0.0.1": [stale], "10.0.0.2": [STANDBY], "10.0.0.3": [REFUSED]})
    monkeypatch.setattr(client, "request", fake)
    with pytest.raises(ApiError, match="replay floor"):
        failover.call_active(settings, "GET", "/v1/jobs", None, 5.0, lambda s: "cred")
    assert [c[0] for c in fake.calls].count("10.0.0.1") == 2
