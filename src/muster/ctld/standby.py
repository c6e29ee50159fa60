"""A controller among several (``SlurmctldHost`` listed more than once): standby until elected.

``HaController`` is the ASGI application such a musterctld serves. While standby it loads
nothing and answers every request with 503 and Slurm's words, "Slurm backup controller in
standby mode" (commands, agents and musterrestd then try the next ``SlurmctldHost``), except:

* ``GET /v1/ping``: 200 with ``{"mode": "standby"}`` (``scontrol ping`` shows it UP);
* ``GET /livez``: 200 while the process answers;
* ``GET /metrics``: 200 (with ``MetricsType`` set) with gauges saying it is a standby
  (``muster_controller_active 0``, ``muster_controller_standby 1``), so that Prometheus sees
  it up; the cluster's figures are the active controller's;
* ``POST /v1/credential`` on its Unix socket (also while active): a credential for the
  caller's uid, so that a command on this head node reaches the active controller over TCP
  without an agent here, and ``scontrol takeover`` on the active one reaches a backup;
* ``POST /v1/ha/takeover``: an administrator asks this backup to take over
  (``scontrol takeover``); the active controller hands over at its next renewal.

Once ``ctld.lease.Elector`` wins the election it reads the configuration file again
(``scontrol reconfigure`` may have changed it meanwhile), opens the store fenced on its
epoch, builds ``CtldApp`` from the store (the same path a restart takes: jobs, nodes, steps,
accounting) and serves through it, renewing the lease. Deposed or asked to hand over, it
stops that app (its loops, its store) and is a standby again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from typing import Any

from muster.core.config import Config
from muster.ctld.identity import identify
from muster.ctld.lease import STANDBY_MESSAGE, Elector, Verdict, poll_every, renew_every
from muster.ctld.lease_pg import PgLease
from muster.ctld.usercred import UserCredentials
from muster.protocol.httpd import PEER_KEY
from muster.protocol.replay import ReplayGuard
from muster.protocol.signing import CRED_HEADER, SignatureError

log = logging.getLogger("musterctld")


class HaController:
    def __init__(
        self,
        config: Config,
        key: bytes,
        dsn: str,
        index: int,
        tls_client: ssl.SSLContext | None = None,
    ) -> None:
        self.config = config
        self.key = key
        self.dsn = dsn
        self.index = index
        self.tls_client = tls_client
        hosts = config.ctld_addrs
        self.name = hosts[index][0] if index < len(hosts) else f"backup{index}"
        self.me = f"{self.name}#{index}"
        self.timeout = float(config.slurmctld_timeout)
        self.backend = PgLease(dsn, config.cluster_name, connect_timeout=float(config.message_timeout))
        self.elector = Elector(self.backend, self.me, self.timeout)
        self.app: Any = None  # the CtldApp while active
        self._task: asyncio.Task[Any] | None = None
        self._guard = ReplayGuard()
        self.credentials = UserCredentials(config, key)  # scontrol takeover's, over TCP
        self.became_active = 0.0
        self._problem = ""  # the last election error logged

    # --- the election loop ------------------------------------------------------------

    async def run(self) -> None:
        while True:
            pause = renew_every(self.timeout) if self.app is not None else poll_every(self.timeout)
            try:
                if self.app is None:
                    verdict = await asyncio.to_thread(self.elector.poll)
                    if verdict is Verdict.TAKE:
                        await self._activate()
                    elif verdict is Verdict.TERMINATE:
                        log.warning("the active controller renews its lease no more: ending its sessions")
                        pause = 0.1  # its lock frees as soon as its session has ended
                else:
                    verdict = await asyncio.to_thread(self.elector.renew)
                    if verdict is not Verdict.KEEP:
                        why = (
                            "asked to hand over"
                            if verdict is Verdict.HAND_OVER
                            else "lease lost (another controller took over, or the database is unreachable)"
                        )
                        log.warning("%s; going back to standby", why)
                        await self._deactivate()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database away: keep trying
                problem = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                if problem != self._problem:  # once per new problem, not once a second
                    log.warning("controller election: %s", problem)
                self._problem = problem
                if self.app is not None:
                    await self._deactivate()
            else:
                self._problem = ""
            await asyncio.sleep(pause if self.app is None else renew_every(self.timeout))

    async def _activate(self) -> None:
        from muster.ctld.app import CtldApp
        from muster.ctld.store_pg import PgStore

        epoch = self.elector.epoch
        store = None
        try:
            store = await asyncio.to_thread(PgStore, self.dsn)
            store.fence_epoch = epoch
            await asyncio.to_thread(self.backend.note_store, epoch, store.backend_pid())
            self.config = self._fresh_config()
            app = CtldApp(self.config, self.key, tls_client=self.tls_client, store=store, instance=self.index)
            await app.start()
        except Exception:
            log.exception("taking over failed; back to standby")
            if store is not None:
                store.close()
            self.elector.step_down()
            return
        self.app = app
        self.became_active = app.clock.now()
        log.info(
            "%s is now the active controller (lease epoch %d): %d jobs, %d nodes loaded",
            self.name,
            epoch,
            len(app.controller.jobs),
            len(app.controller.nodes),
        )

    def _fresh_config(self) -> Config:
        """The configuration file as it is now: ``scontrol reconfigure`` may have changed it
        since this standby started (the file is the same on every head node)."""
        from muster.core.config import ConfigError, parse_config
        from muster.ctld.reconfig import read_topology
        from muster.ctld.reconfig_plan import validate

        path = self.config.path
        try:
            with open(path) as f:
                config = parse_config(f.read(), path)
            problems = validate(config)
            if problems:
                raise ConfigError("; ".join(problems))
            read_topology(config, path)
        except (OSError, ConfigError) as e:
            log.warning("re-reading %s: %s; taking over with the configuration read at start", path, e)
            return self.config
        return config

    async def _deactivate(self) -> None:
        app, self.app = self.app, None
        self.elector.step_down()
        if app is not None:
            try:
                await app.stop()
            except Exception:
                log.exception("stopping the deposed controller")

    # --- ASGI -------------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        path = scope.get("path", "")
        if path == "/v1/ha/takeover" and scope.get("method") == "POST":
            await self._takeover(scope, receive, send)
            return
        if path == "/v1/credential" and scope.get("method") == "POST":
            # active or not: ``scontrol takeover`` on the active head node (no agent there)
            # needs one to ask the backup, over TCP, to take over
            await self._credential(scope, receive, send)
            return
        app = self.app
        if app is not None:
            await app.asgi(scope, receive, send)
            return
        if scope["type"] != "http":
            return
        if path == "/v1/ping" or path == "/livez":
            await _answer(send, 200, {"ok": True, "mode": "standby", "controller": self.name})
            return
        if path == "/metrics" or path.startswith("/metrics/"):
            await self._metrics(send)
            return
        await _answer(send, 503, {"error": STANDBY_MESSAGE, "code": "standby"})

    async def _credential(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """A command on this head node, which may run no agent, reaches the active controller
        over TCP with a credential signed here for the uid its Unix socket shows, as an
        agent signs one (``client.failover``)."""
        from muster.protocol.signing import make_credential

        while (await receive()).get("more_body"):
            pass
        peer = scope.get(PEER_KEY)
        if not peer:
            await _answer(send, 403, {"error": "credentials are only issued on the local socket", "code": "auth"})
            return
        await _answer(send, 200, {"credential": make_credential(self.key, peer[1], peer[2], self.name, _now())})

    async def _metrics(self, send: Any) -> None:
        """The standby's own ``/metrics`` (200, as Prometheus expects of a live target): that it
        is up and in standby. The cluster's figures are the active controller's to serve."""
        from muster.ctld.observe_api import CONTENT_TYPE, metrics_enabled

        if not metrics_enabled(self.config):
            text, status, kind = b"metrics are disabled: MetricsType is not set\n", 404, b"text/plain"
        else:
            text = (
                b"# HELP muster_controller_active Whether this controller is the active one (1)\n"
                b"# TYPE muster_controller_active gauge\n"
                b"muster_controller_active 0.0\n"
                b"# HELP muster_controller_standby Whether this controller is a backup in standby (1)\n"
                b"# TYPE muster_controller_standby gauge\n"
                b"muster_controller_standby 1.0\n"
            )
            status, kind = 200, CONTENT_TYPE.encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", kind), (b"content-length", str(len(text)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": text})

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._task = asyncio.create_task(self.run(), name="election")
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._task is not None:
                    self._task.cancel()
                    await asyncio.gather(self._task, return_exceptions=True)
                await self._deactivate()
                self.backend.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _takeover(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        if not self._admin(scope):
            await _answer(send, 403, {"error": "Access/permission denied", "code": "permission"})
            return
        if self.app is not None:
            await _answer(send, 200, {"ok": True, "active": True, "controller": self.name})
            return
        try:
            await asyncio.to_thread(self.backend.ask_takeover, self.me)
        except Exception as exc:
            await _answer(send, 503, {"error": f"takeover not recorded: {exc}", "code": "storage"})
            return
        log.info("takeover requested: %s asks the active controller to hand over", self.name)
        await _answer(send, 200, {"ok": True, "active": False, "controller": self.name})

    def _admin(self, scope: dict[str, Any]) -> bool:
        peer = scope.get(PEER_KEY)
        if peer is not None:
            return identify(self.config, peer[1], peer[2]).admin
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        cred = headers.get(CRED_HEADER)
        if not cred:
            return False
        try:
            uid, gid, _host = self.credentials.verify(cred, _now(), self._guard)
        except SignatureError:
            return False
        return identify(self.config, uid, gid).admin


def _now() -> float:
    from muster.core.clock import SystemClock

    return SystemClock().now()


async def _answer(send: Any, status: int, body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": payload})
