"""Signed, time-stamped, receiver-bound, replay-protected messages between daemons.

Daemons share one cluster key (a file of mode 0600 created by ``muster keygen``/``muster up``).
A signed request carries five headers:

* ``X-Muster-Time``: seconds since the epoch when it was signed,
* ``X-Muster-Nonce``: 128 random bits, never accepted twice (see ``replay``),
* ``X-Muster-From``: the sender, a node name or ``ctld`` for the controller,
* ``X-Muster-To``: the one receiver it is meant for (a node name or ``ctld``),
* ``X-Muster-Signature``: HMAC-SHA256 over a purpose tag, method, path (with its query),
  time, nonce, sender, receiver and the SHA-256 of the body.

and, unsigned, the protocol it is written in (``versions``: ``X-Muster-Protocol``,
``X-Muster-Version``); a peer outside the supported range is refused for that first.

A receiver refuses a message addressed to anyone else, so a message captured on its way
to node1 is worthless at node2, and ``replay`` makes sure it is worthless at node1 after
its first delivery, across restarts too.

User credentials (the MUNGE equivalent) are signed the same way by the node agent that
checked the caller's peer credentials on its local socket: ``uid:gid:time:nonce:node``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat

from muster.protocol import versions
from muster.protocol.replay import MAX_SKEW, ReplayGuard, SignatureError, StaleMessage

TIME_HEADER = "x-muster-time"
NONCE_HEADER = "x-muster-nonce"
FROM_HEADER = "x-muster-from"
TO_HEADER = "x-muster-to"
SIG_HEADER = "x-muster-signature"
CRED_HEADER = "x-muster-credential"
CTLD = "ctld"  # the controller's name as a sender or receiver
_REQUEST = "muster-request-v2"  # purpose tag: no other signed text can pass for a request

__all__ = [
    "CRED_HEADER",
    "CTLD",
    "MAX_SKEW",
    "ProtocolMismatch",
    "ReplayGuard",
    "SignatureError",
    "StaleMessage",
    "WrongReceiver",
    "check_protocol",
    "generate_key",
    "load_key",
    "make_credential",
    "sign_request",
    "verify_credential",
    "verify_request",
]


class WrongReceiver(SignatureError):
    """A genuine message addressed to another daemon."""


class ProtocolMismatch(SignatureError):
    """A message from a peer whose protocol this build does not speak (``versions``): no
    signature was checked; ``str()`` names both sides' protocols and builds."""

    status = versions.ProtocolMismatch.status


def generate_key(path: str) -> bytes:
    """Create a new cluster key file with mode 0600 (never overwrites)."""
    key = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.hex().encode() + b"\n")
    return key


def load_key(path: str) -> bytes:
    """Read the cluster key; refuse a key file that others can read."""
    st = os.stat(path)
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SignatureError(f"cluster key {path} must not be accessible by group or others (chmod 600)")
    with open(path, "rb") as f:
        text = f.read().strip()
    try:
        key = bytes.fromhex(text.decode())
    except ValueError:
        key = text
    if len(key) < 16:
        raise SignatureError(f"cluster key {path} is too short")
    return key


def _mac(key: bytes, *parts: str | bytes) -> str:
    h = hmac.new(key, digestmod=hashlib.sha256)
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\n")
    return h.hexdigest()


def sign_request(
    key: bytes, method: str, path: str, body: bytes, now: float, *, sender: str, receiver: str
) -> dict[str, str]:
    """The headers that make a request from ``sender`` acceptable to ``receiver`` only."""
    ts = f"{now:.3f}"
    nonce = secrets.token_hex(16)
    sig = _mac(key, _REQUEST, method.upper(), path, ts, nonce, sender, receiver, hashlib.sha256(body).hexdigest())
    return {
        TIME_HEADER: ts,
        NONCE_HEADER: nonce,
        FROM_HEADER: sender,
        TO_HEADER: receiver,
        SIG_HEADER: sig,
        **versions.headers(),  # not signed: muster 0.2.0's receivers check the signature without it
    }


def check_protocol(headers: dict[str, str], me: str) -> int:
    """The protocol of a daemon's request (``versions``); ``ProtocolMismatch`` outside the
    supported range, before any signature is checked, so that an old or new peer is told
    why, not that its signature is wrong. muster 0.1.0 said no protocol either, but signed
    without naming sender and receiver: such a request is protocol 1."""
    me_text = "this controller" if me == CTLD else "this agent"
    sender = headers.get(FROM_HEADER)
    if (
        versions.PROTOCOL_HEADER not in headers
        and SIG_HEADER in headers
        and (sender is None or TO_HEADER not in headers)
    ):
        raise ProtocolMismatch(versions.refusal_text("daemon", "", 1, "0.1.0", me_text))
    kind, name = ("controller", "") if sender == CTLD else ("agent", sender or "?")
    try:
        return versions.check(headers, kind, name, me_text)
    except versions.ProtocolMismatch as exc:
        raise ProtocolMismatch(str(exc)) from None


def verify_request(
    key: bytes,
    method: str,
    path: str,
    body: bytes,
    headers: dict[str, str],
    now: float,
    guard: ReplayGuard,
    me: str,
) -> str:
    """The sender of a request signed for ``me``; ``SignatureError`` when it must be refused.

    The order matters: the signature first (nothing unauthenticated is believed, not even
    its names), then the receiver, then the replay guard (which records the message).
    Before all that, the protocol (``check_protocol``): a peer outside the range is told so."""
    check_protocol(headers, me)
    try:
        ts_text = headers[TIME_HEADER]
        nonce = headers[NONCE_HEADER]
        sender = headers[FROM_HEADER]
        receiver = headers[TO_HEADER]
        sig = headers[SIG_HEADER]
        ts = float(ts_text)
    except (KeyError, ValueError):
        raise SignatureError("missing or malformed signature headers") from None
    body_hash = hashlib.sha256(body).hexdigest()
    expected = _mac(key, _REQUEST, method.upper(), path, ts_text, nonce, sender, receiver, body_hash)
    if not hmac.compare_digest(expected, sig):
        raise SignatureError("bad signature")
    if receiver != me:
        raise WrongReceiver(f"message from {sender} addressed to {receiver}, not to {me}")
    guard.check(nonce, ts, now)
    return sender


def make_credential(key: bytes, uid: int, gid: int, node: str, now: float) -> str:
    """A user credential vouched for by a node agent (valid for ``MAX_SKEW`` s, once)."""
    ts = f"{now:.3f}"
    nonce = secrets.token_hex(16)
    sig = _mac(key, "cred", str(uid), str(gid), ts, nonce, node)
    return f"{uid}:{gid}:{ts}:{nonce}:{node}:{sig}"


def verify_credential(key: bytes, cred: str, now: float, guard: ReplayGuard) -> tuple[int, int]:
    try:
        uid_s, gid_s, ts, nonce, node, sig = cred.split(":")
        uid, gid, tsf = int(uid_s), int(gid_s), float(ts)
    except ValueError:
        raise SignatureError("malformed credential") from None
    if not hmac.compare_digest(_mac(key, "cred", uid_s, gid_s, ts, nonce, node), sig):
        raise SignatureError("bad credential signature")
    guard.check(nonce, tsf, now)
    return uid, gid
