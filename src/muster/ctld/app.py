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
import pwd
import socket
import ssl
from collections.abc import Sequence
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette

from muster.core.clock import Clock, SystemClock
from muster.core.config import Config
from muster.core.conftypes import instance_path
from muster.core.errors import StorageError
from muster.core.hostlist import compress
from muster.core.states import JobState
from muster.ctld.actions import Launch
from muster.ctld.agentversions import AgentVersions, ConfigMismatch
from muster.ctld.api import build_routes
from muster.ctld.certexpiry import CertExpiry
from muster.ctld.controller import Action, Controller
from muster.ctld.dashview import Samples
from muster.ctld.dispatch import Dispatcher
from muster.ctld.loop import run_pass
from muster.ctld.mailer import Mailer
from muster.ctld.mailnotes import MailNotes
from muster.ctld.openapi import openapi_route
from muster.ctld.partitions import with_created
from muster.ctld.passlog import PassLog
from muster.ctld.rpcstats import RpcStats
from muster.ctld.stats import ServerStats
from muster.ctld.steps import StepBook
from muster.ctld.store import Store
from muster.ctld.store_pg import open_store
from muster.ctld.triggers import INTERVAL as TRIGGER_INTERVAL
from muster.ctld.triggers import TriggerRunner
from muster.ctld.usercred import UserCredentials
from muster.protocol.httpd import SignedClient, Verifier
from muster.protocol.signing import CTLD
from muster.sched.config import SchedConfig

log = logging.getLogger("musterctld")

TICK = 0.5  # seconds between the loop's liveness ticks (a stall is a gap of several)
STOP_ACTIONS_WAIT = 0.5  # seconds a stop waits for the calls to agents in flight


def _slurm_user(config: Config) -> tuple[str, int]:
    """SlurmUser's name and uid: agents' requests count under it in sdiag."""
    name = config.slurm_user or "root"
    try:
        return name, pwd.getpwnam(name).pw_uid
    except KeyError:
        return name, 0


LAUNCHES_PER_REQUEST = 8  # a pass's launches to one node go this many to a request


class CtldApp:
    def __init__(
        self,
        config: Config,
        key: bytes,
        clock: Clock | None = None,
        db_path: str | None = None,
        tls_client: ssl.SSLContext | None = None,
        store: Store | None = None,
        instance: int = 0,
    ) -> None:
        self.config = config
        self.instance = instance  # which SlurmctldHost this is (0: the primary)
        self.tls_client = tls_client  # the context to reach agents with (TLSType=tls/muster)
        self.key = key
        self.clock = clock or SystemClock()
        self.hostname = socket.gethostname().split(".")[0]
        path = db_path or f"{config.state_save_location}/muster.db"
        # SQLite, or PostgreSQL when configured; an elected controller's store is opened by
        # ``ctld.standby`` (fenced on its lease epoch)
        self.store = store if store is not None else open_store(config, path)
        # the partitions scontrol created, kept in the store (ctld.partitions)
        config = self.config = with_created(config, self.store)
        self.controller = Controller(config, self.store, self.clock)
        self.controller.load()
        self.stats = ServerStats(self.clock.now())  # sdiag and /metrics (ctld.stats)
        self.controller.stats = self.stats
        # --mail-type notices and automation's node events, through MailProg (ctld.mailer)
        self.mailer = Mailer(lambda: self.controller.config, self.stats.registry)
        self.controller.mail = MailNotes(self.controller, self.mailer.send, self.clock.now())
        self.controller.mail.watch_running()
        self.trigger_runner = TriggerRunner()  # strigger's programs (ctld.triggers)
        self.stats.registry.register(CertExpiry(lambda: self.controller.config))  # /metrics: TLS expiry
        self.stats.registry.register(AgentVersions(lambda: self.controller.nodes.values()))
        self.stats.registry.register(ConfigMismatch(lambda: self.controller.nodes.values()))
        self.pass_log = PassLog(self.clock)
        self._store_open = True
        self.steps = StepBook(self.controller, key)  # job steps: srun, salloc
        self.steps.load()
        self.controller.training.replacements.steps_of = self.steps.steps_of  # (ctld.replacement)
        self.controller.hets.load()
        # Everything loaded so far lives for the process: keep it out of the cyclic GC's
        # full collections, which would otherwise pause a scheduling pass now and then.
        gc.collect()
        gc.freeze()
        self.sched_config = SchedConfig.from_settings(dict(config.settings))
        self.verifier = Verifier(
            key,
            self.clock,
            CTLD,
            instance_path(f"{config.state_save_location}/replay-floor", instance),
            require_cert=config.tls.enabled,
        )
        self.credentials = UserCredentials(config, key)  # AuthType: agent-signed, MUNGE too
        self.client: SignedClient | None = None
        self.dispatcher: Dispatcher | None = None
        self._kick = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []  # the loops, running for the process's life
        self._once: list[asyncio.Task[Any]] = []  # tasks that end by themselves (not loops)
        self._pending_actions: set[asyncio.Task[Any]] = set()
        self.passes = 0
        self.samples = Samples()  # the dashboard's charts: utilisation and queue over time
        routes = build_routes(self)
        routes.append(openapi_route(self, routes))  # GET /openapi.json: the routes above, described
        self.asgi = RpcStats(
            Starlette(routes=routes, lifespan=self._lifespan), self.stats, self.clock, _slurm_user(config)
        )

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
            asyncio.create_task(self._periodic(self._mail_tick, 1.0), name="mail"),
            asyncio.create_task(self._periodic(self._trigger_tick, TRIGGER_INTERVAL), name="triggers"),
        ]
        # the agents register now, not at their next heartbeat (a restart, a takeover);
        # until they do, none is judged on the time the loading took
        self.controller.serving(self.clock.now())
        self._once.append(asyncio.create_task(self.dispatcher.call_agents(self.instance), name="call-agents"))
        self._sample()
        self.kick()
        log.info(
            "musterctld started: %d nodes, %d jobs in memory", len(self.controller.nodes), len(self.controller.jobs)
        )

    async def stop(self) -> None:
        for t in self._tasks + self._once:
            t.cancel()
        await asyncio.gather(*self._tasks, *self._once, return_exceptions=True)
        if self._pending_actions:
            # calls to agents still in flight get this long (a stop takes 2 s at most): the
            # store holds what they carry out, and the agents' registration with the next
            # controller reconciles what they run with it (stale runs killed, lost ones ended)
            await asyncio.wait(self._pending_actions, timeout=STOP_ACTIONS_WAIT)
        await self.mailer.stop()
        await self.trigger_runner.stop()
        if self.client is not None:
            await self.client.aclose()
        self._store_open = False
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

    def perform(self, actions: Sequence[Action]) -> None:
        """Start side effects without waiting for them (the request is already durable).
        Several launches to one node (a pass's) go in one request."""
        assert self.dispatcher is not None
        by_host: dict[str, list[Launch]] = {}
        for action in actions:
            if (
                isinstance(action, Launch)
                and action.job.batch_host is not None
                and not self.dispatcher.gated(action.job)
            ):
                by_host.setdefault(action.job.batch_host, []).append(action)
        for host, launches in by_host.items():
            if len(launches) > 1:  # in requests of a few, each answered as soon as they run
                for i in range(0, len(launches), LAUNCHES_PER_REQUEST):
                    self._start(self.dispatcher.launch_many(host, launches[i : i + LAUNCHES_PER_REQUEST]))
        for action in actions:
            if isinstance(action, Launch) and self.dispatcher.gated(action.job):
                self._start(self.dispatcher.gated_launch(action))  # its other nodes checked first
            elif not (isinstance(action, Launch) and len(by_host.get(action.job.batch_host or "", ())) > 1):
                self._start(self.dispatcher.run(action))

    async def ask_agent(self, node: str, path: str, body: dict[str, Any]) -> Any:
        """A query to one node's agent, answered now (``Dispatcher.ask``)."""
        assert self.dispatcher is not None
        return await self.dispatcher.ask(node, path, body)

    def _start(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._pending_actions.add(task)
        task.add_done_callback(self._pending_actions.discard)

    # --- what the probes and sdiag ask (``context.Context``) -----------------------------

    def store_open(self) -> bool:
        return self._store_open

    def loops_stopped(self) -> list[str]:
        """The background loops that are not running (all of them before ``start``)."""
        if not self._tasks:
            return ["all"]
        return [t.get_name() for t in self._tasks if t.done()]

    def pending_actions(self) -> set[asyncio.Task[Any]]:
        return self._pending_actions

    def server_tasks(self) -> int:
        """Tasks on the controller's event loop (sdiag's "Server thread count")."""
        try:
            return len(asyncio.all_tasks())
        except RuntimeError:  # no running loop
            return 0

    def run_pass(self) -> int:
        """One scheduling pass (``ctld.loop.run_pass``); its launches go to dispatch. The
        pass is timed (phases and whole), counted for sdiag and /metrics, and logged once."""
        t0 = self.clock.monotonic()
        now = self.clock.now()
        try:
            # a het job's components follow their leader (ended, requeued) before the pass
            self.perform(self.controller.hets.sweep())
            result = run_pass(self.controller, self.sched_config, now, timer=self.clock.monotonic)
        except StorageError as exc:  # nothing started; the next pass tries again
            log.error("scheduling pass %d: starts not committed: %s", self.passes, exc, extra={"pass_id": self.passes})
            return 0
        seconds = self.clock.monotonic() - t0
        self.stats.observe_pass(result.decisions.stats, seconds, now)
        self.pass_log.log(self.passes, result.decisions.stats, seconds)
        for start in result.decisions.starts:  # as slurmctld logs each allocation
            job = self.controller.jobs.get(start.job_id)
            if job is not None and job.start_time is not None and job.state is JobState.RUNNING:
                log.info(
                    "sched: Allocate JobId=%d NodeList=%s #CPUs=%d Partition=%s",
                    start.job_id,
                    compress([a.node for a in start.alloc]),
                    sum(a.cpus for a in start.alloc),
                    start.partition,
                    extra={"job_id": start.job_id, "pass_id": self.passes},
                )
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
                log.exception("scheduling pass %d failed; continuing", self.passes, extra={"pass_id": self.passes})
            # Let request handlers run between passes under a storm of submissions.
            await asyncio.sleep(0)

    def _sweep_steps(self) -> None:
        actions = self.controller.hets.sweep() + self.steps.sweep()
        if actions:
            self.perform(actions)
            self.kick()

    def _mail_tick(self) -> None:
        """--mail-type=TIME_LIMIT_50/80/90: the running jobs that passed those shares."""
        if self.controller.mail is not None:
            self.controller.mail.time_limits(self.clock.now())

    def _trigger_tick(self) -> None:
        """strigger: the triggers that fired since the last check, their programs started."""
        for trig, arg in self.controller.triggers.check(self.clock.now()):
            log.info(
                "trigger %d (%s %s %s) fired: %s %s",
                trig.trig_id,
                trig.res_type,
                trig.res_id,
                trig.event,
                trig.program,
                arg,
            )
            self.trigger_runner.run(trig, arg)

    def _sample(self) -> None:
        self.samples.take(self.controller.nodes.values(), self.controller.jobs.values(), self.clock.now())

    async def _watch_stalls(self) -> None:
        """Note every run of the loop, so that a stall (SIGSTOP, swap, a VM migration, a
        long pause) is seen as soon as the loop runs again: see ``Controller.loop_tick``."""
        while True:
            self._tick()
            await asyncio.sleep(TICK)

    def _tick(self) -> None:
        gap = self.controller.liveness.loop_tick()
        if gap:
            self.stats.observe_stall(gap)

    def _check_nodes(self) -> None:
        self._tick()  # first: a stall just ended must not count as silence
        actions = self.controller.liveness.check_nodes()
        if actions:
            self.perform(actions)
            self.kick()
        if self.controller.resv.replace_nodes(self.clock.now()):  # DOWN nodes of reservations
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
