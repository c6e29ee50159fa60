"""auth/jwt in the controller: tokens minted and verified against an injected time."""

from __future__ import annotations

import os

import pytest

from muster.core.config import parse_config
from muster.core.errors import AuthError
from muster.ctld.jwtauth import JwtAuth, token_in


def _auth(tmp_path, mode: int = 0o600) -> JwtAuth:  # type: ignore[no-untyped-def]
    key = tmp_path / "jwt.key"
    key.write_bytes(os.urandom(32))
    key.chmod(mode)
    text = f"ClusterName=t\nAuthAltTypes=auth/jwt\nAuthAltParameters=jwt_key={key}\nNodeName=n1 CPUs=1\n"
    return JwtAuth(parse_config(text, str(tmp_path / "muster.conf")))


def test_a_token_proves_its_user_until_it_expires(tmp_path) -> None:  # type: ignore[no-untyped-def]
    auth = _auth(tmp_path)
    token = auth.mint("root", 60, 1000.0)
    assert auth.verify(token, "root", 1059.0).uid == 0
    assert auth.verify(token, None, 1000.0).user == "root"
    with pytest.raises(AuthError, match="expired"):
        auth.verify(token, "root", 1060.0)


def test_another_users_name_a_forged_token_and_a_readable_key_are_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import jwt

    auth = _auth(tmp_path)
    forged = jwt.encode({"sun": "root", "exp": 2000}, b"y" * 32, algorithm="HS256")
    with pytest.raises(AuthError, match="invalid token"):
        auth.verify(forged, "root", 1000.0)
    nobody = auth.mint("nobody", 60, 1000.0)
    with pytest.raises(AuthError, match="used for user root"):
        auth.verify(nobody, "root", 1000.0)
    # root's token may act for a user it names (Slurm's trusted proxy)
    assert auth.verify(auth.mint("root", 60, 1000.0), "nobody", 1000.0).user == "nobody"
    (tmp_path / "loose").mkdir()
    with pytest.raises(AuthError, match="others"):
        _auth(tmp_path / "loose", 0o644).key()


def test_tokens_are_read_from_either_header() -> None:
    assert token_in({"x-slurm-user-token": " abc "}) == "abc"
    assert token_in({"authorization": "Bearer xyz"}) == "xyz"
    assert token_in({"authorization": "Basic xyz"}) is None
    assert token_in({}) is None


def test_only_the_controllers_clock_judges_times(tmp_path) -> None:  # type: ignore[no-untyped-def]
    auth = _auth(tmp_path)
    later = 4_000_000_000.0  # issued "in the future" by the wall clock: our clock decides
    assert auth.verify(auth.mint("root", 60, later), None, later + 1).user == "root"
