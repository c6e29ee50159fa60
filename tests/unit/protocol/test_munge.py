"""protocol.munge without munged: AuthInfo's socket, the payload checks and the replay guard
(a stand-in decoder gives what munged would; tests/integration/test_login_munge.py runs the
real daemons)."""

from __future__ import annotations

import hashlib

import pytest

from muster.core.config import Config, ConfigError, parse_config
from muster.ctld.usercred import UserCredentials
from muster.protocol import munge
from muster.protocol.replay import ReplayGuard, SignatureError
from muster.protocol.signing import make_credential

NOW = 1_800_000_000.25


class FakeDecoder(munge.MungeDecoder):
    """What munged would answer: ``payloads`` maps a credential to (uid, gid, payload, stamp)."""

    def __init__(self, payloads: dict[str, tuple[int, int, str, int]]) -> None:
        self.socket = "/nonexistent"
        self.payloads = payloads

    def decode(self, cred: str) -> munge.Decoded:
        if cred not in self.payloads:
            raise munge.MungeError("invalid credential (not sealed with this cluster's munge.key, or tampered with)")
        uid, gid, payload, stamp = self.payloads[cred]
        return munge.Decoded(uid, gid, payload.encode(), stamp, "10.0.0.5")


def test_auth_info_names_the_socket_else_munges_default() -> None:
    assert munge.socket_path(None) == munge.DEFAULT_SOCKET
    assert munge.socket_path("") == munge.DEFAULT_SOCKET
    assert munge.socket_path("ttl=60,socket=/run/m.sock") == "/run/m.sock"
    assert munge.socket_path("Socket=/x") == "/x"


def test_without_a_munged_socket_there_is_no_credential(tmp_path) -> None:  # noqa: ANN001
    assert munge.encode(str(tmp_path / "none.sock"), "c", NOW) is None


def test_a_good_credential_gives_its_uid_once() -> None:
    cred = "MUNGE:good:"
    decoder = FakeDecoder({cred: (1234, 99, munge.payload("c1", NOW), int(NOW))})
    guard = ReplayGuard()
    got = munge.verify(decoder, cred, "c1", NOW + 1, guard)
    assert (got.uid, got.gid, got.origin) == (1234, 99, "10.0.0.5")
    with pytest.raises(SignatureError, match="replayed message"):  # munged forgot it: the guard did not
        munge.verify(decoder, cred, "c1", NOW + 2, guard)


@pytest.mark.parametrize(
    ("payload", "stamp", "now", "why"),
    [
        ("", int(NOW), NOW, "not a muster credential"),
        ("slurm:c1:1.0", int(NOW), NOW, "not a muster credential"),
        (munge.payload("c2", NOW), int(NOW), NOW, "made for cluster 'c2', not 'c1'"),
        ("muster-user-v1:c1:soon", int(NOW), NOW, "malformed credential time"),
        (munge.payload("c1", NOW - 60), int(NOW), NOW, "time is not its own"),
        (munge.payload("c1", NOW + 5), int(NOW), NOW, "time is not its own"),
        (munge.payload("c1", NOW + 2.1), int(NOW), NOW, "time is not its own"),
        (munge.payload("c1", NOW), int(NOW), NOW + 3600, "outside the allowed window"),
    ],
)
def test_a_credential_is_refused_saying_why(payload: str, stamp: int, now: float, why: str) -> None:
    decoder = FakeDecoder({"MUNGE:x:": (0, 0, payload, stamp)})
    with pytest.raises(SignatureError, match=why):
        munge.verify(decoder, "MUNGE:x:", "c1", now, ReplayGuard())


def test_a_credential_from_before_the_replay_floor_is_refused(tmp_path) -> None:  # noqa: ANN001
    # the controller restarted (its floor moved on) and munged may have too: the floor decides
    floor = tmp_path / "floor"
    floor.write_text(f"{NOW + 0.5:.3f}\n")
    decoder = FakeDecoder({"MUNGE:x:": (0, 0, munge.payload("c1", NOW), int(NOW))})
    with pytest.raises(SignatureError, match="replay floor"):
        munge.verify(decoder, "MUNGE:x:", "c1", NOW + 1, ReplayGuard(path=str(floor), now=NOW))


@pytest.mark.parametrize("offset", [-1.0, -0.003, 0.0, 0.999, 1.5])
def test_munged_s_whole_second_may_lag_or_lead_the_payloads_time(offset: float) -> None:
    # munged reads a coarse clock: its stamp can be the second before the client's time
    cred = "MUNGE:lag:"
    decoder = FakeDecoder({cred: (1, 1, munge.payload("c1", NOW + offset), int(NOW))})
    assert munge.verify(decoder, cred, "c1", NOW + 1, ReplayGuard()).uid == 1


def test_the_guard_remembers_the_credentials_digest() -> None:
    cred = "MUNGE:good:"
    guard = ReplayGuard()
    munge.verify(FakeDecoder({cred: (1, 1, munge.payload("c1", NOW), int(NOW))}), cred, "c1", NOW, guard)
    with pytest.raises(SignatureError, match="replayed"):
        guard.check(hashlib.sha256(cred.encode()).hexdigest(), NOW, NOW)


def _config(extra: str = "") -> Config:
    return parse_config(f"ClusterName=c1\nStateSaveLocation=/tmp/x\n{extra}", "/etc/muster/muster.conf")


def test_auth_type_is_muster_or_munge() -> None:
    assert _config().auth_type == "auth/muster"
    assert _config("AuthType=auth/MUNGE\n").auth_type == "auth/munge"
    with pytest.raises(ConfigError, match="bad AuthType 'auth/none'"):
        _config("AuthType=auth/none\n")


def test_the_controller_takes_munge_only_with_auth_munge_and_agent_credentials_always() -> None:
    key = b"k" * 32
    native = UserCredentials(_config(), key)
    with pytest.raises(SignatureError, match=r"MUNGE credentials are not accepted \(AuthType=auth/muster\)"):
        native.verify("MUNGE:x:", NOW, ReplayGuard())
    agent = make_credential(key, 1000, 1000, "node3", NOW)
    assert native.verify(agent, NOW, ReplayGuard()) == (1000, 1000, "node3")

    with_munge = UserCredentials(_config("AuthType=auth/munge\nAuthInfo=socket=/nonexistent\n"), key)
    with_munge.munge = FakeDecoder({"MUNGE:x:": (1001, 1001, munge.payload("c1", NOW), int(NOW))})
    assert with_munge.verify("MUNGE:x:", NOW, ReplayGuard()) == (1001, 1001, "10.0.0.5")
    assert with_munge.verify(make_credential(key, 7, 7, "node1", NOW), NOW, ReplayGuard()) == (7, 7, "node1")


def test_a_controller_without_libmunge_says_so_and_still_takes_agent_credentials() -> None:
    key = b"k" * 32
    creds = UserCredentials(_config("AuthType=auth/munge\n"), key, library="libmunge-absent.so.0")
    with pytest.raises(SignatureError, match="MUNGE is not available on the controller: cannot load libmunge"):
        creds.verify("MUNGE:x:", NOW, ReplayGuard())
    assert creds.verify(make_credential(key, 5, 5, "node2", NOW), NOW, ReplayGuard()) == (5, 5, "node2")


def test_munged_is_asked_off_the_event_loop() -> None:
    # A munged that is down or hung makes libmunge retry for seconds: the controller's loop
    # must go on serving meanwhile (ctld.api asks through decode_munge first).
    import asyncio
    import threading

    release = threading.Event()

    class Hung(FakeDecoder):
        def decode(self, cred: str) -> munge.Decoded:
            assert release.wait(30)
            return super().decode(cred)

    creds = UserCredentials(_config("AuthType=auth/munge\nAuthInfo=socket=/nonexistent\n"), b"k" * 32)
    creds.munge = Hung({"MUNGE:x:": (1001, 1001, munge.payload("c1", NOW), int(NOW))})

    async def scenario() -> tuple[int, int, str]:
        pending = asyncio.ensure_future(creds.decode_munge("MUNGE:x:"))
        await asyncio.sleep(0)  # the decode is in its thread now, blocked
        assert not pending.done()  # ...and this coroutine runs all the same
        release.set()
        decoded = await pending
        assert isinstance(decoded, munge.Decoded)
        return creds.verify("MUNGE:x:", NOW, ReplayGuard(), decoded)

    assert asyncio.run(scenario()) == (1001, 1001, "10.0.0.5")
    assert asyncio.run(creds.decode_munge("uid:gid:agent:credential")) is None  # not MUNGE: verify checks it


def test_munged_s_refusal_asked_off_the_loop_is_reported_by_verify() -> None:
    import asyncio

    creds = UserCredentials(_config("AuthType=auth/munge\nAuthInfo=socket=/nonexistent\n"), b"k" * 32)
    creds.munge = FakeDecoder({})
    decoded = asyncio.run(creds.decode_munge("MUNGE:unknown:"))
    assert isinstance(decoded, munge.MungeError)
    with pytest.raises(SignatureError, match="MUNGE: invalid credential"):
        creds.verify("MUNGE:unknown:", NOW, ReplayGuard(), decoded)
