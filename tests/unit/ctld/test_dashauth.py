"""The dashboard's sign-in texts: a login token works once within its minute, a session
until it expires; neither can be forged, stretched, or passed off as the other."""

from __future__ import annotations

import pytest

from muster.ctld import dashauth
from muster.ctld.dashauth import DashAuthError, Redeemed

KEY = b"k" * 32
NOW = 1_800_000_000.0


def test_a_token_names_the_user_it_was_made_for() -> None:
    ticket = dashauth.read_token(KEY, dashauth.make_token(KEY, 1001, 1002, NOW), NOW + 10)
    assert (ticket.uid, ticket.gid, ticket.time) == (1001, 1002, NOW)


def test_a_token_expires_after_its_minute() -> None:
    token = dashauth.make_token(KEY, 1001, 1001, NOW)
    dashauth.read_token(KEY, token, NOW + dashauth.TOKEN_TTL)
    with pytest.raises(DashAuthError, match="expired"):
        dashauth.read_token(KEY, token, NOW + dashauth.TOKEN_TTL + 0.01)
    with pytest.raises(DashAuthError, match="expired"):
        dashauth.read_token(KEY, token, NOW - 60)  # issued in the future: not believed


@pytest.mark.parametrize(
    "tamper",
    [
        lambda t: t.replace("v1.1001.", "v1.0.", 1),  # another uid (root)
        lambda t: t[:-1] + ("0" if t[-1] != "0" else "1"),  # another signature
        lambda t: t.rsplit(".", 1)[0],  # no signature
        lambda t: "v2" + t[2:],  # another version
        lambda t: "",
        lambda t: "v1.a.b.c.d.e.f",
    ],
)
def test_a_tampered_token_is_refused(tamper) -> None:  # type: ignore[no-untyped-def]
    token = dashauth.make_token(KEY, 1001, 1001, NOW)
    with pytest.raises(DashAuthError):
        dashauth.read_token(KEY, tamper(token), NOW)


def test_a_token_from_another_cluster_key_is_refused() -> None:
    with pytest.raises(DashAuthError, match="bad signature"):
        dashauth.read_token(KEY, dashauth.make_token(b"x" * 32, 1001, 1001, NOW), NOW)


def test_a_token_is_not_a_session_and_a_session_is_not_a_token() -> None:
    token = dashauth.make_token(KEY, 1001, 1001, NOW + dashauth.SESSION_TTL - 10)
    with pytest.raises(DashAuthError, match="bad signature"):
        dashauth.read_session(KEY, token, NOW)
    session = dashauth.make_session(KEY, 1001, 1001, NOW - dashauth.SESSION_TTL + 10)
    with pytest.raises(DashAuthError, match="bad signature"):
        dashauth.read_token(KEY, session, NOW)


def test_a_session_lasts_until_it_expires() -> None:
    session = dashauth.make_session(KEY, 1001, 1002, NOW)
    ticket = dashauth.read_session(KEY, session, NOW + dashauth.SESSION_TTL - 1)
    assert (ticket.uid, ticket.gid, ticket.time) == (1001, 1002, NOW + dashauth.SESSION_TTL)
    with pytest.raises(DashAuthError, match="expired"):
        dashauth.read_session(KEY, session, NOW + dashauth.SESSION_TTL)


def test_a_token_is_redeemed_once() -> None:
    redeemed = Redeemed()
    first = dashauth.read_token(KEY, dashauth.make_token(KEY, 1001, 1001, NOW), NOW)
    other = dashauth.read_token(KEY, dashauth.make_token(KEY, 1001, 1001, NOW), NOW)
    redeemed.redeem(first, NOW)
    redeemed.redeem(other, NOW)  # another link for the same user: its own single use
    with pytest.raises(DashAuthError, match="already used"):
        redeemed.redeem(first, NOW + 1)


def test_the_redeemed_set_forgets_only_tokens_past_their_minute() -> None:
    redeemed = Redeemed()
    for i in range(1001):
        redeemed.redeem(dashauth.Ticket(1, 1, NOW, f"old{i}"), NOW)
    fresh = dashauth.Ticket(1, 1, NOW + 100, "fresh")
    redeemed.redeem(fresh, NOW + 100)
    redeemed.redeem(dashauth.Ticket(1, 1, NOW + 100, "another"), NOW + 100)  # the cleanup runs here
    with pytest.raises(DashAuthError):
        redeemed.redeem(fresh, NOW + 101)
