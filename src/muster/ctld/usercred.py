"""The user credentials the controller accepts over TCP, one kind per scheme.

* agent-signed (always): ``uid:gid:time:nonce:node:hmac``, made by a node agent for a caller
  it identified by SO_PEERCRED on its local socket (``protocol.signing``);
* login-host (always): made by a login node's credential daemon (``agent.credd``) with a
  host key derived from the cluster key, for hosts that run no agent (``protocol.hostcred``);
* MUNGE (``AuthType=auth/munge``): made by the caller's local munged, decoded by the
  controller's munged (``AuthInfo=socket=PATH``), for hosts that run no agent (login nodes;
  ``protocol.munge``).

Every kind is good for one request: the controller's replay guard (``protocol.replay``,
persisted across restarts) refuses a second use.
"""

from __future__ import annotations

import asyncio
import logging

from muster.core.config import Config
from muster.protocol import hostcred, munge
from muster.protocol.replay import ReplayGuard, SignatureError
from muster.protocol.signing import verify_credential

log = logging.getLogger("musterctld.auth")


class UserCredentials:
    """Checks a command's credential; ``verify`` returns (uid, gid, host) or raises
    ``SignatureError`` with the reason."""

    def __init__(self, config: Config, key: bytes, library: str = munge.LIBRARY) -> None:
        self.key = key
        self.cluster = config.cluster_name
        self.munge: munge.MungeDecoder | None = None
        self.munge_problem = "MUNGE credentials are not accepted (AuthType=auth/muster)"
        if config.auth_type == "auth/munge":
            socket = munge.socket_path(config.get("AuthInfo"))
            try:
                self.munge = munge.MungeDecoder(socket, library)
            except OSError as e:
                # Agent credentials still work: a controller without libmunge stays useful.
                self.munge_problem = f"MUNGE is not available on the controller: cannot load libmunge ({e})"
                log.error("AuthType=auth/munge: %s; only agent-signed credentials are accepted", self.munge_problem)

    async def decode_munge(self, cred: str | None) -> munge.Decoded | munge.MungeError | None:
        """munged's answer for a MUNGE credential, asked in a thread: with munged down (a
        stale socket) or hung, libmunge retries for seconds, which must not stall the
        controller's event loop. None for anything else (checked by ``verify``)."""
        if self.munge is None or not cred or not munge.is_munge(cred):
            return None
        try:
            return await asyncio.to_thread(self.munge.decode, cred)
        except munge.MungeError as e:
            return e

    def verify(
        self, cred: str, now: float, guard: ReplayGuard, decoded: munge.Decoded | munge.MungeError | None = None
    ) -> tuple[int, int, str]:
        """``decoded``: ``decode_munge``'s answer for ``cred``, when the caller asked it."""
        if munge.is_munge(cred):
            if self.munge is None:
                raise SignatureError(self.munge_problem)
            got = munge.verify(self.munge, cred, self.cluster, now, guard, decoded)
            return got.uid, got.gid, got.origin
        if hostcred.is_host_credential(cred):
            return hostcred.verify(self.key, cred, now, guard)
        uid, gid = verify_credential(self.key, cred, now, guard)
        return uid, gid, cred.split(":")[4]
