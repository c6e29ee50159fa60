"""Login-host credentials: muster's own way (no MUNGE) for a login node that runs no agent.

A login host holds a *host key*, derived from the cluster key and the host's name
(``derive_key``: HMAC-SHA256 of the name under the cluster key), never the cluster key
itself. An administrator makes it on a host that has the cluster key
(``python -m muster.agent.credd keygen HOST FILE``) and copies it to that host only (mode
0600, root's). There the credential daemon (``agent.credd``) vouches for the caller of its
Unix socket, whose uid and gid the kernel reports (SO_PEERCRED), as an agent does:

    host:<uid>:<gid>:<time>:<nonce>:<host>:<HMAC of them under the host key>

The controller derives the host's key from the cluster key and the name the credential
carries, checks the MAC, then the replay guard (once, within 5 minutes, across restarts).
What a stolen host key gives: credentials naming that host, for any uid (as a stolen
``munge.key`` does); not the daemons' signatures (agents and the controller refuse
everything but the cluster key's) nor other hosts' credentials. Withdrawing one host's key
means a new cluster key, as for MUNGE a new ``munge.key``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets

from muster.protocol.replay import ReplayGuard, SignatureError

PREFIX = "host:"
_DERIVE = b"muster-login-host-v1\n"  # purpose tag: a host key is no other key
_CRED = "login-cred"
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


def check_host(host: str) -> str:
    """``host`` if it is a usable host name (letters, digits, ``.-_``); ValueError otherwise."""
    if not host or len(host) > 255 or not set(host) <= _NAME_CHARS:
        raise ValueError(f"bad host name {host!r}: letters, digits, '.', '-' and '_' only")
    return host


def derive_key(cluster_key: bytes, host: str) -> bytes:
    return hmac.new(cluster_key, _DERIVE + check_host(host).encode(), hashlib.sha256).digest()


def write_key(path: str, key: bytes) -> None:
    """Write a host key file, mode 0600 (never overwrites: FileExistsError)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.hex().encode() + b"\n")


def _mac(key: bytes, *parts: str) -> str:
    h = hmac.new(key, digestmod=hashlib.sha256)
    for p in (_CRED, *parts):
        h.update(p.encode())
        h.update(b"\n")
    return h.hexdigest()


def is_host_credential(cred: str) -> bool:
    return cred.startswith(PREFIX)


def make_credential(host_key: bytes, uid: int, gid: int, host: str, now: float) -> str:
    ts = f"{now:.3f}"
    nonce = secrets.token_hex(16)
    fields = (str(uid), str(gid), ts, nonce, host)
    return PREFIX + ":".join(fields) + ":" + _mac(host_key, *fields)


def verify(cluster_key: bytes, cred: str, now: float, guard: ReplayGuard) -> tuple[int, int, str]:
    """(uid, gid, host) of a login host's credential; ``SignatureError`` saying why not."""
    try:
        uid_s, gid_s, ts, nonce, host, sig = cred[len(PREFIX) :].split(":")
        uid, gid, tsf = int(uid_s), int(gid_s), float(ts)
        key = derive_key(cluster_key, host)
    except ValueError:
        raise SignatureError("malformed login host credential") from None
    if not hmac.compare_digest(_mac(key, uid_s, gid_s, ts, nonce, host), sig):
        raise SignatureError(f"bad login host credential signature (not made with {host}'s host key)")
    guard.check(nonce, tsf, now)
    return uid, gid, host
