"""Wiring of musterctld: the store, the controller, the API and the background loops.

Loops (all on one asyncio event loop, so controller state needs no locks):

1. scheduling: runs a pass as soon as something changed (``kick``) and at least every
   ``SchedulerInterval`` seconds (BeginTime, planned starts); passes never overlap.
2. node health: marks nodes DOWN after SlurmdTimeout of silence.
3. purge: forgets jobs that ended more than MinJobAge ago (the store keeps them).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import ssl
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette

from muster.core.clock import Clock, SystemClock
from muster.core.config import Config
from muster.core.errors import StorageError
from muster.ctld.api import build_routes
from muster.ctld.controller import Action, Controller
from muster.ctld.dashview import Samples
from muster.ctld.dispatch import Dispatcher
from muster.ctld.loop import run_pass
from muster.ctld.openapi import openapi_route
from muster.ctld.steps import StepBook
from muster.ctld.store_pg import open_store
from muster.protocol.httpd import SignedClient, Verifier
from muster.protocol.signing import CTLD
from muster.sched.config import SchedConfig

log = logging.getLogger("musterctld")

TICK = 0.5  # seconds between the loop's liveness ticks (a stall is a gap of several)


class CtldApp:
    def __init__(
        self,
        config: Config,
        key: bytes,
        clock: Clock | None = None,
        db_path: str | None = None,
        tls_client: ssl.SSLContext | None = None,
    ) -> None:
        self.config = config
        self.tls_client = tls_client  # the context to reach agents with (TLSType=tls/muster)
        self.key = key
        self.clock = clock or SystemClock()
        self.hostname = socket.gethostname().split(".")[0]
        path = db_path or f"{config.state_save_location}/muster.db"
        self.store = open_store(config, path)  # SQLite, or PostgreSQL when configured
        self.controller = Controller(config, self.store, self.clock)
        self.controller.load()
        self.steps = StepBook(self.controller, key)  # job steps: srun, salloc
        self.steps.load()
        # Everything loaded so far lives for the process: keep it out of the cyclic GC's
        # full collections, which would otherwise pause a scheduling pass now and then.
        gc.collect()
        gc.freeze()
        self.sched_config = SchedConfig.from_settings(dict(config.settings))
        self.verifier = Verifier(
            key, self.clock, CTLD, f"{config.state_save_location}/replay-floor", require_cert=config.tls.enabled
        )
        self.client: SignedClient | None = None
        self.dispatcher: Dispatcher | None = None
        self._kick = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._pending_actions: set[asyncio.Task[Any]] = set()
        self.passes = 0
        self.samples = Samples()  # the dashboard's charts: utilisation and queue over time
        routes = build_routes(self)
        routes.append(openapi_route(self, routes))  # GET /openapi.json: the routes above, described
        self.asgi = Starlette(routes=routes, lifespan=self._lifespan)

    @asynccontextmanager
    async def _lifespan(self, app: Any) -> Any:
        await self.start()
        try:
            yield
        finally:
            await self.stop()

    async def start(self) -> None:
        self.client = SignedClient(
            self.key, self.clock, timeout=float(self.config.message_timeout), sender=CTLD, tls=self.tls_client
        )
        self.dispatcher = Dispatcher(self.controller, self.client)
        self._tasks = [
            asyncio.create_task(self._watch_stalls(), name="stalls"),
            asyncio.create_task(self._schedule_loop(), name="schedule"),
            asyncio.create_task(self._periodic(self._check_nodes, 1.0), name="nodes"),
            asyncio.create_task(self._periodic(self.controller.purge, 30.0), name="purge"),
            asyncio.create_task(self._periodic(self._sweep_steps, 1.0), name="steps"),
            asyncio.create_task(self._periodic(self._sample, self.samples.every), name="samples"),
        ]
        self._sample()
        self.kick()
        log.info(
            "musterctld started: %d nodes, %d jobs in memory", len(self.controller.nodes), len(self.controller.jobs)
        )

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._pending_actions:
            await asyncio.wait(self._pending_actions, timeout=5)
        if self.client is not None:
            await self.client.aclose()
        self.store.close()

    def kick(self) -> None:
        """Ask for a scheduling pass as soon as possible (coalesced)."""
        self._kick.set()

    def use_config(self, config: Config) -> None:
        """``scontrol reconfigure`` applied ``config`` to the controller (``ctld.reconfig``):
        the next pass schedules with its settings; calls to agents wait MessageTimeout."""
        self.config = config
        self.sched_config = SchedConfig.from_settings(dict(config.settings))
        if self.client is not None:
            self.client.set_timeout(float(config.message_timeout))

    def perform(self, actions: list[Action]) -> None:
        """Start side effects without waiting for them (the request is already durable)."""
        assert self.dispatcher is not None
        for action in actions:
            task = asyncio.create_task(self.dispatcher.run(action))
            self._pending_actions.add(task)
            task.add_done_callback(self._pending_actions.discard)

    def run_pass(self) -> int:
        """One scheduling pass (``ctld.loop.run_pass``); its launches go to dispatch."""
        try:
            result = run_pass(self.controller, self.sched_config, self.clock.now())
        except StorageError as exc:  # nothing started; the next pass tries again
            log.error("scheduling pass %d: starts not committed: %s", self.passes, exc)
            return 0
        self.perform(result.actions)
        if result.decisions.starts:
            self.steps.notify()  # srun and salloc wait for their allocations to start
        self.passes += 1
        return len(result.decisions.starts)

    async def _schedule_loop(self) -> None:
        while True:
            interval = float(self.config.get_int("SchedulerInterval", 5))  # reconfigure may change it
            try:
                await asyncio.wait_for(self._kick.wait(), timeout=interval)
            except TimeoutError:
                pass
            self._kick.clear()
            try:
                self.run_pass()
            except Exception:
                log.exception("scheduling pass %d failed; continuing", self.passes)
            # Let request handlers run between passes under a storm of submissions.
            await asyncio.sleep(0)

    def _sweep_steps(self) -> None:
        actions = self.steps.sweep()
        if actions:
            self.perform(actions)
            self.kick()

    def _sample(self) -> None:
        self.samples.take(self.controller.nodes.values(), self.controller.jobs.values(), self.clock.now())

    async def _watch_stalls(self) -> None:
        """Note every run of the loop, so that a stall (SIGSTOP, swap, a VM migration, a
        long pause) is seen as soon as the loop runs again: see ``Controller.loop_tick``."""
        while True:
            self.controller.liveness.loop_tick()
            await asyncio.sleep(TICK)

    def _check_nodes(self) -> None:
        self.controller.liveness.loop_tick()  # first: a stall just ended must not count as silence
        actions = self.controller.liveness.check_nodes()
        if actions:
            self.perform(actions)
            self.kick()

    async def _periodic(self, fn: Any, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            try:
                fn()
            except StorageError as exc:
                log.error("periodic task %s: %s", getattr(fn, "__name__", fn), exc)
            except Exception:
                log.exception("periodic task %s failed", getattr(fn, "__name__", fn))
