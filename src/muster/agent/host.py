"""One musterd process hosting several nodes (``musterd --node node[1-64]``): how a laptop
or a CI runner emulates a cluster of a thousand nodes (``muster up --nodes-per-agent``).

Each hosted node is its own node to the controller and to its users: its own name, address
and port, Unix socket, state directory, GPUs, jobs, heartbeats, replay floor and faults;
its jobs run as separate processes with its own environment (``SLURMD_NODENAME``, ...).
What the nodes share is the process and its event loop (about a tenth of an agent's memory
per extra node instead of a whole interpreter). Hence a SIGTERM stops them all, leaving
their jobs running as one agent does, and a ``kill -9`` or SIGSTOP of the process takes
all of them down together, as the power of a rack would. A real deployment keeps one
musterd per machine, the default.

Without TLS their heartbeats travel together (``HeartbeatBatch``): one signed request,
every heartbeat interval, carries those of all the nodes the process hosts, so that the
controller's cost per heartbeat is mostly its own work, not HTTP's; each is answered as if
it came alone. Over TLS (``TLSType=tls/muster``) a message must come over a certificate
that names its sender: the batch goes over the process's *host certificate*
(``slurmd_host_%n_cert.pem`` for ``%n`` = its hostlist, which ``muster up`` and ``muster
keygen --host-cert`` issue), whose alternative name lists the nodes it may speak for; the
controller accepts a heartbeat in it only for those nodes. Without a host certificate each
node heartbeats alone over its own link (its own certificate), as before.

Log lines carry the node they are about (``musterd[node7]``): every task a node's daemon
starts inherits its name through a context variable (``NODE``).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import ssl
from typing import Any

from muster.agent.daemon import AgentDaemon
from muster.core.clock import Clock, SystemClock
from muster.core.config import Config
from muster.core.hostlist import compress
from muster.protocol.httpd import DaemonRequestError, SignedClient
from muster.protocol.tls import TLSError, client_context

__all__ = ["NODE", "BATCH_WINDOW", "HeartbeatBatch", "NodeField", "serve_nodes"]

# Seconds a heartbeat waits for those of the other hosted nodes. Nodes answered together
# wait their interval together, so after the first round a batch holds them all.
BATCH_WINDOW = 0.2

log = logging.getLogger("musterd")

NODE: contextvars.ContextVar[str] = contextvars.ContextVar("musterd_node", default="-")


class NodeField(logging.Filter):
    """Puts the node a log record is about into it, as ``%(node)s``."""

    def __init__(self, default: str) -> None:
        super().__init__()
        self.default = default

    def filter(self, record: logging.LogRecord) -> bool:
        node = NODE.get()
        record.node = self.default if node == "-" else node
        return True


class HeartbeatBatch:
    """Carries the heartbeats of the nodes this process hosts to the controller in one
    request (``POST /v1/agent/heartbeats``), signed by all of them (the sender is their
    hostlist). ``send`` answers each node as ``SignedClient.post`` would have: the answer,
    or the error (``DaemonRequestError`` for that node's refusal, or the request's own)."""

    def __init__(self, client: SignedClient, base_url: str, window: float = BATCH_WINDOW) -> None:
        self.client = client
        self.url = base_url.rstrip("/") + "/v1/agent/heartbeats"
        self.window = window
        self._waiting: list[tuple[dict[str, Any], asyncio.Future[Any]]] = []
        self._flush: asyncio.Task[None] | None = None

    async def send(self, body: dict[str, Any]) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting.append((body, future))
        if self._flush is None:
            self._flush = asyncio.create_task(self._send_later())
        return await future

    async def _send_later(self) -> None:
        await asyncio.sleep(self.window)
        batch, self._waiting, self._flush = self._waiting, [], None
        try:
            answer = await self.client.post(self.url, {"heartbeats": [body for body, _ in batch]})
            answers = answer["answers"] if isinstance(answer, dict) else None
            if not isinstance(answers, list) or len(answers) != len(batch):
                raise ValueError(f"the controller answered {len(batch)} heartbeats with {answer!r:.200}")
        except BaseException as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, future), one in zip(batch, answers, strict=True):
            if future.done():
                continue
            status = one.get("status", 200) if isinstance(one, dict) else 500
            if status >= 400:
                future.set_exception(DaemonRequestError(status, str(one.get("error", "")), one))
            else:
                future.set_result(one)


def host_tls(config: Config, hostlist: str) -> ssl.SSLContext | None:
    """The client context presenting this process's host certificate, or None (logged)
    when it has none: then each node heartbeats alone over TLS."""
    files = config.tls.host(hostlist)
    if not (os.path.exists(files.cert) and os.path.exists(files.key)):
        log.info(
            "no host certificate %s for %s: each node heartbeats alone over its own link "
            "(`muster keygen --conf CONF --host-cert %s` makes one)",
            files.cert,
            hostlist,
            hostlist,
        )
        return None
    try:
        return client_context(files.ca_cert, files)
    except TLSError as exc:
        log.warning("host certificate not used, each node heartbeats alone: %s", exc)
        return None


async def serve_nodes(daemons: list[AgentDaemon], clock: Clock | None = None) -> None:
    """Serve every daemon in this event loop until all are stopped (``request_stop``).

    All of them bind their sockets before any serves: a node that cannot start (its port
    taken, its state directory locked) stops the whole host with its ``StartupError``,
    rather than leaving a rack with a hole the controller would call a dead node."""
    sockets = []
    try:
        for daemon in daemons:
            sockets.append(daemon.prepare())
    except BaseException:
        for bound in sockets:
            for sock in bound:
                sock.close()
        raise

    async def serve(daemon: AgentDaemon, bound: list[object]) -> None:
        NODE.set(daemon.node.name)  # this task's context: every task it starts inherits it
        await daemon.serve(hosted=True, sockets=bound)

    config = daemons[0].config
    client: SignedClient | None = None
    hostlist = compress(d.node.name for d in daemons)
    tls = host_tls(config, hostlist) if any(d.uses_tls for d in daemons) else None
    if tls is not None or not any(d.uses_tls for d in daemons):
        client = SignedClient(
            daemons[0].settings.key,
            clock or SystemClock(),
            timeout=float(config.message_timeout),
            sender=hostlist,
            tls=tls,
        )
        client.use_controllers([client.url(addr, config.ctld_port) for _h, addr in config.ctld_addrs])
        batch = HeartbeatBatch(client, client.url(config.ctld_addr, config.ctld_port))
        for daemon in daemons:
            daemon.send_heartbeat = batch.send
    tasks = [asyncio.create_task(serve(d, s), name=d.node.name) for d, s in zip(daemons, sockets, strict=True)]
    try:
        results = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        if client is not None:
            await client.aclose()
    for result in results:
        if isinstance(result, BaseException):
            raise result
