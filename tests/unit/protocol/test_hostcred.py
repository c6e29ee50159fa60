"""protocol.hostcred: login hosts' keys and credentials, without daemons
(tests/integration/test_login_credd.py runs the credential daemon)."""

from __future__ import annotations

import os
import stat

import pytest

from muster.protocol import hostcred
from muster.protocol.replay import ReplayGuard, SignatureError
from muster.protocol.signing import load_key, make_credential

KEY = b"c" * 32
NOW = 1_800_000_000.0


def test_each_host_has_its_own_key_and_none_is_the_cluster_key() -> None:
    a, b = hostcred.derive_key(KEY, "login1"), hostcred.derive_key(KEY, "login2")
    assert len({a, b, KEY}) == 3 and a == hostcred.derive_key(KEY, "login1")
    assert hostcred.derive_key(b"d" * 32, "login1") != a


@pytest.mark.parametrize("host", ["", "a:b", "a b", "x" * 256, "é"])
def test_a_bad_host_name_is_refused(host: str) -> None:
    with pytest.raises(ValueError, match="bad host name"):
        hostcred.derive_key(KEY, host)


def test_a_credential_names_its_user_and_host_once() -> None:
    cred = hostcred.make_credential(hostcred.derive_key(KEY, "login1"), 1000, 100, "login1", NOW)
    assert hostcred.is_host_credential(cred) and cred.split(":")[5] == "login1"
    guard = ReplayGuard()
    assert hostcred.verify(KEY, cred, NOW + 1, guard) == (1000, 100, "login1")
    with pytest.raises(SignatureError, match="replayed"):
        hostcred.verify(KEY, cred, NOW + 2, guard)
    with pytest.raises(SignatureError, match="outside the allowed window"):
        hostcred.verify(
            KEY, hostcred.make_credential(hostcred.derive_key(KEY, "login1"), 1, 1, "login1", NOW), NOW + 400, guard
        )


def test_changed_fields_or_another_hosts_key_are_refused() -> None:
    good = hostcred.make_credential(hostcred.derive_key(KEY, "login1"), 1000, 100, "login1", NOW)
    as_root = good.replace("host:1000:", "host:0:", 1)
    with pytest.raises(SignatureError, match="bad login host credential signature"):
        hostcred.verify(KEY, as_root, NOW, ReplayGuard())
    other = hostcred.make_credential(hostcred.derive_key(KEY, "login2"), 1000, 100, "login1", NOW)
    with pytest.raises(SignatureError, match="not made with login1's host key"):
        hostcred.verify(KEY, other, NOW, ReplayGuard())
    agent_style = make_credential(KEY, 1000, 100, "login1", NOW)  # the cluster key's format, relabelled
    with pytest.raises(SignatureError):
        hostcred.verify(KEY, "host:" + agent_style, NOW, ReplayGuard())
    for bad in ("host:", "host:a:b:c:d:e:f", "host:1:2:3:4:5:6:7"):
        with pytest.raises(SignatureError, match="malformed"):
            hostcred.verify(KEY, bad, NOW, ReplayGuard())


def test_the_key_file_is_private_and_never_overwritten(tmp_path) -> None:  # noqa: ANN001
    path = str(tmp_path / "login.key")
    hostcred.write_key(path, hostcred.derive_key(KEY, "login1"))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_key(path) == hostcred.derive_key(KEY, "login1")
    with pytest.raises(FileExistsError):
        hostcred.write_key(path, b"x" * 32)
