"""Signed, time-stamped, replay-protected messages between daemons.

Daemons share one cluster key (a file of mode 0600 created by ``muster keygen``/``muster up``).
A signed request carries three headers:

* ``X-Muster-Time``: seconds since the epoch when it was signed,
* ``X-Muster-Nonce``: 128 random bits, never accepted twice within the window,
* ``X-Muster-Signature``: HMAC-SHA256 over method, path, time, nonce, acting identity and
  the SHA-256 of the body.

User credentials (the MUNGE equivalent) are signed the same way by the node agent that
checked the caller's peer credentials on its local socket: ``uid:gid:time:nonce:node``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat

TIME_HEADER = "x-muster-time"
NONCE_HEADER = "x-muster-nonce"
SIG_HEADER = "x-muster-signature"
CRED_HEADER = "x-muster-credential"
MAX_SKEW = 300.0  # seconds a signature stays valid; nonces are remembered this long


class SignatureError(Exception):
    pass


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


def sign_request(key: bytes, method: str, path: str, body: bytes, now: float) -> dict[str, str]:
    ts = f"{now:.3f}"
    nonce = secrets.token_hex(16)
    sig = _mac(key, method.upper(), path, ts, nonce, hashlib.sha256(body).hexdigest())
    return {TIME_HEADER: ts, NONCE_HEADER: nonce, SIG_HEADER: sig}


class ReplayGuard:
    """Remembers nonces for ``MAX_SKEW`` seconds so that a captured message cannot be resent."""

    def __init__(self, window: float = MAX_SKEW) -> None:
        self.window = window
        self._seen: dict[str, float] = {}

    def check(self, nonce: str, ts: float, now: float) -> None:
        if abs(now - ts) > self.window:
            raise SignatureError("message timestamp outside the allowed window (check clocks)")
        if len(self._seen) > 10_000:
            cutoff = now - 2 * self.window
            self._seen = {n: t for n, t in self._seen.items() if t >= cutoff}
        if nonce in self._seen:
            raise SignatureError("replayed message")
        self._seen[nonce] = now


def verify_request(
    key: bytes,
    method: str,
    path: str,
    body: bytes,
    headers: dict[str, str],
    now: float,
    guard: ReplayGuard,
) -> None:
    try:
        ts_text = headers[TIME_HEADER]
        nonce = headers[NONCE_HEADER]
        sig = headers[SIG_HEADER]
        ts = float(ts_text)
    except (KeyError, ValueError):
        raise SignatureError("missing or malformed signature headers") from None
    expected = _mac(key, method.upper(), path, ts_text, nonce, hashlib.sha256(body).hexdigest())
    if not hmac.compare_digest(expected, sig):
        raise SignatureError("bad signature")
    guard.check(nonce, ts, now)


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
