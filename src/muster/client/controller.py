"""Reaching the controller: its Unix socket when it exists on this host (the controller
reads our uid from it), otherwise its TCP port with a credential (``user_credential``):
with ``AuthType=auth/munge`` one from the local munged (``protocol.munge``: login nodes run
no agent), else one the local node agent signs for us (``POST /v1/credential`` on the
agent's socket); several ``SlurmctldHost`` lines go through ``client.failover``.
"""

import posix

from muster.client.settings import ClientSettings, load_settings
from muster.client.sysenv import join, path_exists

TYPE_CHECKING = False  # typing costs a command milliseconds to import
if TYPE_CHECKING:
    from typing import Any


class Controller:
    """A connection recipe for the controller: each call is one request."""

    __slots__ = ("unix_path", "address", "headers", "settings", "timeout", "calls", "tls_ca")

    def __init__(
        self,
        settings: ClientSettings,
        unix_path: str | None = None,
        address: tuple[str, int] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.settings = settings
        self.unix_path = unix_path
        self.address = address
        self.headers = headers
        self.timeout = timeout
        self.calls = 0
        self.tls_ca = settings.tls_ca if address is not None else None

    def call(self, method: str, path: str, body: object = None) -> dict[str, "Any"]:
        from muster.protocol.client import ConnectError, request

        if len(self.settings.ctld_hosts) > 1:  # a primary and backups: whichever is active
            from muster.client.failover import call_active

            return call_active(self.settings, method, path, body, self.timeout, user_credential)
        headers = self.headers
        if self.calls and self.address is not None and headers and "X-Muster-Credential" in headers:
            # A credential is accepted once: each further request over TCP gets a fresh one.
            credential = user_credential(self.settings)
            headers = self.headers = {"X-Muster-Credential": credential} if credential else None
        self.calls += 1
        try:
            answer = request(
                method,
                path,
                body,
                unix_path=self.unix_path,
                address=self.address,
                headers=headers,
                timeout=self.timeout,
                tls=(self.tls_ca, "ctld") if self.tls_ca else None,
            )
        except ConnectError as e:  # not reached (stopped, restarting?): retried (client.failover)
            from muster.client.failover import retry_single

            return retry_single(e, self.settings, method, path, body, self.timeout, user_credential)
        return answer if isinstance(answer, dict) else {}

    def get(self, path: str) -> dict[str, "Any"]:
        return self.call("GET", path)

    def post(self, path: str, body: object = None) -> dict[str, "Any"]:
        return self.call("POST", path, {} if body is None else body)


def connect(prog: str, settings: ClientSettings | None = None) -> Controller:
    """How to reach the controller from here (no request is made yet)."""
    if settings is None:
        settings = load_settings(prog)
    sock = settings.ctld_socket
    if path_exists(sock):
        return Controller(settings, unix_path=sock)
    headers = None
    credential = user_credential(settings)
    if credential:
        headers = {"X-Muster-Credential": credential}
    return Controller(settings, address=(settings.ctld_addr, settings.ctld_port), headers=headers)


def user_credential(settings: ClientSettings) -> str | None:
    """A credential that proves this process's uid to the controller over TCP, good for one
    request: with ``AuthType=auth/munge`` the local munged's (``AuthInfo=socket=PATH``), so
    that a login node needs no agent; else, or where no munged answers, a node agent's."""
    if settings.auth_type == "auth/munge":
        from time import time

        from muster.protocol import munge

        credential = munge.encode(munge.socket_path(settings.settings.get("AuthInfo")), settings.cluster_name, time())
        if credential:
            return credential
    return agent_credential(settings)


def agent_credential(settings: ClientSettings) -> str | None:
    """A credential signed by a node agent on this host, or by a login node's credential
    daemon (``agent.credd``, ``mustercredd.sock``), or None when none answers."""
    directory = settings.agent_socket_dir
    if not directory:
        return None
    try:
        names = sorted(
            n
            for n in posix.listdir(directory)
            if n == "mustercredd.sock" or (n.startswith("musterd-") and n.endswith(".sock"))
        )
    except OSError:
        return None
    from muster.protocol.client import ApiError, ConnectError, request

    for name in names:
        try:
            answer = request("POST", "/v1/credential", {}, unix_path=join(directory, name), timeout=10.0)
        except (ApiError, ConnectError, OSError, ValueError):
            continue
        if isinstance(answer, dict) and answer.get("credential"):
            return str(answer["credential"])
    return None


# Slurm's wording for a controller that cannot be reached.
CONNECT_FAILURE = "Unable to contact slurm controller (connect failure)"


def connect_message(err: Exception) -> str:
    """Slurm's text for a connection failure, plus where we tried (useful, and harmless)."""
    detail = str(err)
    if detail.startswith(CONNECT_FAILURE):
        return detail
    return f"{CONNECT_FAILURE}: {detail}" if detail else CONNECT_FAILURE
