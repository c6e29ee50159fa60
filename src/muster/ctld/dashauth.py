"""The dashboard's sign-in: a one-time login token, then a signed, expiring session cookie.

A browser cannot prove its user the way a command does (SO_PEERCRED on the controller's
socket, or a credential signed by the node agent), so the command proves it once and hands
the browser a ticket (docs/dashboard.md):

1. ``muster dashboard`` asks ``POST /v1/dashboard/token`` as the user it is; the controller
   answers a **login token** for that uid/gid: issued now, good for ``TOKEN_TTL`` seconds and
   for one use.
2. The browser opens ``/dash/login?token=...``; the controller checks the token (its MAC, its
   age, that it was never used, that it was issued after this controller's replay floor) and
   answers a **session cookie** (HttpOnly, SameSite=Strict, Path=/dash) that names the uid/gid
   and an expiry ``SESSION_TTL`` seconds later, signed the same way.
3. Every dashboard request reads the cookie; the caller's ``Identity`` (and so whether it is
   an administrator) is worked out afresh from the uid, as for a command.

Both texts are ``v1.<uid>.<gid>.<time>.<nonce>.<mac>``; the MAC is HMAC-SHA256 with a key
derived from the cluster key for this purpose only, over a tag that tells a token from a
session, so neither can pass for the other, nor for any message the daemons sign.
Pure: the time is a parameter; single use is the caller's ``Redeemed`` set.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

TOKEN_TTL = 60.0  # seconds a login URL works (once)
SESSION_TTL = 8 * 3600.0  # seconds a browser session lasts
COOKIE = "muster_dash"
_VERSION = "v1"
_TOKEN_TAG = "muster-dashboard-login"
_SESSION_TAG = "muster-dashboard-session"


class DashAuthError(Exception):
    """A token or session that must not be accepted; ``str()`` says why."""


@dataclass(frozen=True, slots=True)
class Ticket:
    """What a verified token or session says: who, and when it was issued or expires."""

    uid: int
    gid: int
    time: float  # a token: when issued; a session: when it expires
    nonce: str


def _subkey(key: bytes) -> bytes:
    return hmac.new(key, b"muster-dashboard-key-v1", hashlib.sha256).digest()


def _mac(key: bytes, tag: str, body: str) -> str:
    return hmac.new(_subkey(key), f"{tag}\n{body}".encode(), hashlib.sha256).hexdigest()


def _make(key: bytes, tag: str, uid: int, gid: int, time: float) -> str:
    body = f"{_VERSION}.{uid}.{gid}.{time:.3f}.{secrets.token_hex(16)}"
    return f"{body}.{_mac(key, tag, body)}"


def _read(key: bytes, tag: str, text: str) -> Ticket:
    parts = text.split(".")
    # v1 . uid . gid . seconds . millis . nonce . mac  (the time has one dot in it)
    if len(parts) != 7 or parts[0] != _VERSION:
        raise DashAuthError("malformed")
    body, mac = ".".join(parts[:6]), parts[6]
    if not hmac.compare_digest(_mac(key, tag, body), mac):
        raise DashAuthError("bad signature")
    try:
        return Ticket(int(parts[1]), int(parts[2]), float(f"{parts[3]}.{parts[4]}"), parts[5])
    except ValueError:
        raise DashAuthError("malformed") from None


def make_token(key: bytes, uid: int, gid: int, now: float) -> str:
    """A login token for uid/gid, issued at ``now``."""
    return _make(key, _TOKEN_TAG, uid, gid, now)


def read_token(key: bytes, text: str, now: float) -> Ticket:
    """The token's ticket, if genuine and not older than ``TOKEN_TTL`` (single use is checked
    by the caller, with ``Redeemed``)."""
    ticket = _read(key, _TOKEN_TAG, text)
    if not ticket.time - 5.0 <= now <= ticket.time + TOKEN_TTL:  # 5 s: clocks of one host
        raise DashAuthError("expired")
    return ticket


def make_session(key: bytes, uid: int, gid: int, now: float) -> str:
    """A session cookie's value for uid/gid, expiring ``SESSION_TTL`` after ``now``."""
    return _make(key, _SESSION_TAG, uid, gid, now + SESSION_TTL)


def read_session(key: bytes, text: str, now: float) -> Ticket:
    """The session's ticket, if genuine and not expired."""
    ticket = _read(key, _SESSION_TAG, text)
    if now >= ticket.time or ticket.time > now + SESSION_TTL + 5.0:
        raise DashAuthError("expired")
    return ticket


class Redeemed:
    """Login tokens already used, remembered until they would have expired anyway."""

    def __init__(self) -> None:
        self._used: dict[str, float] = {}

    def redeem(self, ticket: Ticket, now: float) -> None:
        """Mark the token used; ``DashAuthError`` when it was used before."""
        if len(self._used) > 1000:
            self._used = {n: t for n, t in self._used.items() if t + TOKEN_TTL >= now}
        if ticket.nonce in self._used:
            raise DashAuthError("already used")
        self._used[ticket.nonce] = ticket.time
