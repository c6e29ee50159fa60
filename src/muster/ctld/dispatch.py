"""The only place where the controller calls agents.

Each action becomes one signed HTTP request to the node's agent. Failures are reported
back to the controller (a launch that cannot reach its node is requeued); the scheduler
never waits on the network. An action for many nodes (a job's end, a signal) reaches them
at the same time, at most ``TreeWidth`` requests in flight, so that a 512-node job's end
takes the time of a few requests rather than of 512 in a row (and one silent node delays
no other). A batch job's launch goes to its batch host only: its ranks on the other nodes
start through srun's launch tree (``agent.steptree``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from pydantic import BaseModel

from muster.core.errors import StorageError
from muster.core.job import Job
from muster.core.states import JobState
from muster.ctld.actions import Action, Launch, NewAllocation, NewLimit, SignalJob, SuspendJob, Terminate
from muster.ctld.controller import Controller
from muster.ctld.hetjobs import launch_view
from muster.ctld.replacement import PREFLIGHT
from muster.ctld.steps import StepSignal
from muster.protocol.httpd import DaemonRequestError, SignedClient
from muster.protocol.messages import (
    AllocationRequest,
    EpilogJob,
    LaunchRequest,
    RegisterAgainRequest,
    SignalRequest,
    SuspendRequest,
    TerminateRequest,
    UpdateRequest,
    dump,
)
from muster.protocol.versions import ROUTE_SINCE

log = logging.getLogger("musterctld.dispatch")

RETRIES = 3  # a request that may not have arrived is sent again this many times at most
RETRY_DELAY = 1.0  # seconds before the first retry, growing by as much each time
CALL_AGENTS_AFTER = 0.2  # a starting controller asks the agents to register this long after
CALL_AGENTS_AT_ONCE = 16  # ... this many at a time
CALL_AGENT_TIMEOUT = 2.0  # ... each within this long (a node that is down answers nothing)
BUSY_RETRY = 1.0  # seconds between launches to a node where an older attempt still ends
BUSY_SLACK = 10.0  # ... for at most KillWait and this long; then the job is requeued
# For tests only: with this set to 1 the controller exits (as if killed) in place of sending
# a launch, after the start was committed: the crash window ``unlaunched`` recovers from.
CRASH_BEFORE_LAUNCH = "MUSTER_TEST_CRASH_BEFORE_LAUNCH"
# For tests only: a file's path; while that file exists, the next launch removes it and
# stops the controller (SIGSTOP) just before it is sent: a hung controller, continued later.
STOP_BEFORE_LAUNCH = "MUSTER_TEST_STOP_BEFORE_LAUNCH"


def _crash_before_launch() -> None:
    if os.environ.get(CRASH_BEFORE_LAUNCH) == "1":
        log.critical("%s=1: exiting before sending a launch (a test's crash)", CRASH_BEFORE_LAUNCH)
        os._exit(137)
    flag = os.environ.get(STOP_BEFORE_LAUNCH)
    if flag:
        try:
            os.unlink(flag)
        except FileNotFoundError:
            return
        log.critical("%s: stopping before sending a launch (a test's hang)", STOP_BEFORE_LAUNCH)
        os.kill(os.getpid(), signal.SIGSTOP)


def older_attempt_ends(message: str, fault: str | None) -> bool:
    """The agent refused a launch because an older attempt of the job still runs there (it
    is being killed: a requeue, a hang): a launch to retry once it is gone, not a failure."""
    return fault == "stale" and "still runs on" in message


class Dispatcher:
    def __init__(self, controller: Controller, client: SignedClient) -> None:
        self.ctl = controller
        self.client = client
        # The launches on their way, by job: a new time limit waits for its job's launch to
        # be answered (sent at once, it could reach the agent before the job does, and be lost).
        self._launching: dict[int, asyncio.Event] = {}
        # Launches waiting for an older attempt of their job to end on their node: since when
        # (monotonic), by (job, attempt); and the tasks that send them again.
        self._busy: dict[tuple[int, int], float] = {}
        self._retries: set[asyncio.Task[None]] = set()

    def _launches_begin(self, job_ids: list[int]) -> asyncio.Event:
        answered = asyncio.Event()
        for job_id in job_ids:
            self._launching[job_id] = answered
        return answered

    def _launches_end(self, job_ids: list[int], answered: asyncio.Event) -> None:
        for job_id in job_ids:
            if self._launching.get(job_id) is answered:
                del self._launching[job_id]
        answered.set()

    def _url(self, node_name: str, path: str) -> str:
        node = self.ctl.nodes[node_name]
        return self.client.url(node.addr, node.port, path)

    async def run(self, action: Action) -> None:
        try:
            if isinstance(action, Launch):
                await self._launch(action)
            elif isinstance(action, Terminate):
                job = self.ctl.jobs.get(action.job_id)
                request = TerminateRequest(
                    job_id=action.job_id,
                    restart_count=action.attempt,
                    reason=action.reason,
                    kill_wait=self.ctl.config.kill_wait,
                    job=EpilogJob.model_validate(_epilog_view(job, action.nodes)) if job is not None else None,
                )
                await self._each(
                    action.nodes, lambda node: self._post(node, "/v1/terminate", self._body(request, node))
                )
            elif isinstance(action, NewLimit):
                launching = self._launching.get(action.job_id)
                if launching is not None:
                    await launching.wait()
                update = UpdateRequest(job_id=action.job_id, time_limit=action.time_limit)
                await self._post(action.node, "/v1/update", self._body(update, action.node))
            elif isinstance(action, SignalJob):
                signalling = SignalRequest(
                    job_id=action.job_id,
                    signal=action.signal,
                    batch_only=action.batch_only,
                    whole_job=action.whole_job,
                    deadline=action.deadline,
                )
                route = "/v1/hang_evidence" if action.evidence else "/v1/signal"
                await self._each(  # not sent twice: a signal is not idempotent
                    action.nodes, lambda node: self._post(node, route, self._body(signalling, node), retry=False)
                )
            elif isinstance(action, SuspendJob):  # scontrol suspend/resume: idempotent on the agent
                suspend = SuspendRequest(job_id=action.job_id, suspend=action.suspend)
                await self._each(action.nodes, lambda node: self._post(node, "/v1/suspend", self._body(suspend, node)))
            elif isinstance(action, NewAllocation):  # a node replaced (idempotent on the agent)
                if not await self.replacement_gate(action):
                    return
                told = AllocationRequest.model_validate(
                    {
                        "job_id": action.job_id,
                        "attempt": action.attempt,
                        "alloc": action.alloc,
                        "old": action.old,
                        "new": action.new,
                        "cause": action.cause,
                        "time": action.time,
                    }
                )
                await self._each(action.nodes, lambda node: self._post(node, "/v1/allocation", self._body(told, node)))
            elif isinstance(action, StepSignal):  # scancel N.S
                body = action.body()
                await self._each(action.nodes, lambda node: self._post(node, "/v1/step_signal", body, retry=False))
        except Exception:  # a surprise must not kill the controller's loop
            log.exception("dispatch of %r failed", action)

    async def _each(self, nodes: list[str], call: Callable[[str], Awaitable[bool]]) -> None:
        """``call`` for every node, at most ``TreeWidth`` at a time."""
        if len(nodes) == 1:
            await call(nodes[0])
            return
        gate = asyncio.Semaphore(self.ctl.config.tree_width)

        async def one(node: str) -> None:
            async with gate:
                await call(node)

        await asyncio.gather(*(one(node) for node in nodes))

    async def _send(self, node: str, path: str, body: dict[str, object], wanted: Any = None) -> Any:
        """POST ``body`` to ``node``'s agent; an answer that says no raises
        ``DaemonRequestError``. A request that may or may not have reached the agent (a
        time-out, as after a stall of this controller, or a connection cut) is sent again
        (launch, terminate and update are idempotent on the agent) while ``wanted()`` says
        it is still wanted, at most ``RETRIES`` times; a refused connection is not."""
        for attempt in range(RETRIES + 1):
            try:
                return await self.client.post(self._url(node, path), body, to=node)
            except DaemonRequestError:
                raise
            except Exception as exc:  # noqa: BLE001 - httpx's and the OS's network errors
                if attempt == RETRIES or isinstance(exc, httpx.ConnectError | ConnectionRefusedError):
                    raise
                if wanted is not None and not wanted():
                    raise
                log.info(
                    "node %s: %s %s: no answer (%s); sending it again",
                    node,
                    path,
                    body.get("job_id"),
                    exc or type(exc).__name__,
                )
                await asyncio.sleep(RETRY_DELAY * (attempt + 1))
        raise AssertionError("unreachable")

    async def _post(self, node: str, path: str, body: dict[str, object], retry: bool = True) -> bool:
        if ROUTE_SINCE.get(path, 0) > self.ctl.agents.protocol(node):
            log.debug("node %s: its agent's protocol has no %s: not asked", node, path)
            return False
        try:
            if retry:
                await self._send(node, path, body)
            else:
                await self.client.post(self._url(node, path), body, to=node)
            return True
        except Exception as e:  # noqa: BLE001 - logged: the controller's loop goes on
            log.warning("node %s: %s %s failed: %s", node, path, body.get("job_id"), e or type(e).__name__)
            return False

    async def ask(self, node: str, path: str, body: dict[str, object]) -> Any:
        """POST ``body`` to ``node``'s agent once and return its answer: a query (sstat's
        step statistics), never retried; None where the agent's protocol lacks the route.
        An answer that says no raises ``DaemonRequestError``."""
        if ROUTE_SINCE.get(path, 0) > self.ctl.agents.protocol(node):
            return None
        return await self.client.post(self._url(node, path), body, to=node)

    async def call_agents(self, controller: int, delay: float = CALL_AGENTS_AFTER) -> int:
        """Ask every agent not registered yet to register now (``POST /v1/register``): a
        controller that just started or took over knows nothing of the nodes until they
        do, and their next heartbeat may be a minute away. ``controller``: this one's index
        among the SlurmctldHost lines (the agents try it first). Agents that do not answer
        register when they next reach a controller. Returns how many were asked."""
        await asyncio.sleep(delay)  # serving by then: the registrations find it listening
        names = [n.name for n in self.ctl.nodes.values() if not n.registered]
        body = dump(RegisterAgainRequest(controller=controller))
        # A few at a time, each briefly: nodes that are down must not hold the client's
        # requests in flight (launches share them) for MessageTimeout each.
        gate = asyncio.Semaphore(CALL_AGENTS_AT_ONCE)

        async def ask(name: str) -> None:
            async with gate:
                try:
                    await self.client.post(self._url(name, "/v1/register"), body, to=name, timeout=CALL_AGENT_TIMEOUT)
                except Exception as e:  # noqa: BLE001 - it registers when it next reaches us
                    log.debug("node %s: asked to register: %s", name, e or type(e).__name__)

        await asyncio.gather(*(ask(name) for name in names))
        log.info("asked %d node agent(s) to register with this controller", len(names))
        return len(names)

    async def launch_many(self, host: str, actions: list[Launch]) -> None:
        """Several launches to ``host`` in one request (``/v1/launches``), each answer
        handled as ``_launch`` handles its own. Sent again (no answer) with those still
        wanted only; refused whole (an agent without that route), they go one by one."""
        _crash_before_launch()
        job_ids = [a.job.job_id for a in actions]
        answered = self._launches_begin(job_ids)
        try:
            await self._launch_many(host, actions)
        finally:
            self._launches_end(job_ids, answered)

    async def _launch_many(self, host: str, actions: list[Launch]) -> None:
        try:
            attempts = [a.job.restart_count for a in actions]
            sent = list(zip(actions, attempts, [self._launch_body(a.job, host) for a in actions], strict=True))
            payload: dict[str, Any] = {"launches": [b for _a, _n, b in sent]}
            dropped: list[tuple[Launch, int, dict[str, Any]]] = []

            def wanted() -> bool:
                """Before sending again: only the launches still wanted go."""
                keep = [x for x in sent if self._wanted(x[0].job, host, x[1])]
                dropped.extend(x for x in sent if all(x is not k for k in keep))
                sent[:] = keep
                payload["launches"] = [b for _a, _n, b in keep]
                return bool(keep)

            try:
                answer = await self._send(host, "/v1/launches", payload, wanted)
            except DaemonRequestError:  # refused whole (no such route: an older agent)
                await asyncio.gather(*(self._launch(a) for a, _n, _b in sent))
                return
            except Exception as e:  # noqa: BLE001 - unreachable: the jobs go back to the queue
                log.warning("cannot reach %s to launch %d jobs: %s", host, len(actions), e or type(e).__name__)
                for a, n in zip(actions, attempts, strict=True):
                    self.ctl.launches.launch_failed(a.job.job_id, n, str(e) or type(e).__name__)
                return
            for a, n, _b in dropped:  # no longer wanted when the request was sent again
                self.ctl.launches.launch_failed(a.job.job_id, n, "no answer from its node")
            answers = answer.get("answers") if isinstance(answer, dict) else None
            if not isinstance(answers, list) or len(answers) != len(sent):
                raise ValueError(f"{host} answered {len(sent)} launches with {answer!r}")
            for (a, n, _b), one in zip(sent, answers, strict=True):
                job_id = a.job.job_id
                if isinstance(one, dict) and one.get("ok"):
                    self._busy.pop((job_id, n), None)
                    self.ctl.launches.launch_done(job_id)
                    continue
                # refused (a launch failure, or an answer with an error status): a failed launch
                error = str(one.get("error") or one) if isinstance(one, dict) else repr(one)
                fault = str(one.get("fault") or "node") if isinstance(one, dict) else "node"
                if older_attempt_ends(error, fault):
                    self._launch_later(a.job, host, n, error)
                    continue
                log.warning("job %s: launch refused by %s: %s", job_id, host, error)
                self.ctl.launches.launch_failed(job_id, n, error, fault)
        except Exception:  # a surprise must not kill the controller's loop
            log.exception("dispatch of %d launches to %s failed", len(actions), host)

    def _body(self, request: BaseModel, node: str) -> dict[str, Any]:
        """A typed request (``protocol.messages``) as the JSON body ``node``'s agent reads:
        in the protocol it registered with (fields it does not know left out)."""
        return dump(request, self.ctl.agents.protocol(node))

    def _launch_body(self, job: Job, host: str) -> dict[str, Any]:
        request = LaunchRequest.model_validate(
            {
                "job": launch_view(job, self.ctl.jobs),
                "cluster": self.ctl.config.cluster_name,
                "kill_wait": self.ctl.config.kill_wait,
            }
        )
        return self._body(request, host)

    def _wanted(self, job: Job, host: str, attempt: int) -> bool:
        """Still this attempt, still on a node that answers."""
        node = self.ctl.nodes.get(host)
        return job.state is JobState.RUNNING and job.restart_count == attempt and node is not None and node.responding

    def gated(self, job: Job) -> bool:
        """Whether the pre-flight gate runs on the job's nodes other than its batch host
        before its launch (``--preflight`` or its partition's ``Preflight=YES``; the batch
        host runs the gate inside the launch itself)."""
        if len(job.nodes) < 2:
            return False
        if job.spec.preflight:
            return True
        conf = self.ctl.config.partition(job.partition)
        return conf is not None and str(conf.params.get("Preflight", "NO")).lower() in ("yes", "true", "1", "on")

    async def gated_launch(self, action: Launch) -> None:
        """The pre-flight gate on the job's other nodes at once (``/v1/preflight``), then the
        launch. A node that fails it fails the launch (``launch_failed``, fault
        ``preflight``: drained with the evidence, the job requeued); any other failing node
        is recorded and drained too. An agent without the route (an older release) or one
        that cannot be reached does not hold the job: the node check judges silence."""
        job, attempt, host = action.job, action.job.restart_count, action.job.batch_host
        assert host is not None
        # the all-reduce (``PreflightAllReduce=YES``) needs every rank at once: the batch
        # host is asked too (its launch then runs its own checks again, not the all-reduce)
        allreduce = self.allreduce_wanted(job)
        asked = list(job.nodes) if allreduce else [n for n in job.nodes if n != host]
        answers = await asyncio.gather(*(self._check(job, n, allreduce) for n in asked))
        if not self._wanted(job, host, attempt):
            return
        failed = [(n, why) for n, (why, peer) in zip(asked, answers, strict=True) if why and not peer]
        waited = [(n, why) for n, (why, peer) in zip(asked, answers, strict=True) if why and peer]
        if waited and not failed:
            # the all-reduce failed and no rank failed by itself (a network between them, a
            # rendezvous that never formed): nobody is blamed; the job is requeued undrained
            log.warning("job %s: its pre-flight all-reduce failed, no node to blame: %s", job.job_id, waited[0][1])
            self.ctl.launches.launch_failed(job.job_id, attempt, waited[0][1], None)
            return
        if failed and job.spec.spare_nodes > 0:
            failed = await self._swap_before_start(job, failed)
            if not self._wanted(job, host, attempt):
                return
        if not failed:
            await self._launch(action)
            return
        now = self.ctl.clock.now()
        for node, why in failed[1:]:
            self.ctl.node_fault(node, "preflight", now, job=job, evidence=why, drain=why)
        node, why = failed[0]
        log.warning("job %s: %d node(s) failed its pre-flight gate, first %s: %s", job.job_id, len(failed), node, why)
        self.ctl.launches.launch_failed(job.job_id, attempt, why, "preflight", node)

    async def _swap_before_start(self, job: Job, failed: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """``--spare-nodes``: the nodes that failed the gate before the job's start are
        swapped for others (``ctld.replacement``, cause ``preflight``: each uses one of the
        N), each drained with the evidence; the nodes swapped in pass the gate in turn (one
        that fails is swapped again, not counted). The launch then carries the allocation
        with them. Returns the failures left (no node could replace them): the caller fails
        the launch (drained, requeued) as without spares."""
        replacements = self.ctl.training.replacements
        while failed:
            left: list[tuple[str, str]] = []
            fresh: list[str] = []
            now = self.ctl.clock.now()
            for node, why in failed:
                if node not in job.nodes:
                    continue
                index = job.nodes.index(node)
                try:
                    actions = replacements.job_lost_node(job, node, PREFLIGHT, why, now)
                except StorageError:
                    actions = None
                if actions is None:
                    left.append((node, why))
                    continue
                replacements.gate_done(job.job_id, job.nodes[index])  # checked below, before the launch
                log.warning("job %s: %s failed its pre-flight gate before the start: %s", job.job_id, node, why)
                self.ctl.node_fault(node, "preflight", now, job=job, evidence=why, drain=why)
                fresh.append(job.nodes[index])
                # the job's own actions (told its allocation, signalled) are for a running
                # script: its launch carries the allocation; a reclaimed spare's jobs are told
                for then in actions:
                    if getattr(then, "job_id", job.job_id) != job.job_id:
                        await self.run(then)
            if left:
                return left
            verdicts = await asyncio.gather(*(self._preflight(job, n) for n in fresh))
            failed = [(n, why) for n, why in zip(fresh, verdicts, strict=True) if why]
        return []

    def allreduce_wanted(self, job: Job) -> bool:
        """Whether the gate of this job (of several nodes) runs the all-reduce across them
        (``PreflightAllReduce=YES``, cluster-wide or on its partition's line)."""
        if len(job.nodes) < 2:
            return False
        on = ("yes", "true", "1", "on")
        conf = self.ctl.config.partition(job.partition)
        if conf is not None and "PreflightAllReduce" in conf.params:
            return str(conf.params["PreflightAllReduce"]).lower() in on
        return str(self.ctl.config.get("PreflightAllReduce") or "no").lower() in on

    async def _preflight(self, job: Job, node: str) -> str | None:
        """The pre-flight gate on one node of ``job`` (``/v1/preflight``, its own checks):
        what failed, or None (see ``_check``)."""
        return (await self._check(job, node))[0]

    async def _check(self, job: Job, node: str, allreduce: bool = False) -> tuple[str | None, bool]:
        """The pre-flight gate on one node of ``job`` (``/v1/preflight``; ``allreduce``: with
        its rank of the all-reduce): what failed and whether it failed only waiting on its
        peers; (None, False) when it passed, when the agent has no such route (an older
        release) or cannot be reached (the node check judges silence)."""
        request = LaunchRequest.model_validate(
            {
                "job": launch_view(job, self.ctl.jobs),
                "cluster": self.ctl.config.cluster_name,
                "kill_wait": 0,
                "allreduce": allreduce,
            }
        )
        # the all-reduce's answer comes after its ranks met (or timed out), torch's import on top
        extra: dict[str, Any] = {}
        if allreduce:
            extra["timeout"] = float(self.ctl.config.get_int("PreflightAllReduceTimeout", 60)) + 60.0
        try:
            answer = await self.client.post(
                self._url(node, "/v1/preflight"), self._body(request, node), to=node, **extra
            )
        except DaemonRequestError as e:
            log.warning("job %s: no pre-flight answer from %s (%s): not gated there", job.job_id, node, e)
            return None, False
        except Exception as e:  # noqa: BLE001 - unreachable: the node check judges it
            log.warning("job %s: cannot reach %s for its pre-flight: %s", job.job_id, node, e or type(e).__name__)
            return None, False
        if isinstance(answer, dict) and not answer.get("ok", True):
            return str(answer.get("reason") or "preflight failed"), bool(answer.get("peer"))
        return None, False

    async def replacement_gate(self, action: NewAllocation) -> bool:
        """A node swapped into a gated running job (``ctld.replacement``) passes the
        pre-flight gate before the job's other nodes are told of it. True: it passed (or the
        job is not gated, or is gone). False: it failed; it is drained with the evidence (a
        ledger record, kind ``preflight``) and the next candidate swapped in (its own actions
        dispatched, gated again), or, when none is left, the job ends NODE_FAIL and is
        requeued as after any lost node (``--no-kill``: it goes on without that node)."""
        job = self.ctl.jobs.get(action.job_id)

        def current(j: Job | None) -> bool:
            return (
                j is not None
                and j.state is JobState.RUNNING
                and j.restart_count == action.attempt
                and action.new in j.nodes
            )

        if job is None or not current(job) or not self.gated(job):
            self.ctl.training.replacements.gate_done(action.job_id, action.new)
            return True
        try:
            why = await self._preflight(job, action.new)
        finally:  # its steps may go on (placed on the repaired allocation, or the next one)
            self.ctl.training.replacements.gate_done(action.job_id, action.new)
        if why is None:
            return True
        now = self.ctl.clock.now()
        log.warning("job %s: replacement %s failed its pre-flight gate: %s", job.job_id, action.new, why)
        self.ctl.node_fault(action.new, "preflight", now, job=job, evidence=why, drain=why)
        if not current(job):  # ended or requeued meanwhile: nothing more to repair
            return False
        actions: list[Action] = []
        try:
            repaired = self.ctl.training.replacements.job_lost_node(job, action.new, PREFLIGHT, why, now)
            if repaired is not None:
                actions = repaired
            elif not self.ctl.lose_node(job, action.new, now, why):
                survivors = [n for n in job.nodes if n != action.new]
                self.ctl.node_failed_job(job, now, f"replacement {action.new} failed its pre-flight: {why}")
                actions = [Terminate(job.job_id, action.attempt, survivors, "node_fail")] if survivors else []
        except StorageError:
            return False
        for then in actions:
            await self.run(then)
        return False

    async def _launch(self, action: Launch) -> None:
        _crash_before_launch()
        answered = self._launches_begin([action.job.job_id])
        try:
            await self._launch_one(action)
        finally:
            self._launches_end([action.job.job_id], answered)

    async def _launch_one(self, action: Launch) -> None:
        job = action.job
        host = job.batch_host
        attempt = job.restart_count
        assert host is not None
        body = self._launch_body(job, host)

        def wanted() -> bool:
            return self._wanted(job, host, attempt)

        try:
            await self._send(host, "/v1/launch", body, wanted)
        except DaemonRequestError as e:
            # The agent answered why it could not start the job, and whose fault it is (it
            # also saved a report saying so, for the case this answer is lost); any other
            # refusal (HTTP 4xx: it cannot read or will not take this controller's launches;
            # 5xx) fails the launch too: requeued, the node judged by ``launch_failed``.
            if e.data.get("code") == "launch_failed" and older_attempt_ends(e.message, str(e.data.get("fault"))):
                self._launch_later(job, host, attempt, e.message)
                return
            log.warning("job %s: launch refused by %s: %s", job.job_id, host, e)
            if e.data.get("code") == "launch_failed":
                self.ctl.launches.launch_failed(job.job_id, attempt, e.message, str(e.data.get("fault") or "node"))
            else:
                self.ctl.launches.launch_failed(job.job_id, attempt, str(e), "node" if e.status < 500 else None)
        except Exception as e:  # noqa: BLE001 - unreachable: the job goes back to the queue
            log.warning("job %s: cannot reach %s to launch: %s", job.job_id, host, e or type(e).__name__)
            self.ctl.launches.launch_failed(job.job_id, attempt, str(e) or type(e).__name__)
        else:
            self._busy.pop((job.job_id, attempt), None)
            self.ctl.launches.launch_done(job.job_id)

    def _launch_later(self, job: Job, host: str, attempt: int, why: str) -> None:
        """Launch this attempt again in ``BUSY_RETRY`` s: an older attempt of the job is still
        being killed on ``host`` (its end frees the node). The launch counts as under way
        meanwhile (no "vanished from its node" judgement); after KillWait and ``BUSY_SLACK``
        the job is requeued (the node is not blamed)."""
        mono = self.ctl.clock.monotonic()
        since = self._busy.setdefault((job.job_id, attempt), mono)
        if mono - since > self.ctl.config.kill_wait + BUSY_SLACK:
            self._busy.pop((job.job_id, attempt), None)
            log.warning(
                "job %s: an older attempt still runs on %s after %.0f s: %s", job.job_id, host, mono - since, why
            )
            self.ctl.launches.launch_failed(job.job_id, attempt, why, None)
            return
        log.info("job %s: attempt %d waits for an older attempt to end on %s", job.job_id, attempt, host)
        self.ctl.launch_sent(job.job_id, mono)

        async def again() -> None:
            await asyncio.sleep(BUSY_RETRY)
            if self._wanted(job, host, attempt):
                await self._launch(Launch(job))
            else:
                self._busy.pop((job.job_id, attempt), None)

        task = asyncio.get_running_loop().create_task(again())
        self._retries.add(task)
        task.add_done_callback(self._retries.discard)


def _epilog_view(job: Job, nodes: list[str]) -> dict[str, Any]:
    """What a node's Epilog is told of the job whose end reaches it."""
    return {
        "user": job.user,
        "uid": job.uid,
        "gid": job.gid,
        "partition": job.partition,
        "spec": {"name": job.spec.name, "workdir": job.spec.workdir},
        "alloc": [{"node": a.node, "gpu_ids": list(a.gpu_ids)} for a in job.alloc] or [{"node": n} for n in nodes],
    }
