"""The wire's golden messages (tests/fixtures/wire/): today's readers take muster 0.2.0's
messages (protocol 2), muster 0.2.0's readers (its messages.py, run as it was) take what
today's writers send to a peer of protocol 2, and today's writers still write the pinned
protocol 3 messages. Then the protocol check that comes before any signature."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from muster.protocol import messages, versions
from muster.protocol.replay import ReplayGuard
from muster.protocol.signing import CTLD, ProtocolMismatch, SignatureError, sign_request, verify_request

WIRE = Path(__file__).resolve().parents[2] / "fixtures" / "wire"
V020 = "22f68a7"  # muster 0.2.0 (docs/decisions/0002-versions.md)
OLD_SOURCE = WIRE / "protocol2" / "messages.py.txt"


def _fixtures(protocol: int) -> list[tuple[str, dict[str, Any]]]:
    files = sorted((WIRE / f"protocol{protocol}").glob("*.json"))
    assert files, f"no fixtures for protocol {protocol}"
    return [(f.stem, json.loads(f.read_text())) for f in files]


# Messages 0.2.0's agents read without a model: the keys their handlers read (``/v1/register``
# was new in protocol 3: a 0.2.0 agent answers 404 and registers at its next contact).
OLD_DICT_READERS = {
    "StepSignalRequest": {"job_id", "attempt", "step_id", "signal", "kill"},
    "RegisterAgainRequest": set(),
}


# Messages of routes a protocol 2 agent does not have: never sent to one (``ROUTE_SINCE``).
NEW_ROUTES = {"AllocationRequest": "/v1/allocation"}


def _strip(value: Any) -> Any:
    """``value`` without its ``None`` values (a writer may leave them out or say them)."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_strip(v) for v in value]
    return value


def _model(module: Any, name: str) -> Any:
    return getattr(module, name.split("-")[0])


@pytest.fixture(scope="module")
def old() -> ModuleType:
    """muster 0.2.0's protocol/messages.py as a module of its own."""
    spec = importlib.util.spec_from_loader("muster_v020_messages", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the annotations through it
    try:
        exec(compile(OLD_SOURCE.read_text(), str(OLD_SOURCE), "exec"), module.__dict__)  # noqa: S102
        yield module
    finally:
        del sys.modules[spec.name]


def test_the_stored_old_messages_module_is_v020s() -> None:
    """The copy is the file at v0.2.0's commit (where the clone has it)."""
    root = Path(__file__).resolve().parents[3]
    try:
        text = subprocess.run(
            ["git", "show", f"{V020}:src/muster/protocol/messages.py"],
            cwd=root,
            capture_output=True,
            check=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"commit {V020} is not in this clone")
    assert text == OLD_SOURCE.read_text()


@pytest.mark.parametrize(("name", "body"), _fixtures(2), ids=lambda v: v if isinstance(v, str) else "")
def test_todays_readers_take_v020s_messages(name: str, body: dict[str, Any]) -> None:
    msg = messages.read(_model(messages, name), body)
    # and what is read is what was said (nothing of 0.2.0's is lost on the way in)
    assert _strip(messages.dump(msg, 2)) == _strip(body)


@pytest.mark.parametrize(("name", "body"), _fixtures(3), ids=lambda v: v if isinstance(v, str) else "")
def test_todays_writers_write_the_pinned_protocol_3(name: str, body: dict[str, Any]) -> None:
    msg = messages.read(_model(messages, name), body)
    written = json.loads(json.dumps(messages.dump(msg)))
    assert written == body, (
        f"{name} is written differently from its protocol 3 fixture: a wire change. A new field "
        "needs a `since` entry (older peers are not sent it) and the fixtures made again: "
        ".venv/bin/python tests/fixtures/wire/capture.py tests/fixtures/wire/protocol3 (tests/fixtures/wire/README.md)"
    )


@pytest.mark.parametrize(("name", "body"), _fixtures(3), ids=lambda v: v if isinstance(v, str) else "")
def test_v020s_readers_take_what_today_writes_to_protocol_2(name: str, body: dict[str, Any], old: Any) -> None:
    msg = messages.read(_model(messages, name), body)
    if name in NEW_ROUTES:  # the controller does not send it to a protocol 2 agent at all
        assert versions.ROUTE_SINCE[NEW_ROUTES[name]] > 2
        return
    sent = json.loads(json.dumps(messages.dump(msg, 2)))
    if name in OLD_DICT_READERS:  # 0.2.0 read it as a dict: the keys its handler read are there
        assert OLD_DICT_READERS[name] <= set(sent)
        return
    read = old.read(_model(old, name), sent)
    assert read is not None


def test_without_the_gate_v020_would_refuse_a_registration(old: Any) -> None:
    """The gate matters: protocol 3's registration names fields 0.2.0 refuses."""
    body = dict(_fixtures(3))["Register"]
    with pytest.raises(old.MessageError, match="Extra inputs are not permitted"):
        old.read(old.Register, body)
    assert "sockets" not in messages.dump(messages.read(messages.Register, body), 2)


def test_unknown_fields_from_a_newer_peer_are_ignored() -> None:
    body = dict(_fixtures(3))
    register = messages.read(messages.Register, {**body["Register"], "from_protocol_4": {"x": 1}})
    assert register.node == "gpu1" and "from_protocol_4" not in messages.dump(register)
    launch = body["LaunchRequest"]
    newer = {**launch, "job": {**launch["job"], "spec": {**launch["job"]["spec"], "new_option": True}}}
    assert messages.read(messages.LaunchRequest, newer).job.spec.name == "train"


def test_a_launch_job_travels_with_its_none_values() -> None:
    """0.2.0's agents read a job's keys as ``Job.to_dict()`` wrote them, ``None`` included."""
    body = dict(_fixtures(2))["LaunchRequest"]
    sent = messages.dump(messages.read(messages.LaunchRequest, body), 2)
    assert sent["job"]["spec"]["stdin"] is None and sent["job"]["end_time"] is None
    assert "ctld" not in sent  # a request's own None fields stay the reader's default
    job = messages.read(messages.LaunchRequest, body).job.model_dump()
    assert set(body["job"]) <= set(job) and set(body["job"]["spec"]) <= set(job["spec"])


# --- the protocol check, before the signature -----------------------------------------


KEY = b"k" * 32


def _signed(protocol: str | None, sender: str = "gpu1", receiver: str = CTLD) -> dict[str, str]:
    head = sign_request(KEY, "POST", "/v1/agent/register", b"{}", time.time(), sender=sender, receiver=receiver)
    del head[versions.PROTOCOL_HEADER]
    if protocol is not None:
        head[versions.PROTOCOL_HEADER] = protocol
        head[versions.VERSION_HEADER] = "0.1.0"
    return head


def _verify(head: dict[str, str], me: str = CTLD) -> str:
    return verify_request(KEY, "POST", "/v1/agent/register", b"{}", head, time.time(), ReplayGuard(), me)


def test_every_signed_request_says_its_protocol() -> None:
    head = sign_request(KEY, "POST", "/x", b"", time.time(), sender="gpu1", receiver=CTLD)
    assert head[versions.PROTOCOL_HEADER] == str(versions.PROTOCOL)
    assert head[versions.VERSION_HEADER] == versions.build()


def test_peers_in_the_window_are_accepted_with_or_without_the_header() -> None:
    assert _verify(_signed(None)) == "gpu1"  # muster 0.2.0 sent none: protocol 2
    assert _verify(_signed(str(versions.MIN_PROTOCOL))) == "gpu1"
    assert _verify(_signed(str(versions.PROTOCOL))) == "gpu1"


def test_an_old_agent_is_told_to_upgrade_not_that_its_signature_is_wrong() -> None:
    with pytest.raises(ProtocolMismatch) as info:
        _verify(_signed("1"))
    text = str(info.value)
    assert text == (
        f"agent gpu1 speaks protocol 1 (muster 0.1.0), this controller {versions.MIN_PROTOCOL}.."
        f"{versions.MAX_PROTOCOL} (muster {versions.build()}): upgrade the agent"
    )
    assert "signature" not in text


def test_a_v010_daemon_is_told_it_is_too_old() -> None:
    """muster 0.1.0 signed without naming sender and receiver, and said no protocol."""
    head = _signed(None)
    del head["x-muster-from"], head["x-muster-to"]
    with pytest.raises(
        ProtocolMismatch, match=r"^daemon speaks protocol 1 \(muster 0\.1\.0\), this controller .*: upgrade the daemon$"
    ):
        _verify(head)


def test_a_newer_controller_is_refused_by_this_agent_saying_which_side_to_upgrade() -> None:
    with pytest.raises(ProtocolMismatch, match=r"^controller speaks protocol 99 .*: upgrade this agent$"):
        _verify(_signed("99", sender=CTLD, receiver="gpu1"), me="gpu1")
    with pytest.raises(ProtocolMismatch, match="speaks protocol 0"):
        _verify(_signed("three"))


def test_the_protocol_header_is_not_a_way_around_the_signature() -> None:
    head = _signed(str(versions.PROTOCOL))
    head["x-muster-signature"] = hashlib.sha256(b"forged").hexdigest()
    with pytest.raises(SignatureError, match="bad signature"):
        _verify(head)


def test_a_heterogeneous_jobs_components_are_written_for_the_peers_protocol_too() -> None:
    launch = dict(_fixtures(3))["LaunchRequest"]
    component = {**launch["job"], "job_id": 4243}
    leader = {**launch["job"], "het_job_id": 4242, "het_components": [launch["job"], component]}
    msg = messages.read(messages.LaunchRequest, {**launch, "job": leader})
    old = messages.dump(msg, 2)["job"]
    assert "mail_type" not in old["spec"] and all("mail_type" not in c["spec"] for c in old["het_components"])
    new = messages.dump(msg, 3)["job"]
    assert [c["spec"]["mail_type"] for c in new["het_components"]] == [["END", "FAIL"]] * 2
    assert new["het_components"][1]["job_id"] == 4243 and new["het_components"][0]["spec"]["stdin"] is None
