"""The agent's side of the conversation with the controller: register, heartbeat, report.

Two loops, both tolerant of a controller that is down or restarting (the jobs keep running
meanwhile; nothing here ever stops one except a ``kill`` list the controller sends):

* ``run`` registers, then heartbeats every ``interval`` seconds. It registers again
  whenever a heartbeat is answered 404 (the controller does not know this node, or asks it
  to re-register), after the controller was unreachable (it may have restarted and lost
  what it knew), and at once when a controller that just started or took over asks
  (``register_again``: scheduling resumes within a second, not a heartbeat later). While unreachable it retries with a backoff from 0.2 s up to ``interval``
  (at most 5 s). Every answer's ``kill`` list is obeyed: those jobs are terminated with
  reason ``cancel``.
* ``deliver`` sends the saved ``job_done`` reports, oldest first, deleting each once the
  controller acknowledged it (the controller treats a repeated report as acknowledged
  again). A network failure, a 401 or a 5xx keeps the report and retries with backoff. A
  report refused outright (400/404/409/422) three times is dropped with an error logged,
  so one malformed report cannot block the others forever.

``running`` lists travel as ``[[job_id, restart_count], ...]``; the controller also accepts
bare ids, but the attempt lets it recognise a stale run of a requeued job.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from muster.agent.state import StateDir
from muster.agent.supervisor import Supervisor
from muster.protocol.httpd import DaemonRequestError, SignedClient
from muster.protocol.messages import Heartbeat, JobDone, MessageError, Register, dump, read
from muster.protocol.versions import LEGACY, MIN_PROTOCOL

__all__ = ["ControllerLink"]

log = logging.getLogger(__name__)

MIN_BACKOFF = 0.2
MAX_BACKOFF = 5.0
MAX_REFUSALS = 3
_REFUSED = frozenset({400, 404, 409, 422})
_NETWORK_ERRORS = (httpx.HTTPError, OSError, ValueError)
_CALLED = object()  # a contact given up for a registration a new controller asked for


class ControllerLink:
    def __init__(
        self,
        client: SignedClient,
        base_url: str,
        node: str,
        registration: Callable[[], dict[str, Any]],
        supervisor: Supervisor,
        state: StateDir,
        interval: float,
    ) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.node = node
        self.registration = registration
        self.supervisor = supervisor
        self.state = state
        self.interval = interval
        self.max_backoff = max(MIN_BACKOFF, min(MAX_BACKOFF, interval))
        self.registered = False
        self.reachable: bool | None = None  # None: not tried yet
        self.ctld_protocol: int | None = None  # the controller's wire protocol, as it last answered
        self._reports_due = asyncio.Event()
        self._contact_due = asyncio.Event()
        self._register_now = asyncio.Event()
        self._refusals: dict[str, int] = {}
        self._batches = True  # the controller takes several reports in one request
        # Faults of this node to tell the controller (a failed Prolog or Epilog), carried by
        # heartbeats until one is answered; and the last health check's verdict.
        self.faults: list[dict[str, Any]] = []
        self.health: dict[str, Any] | None = None
        # Jobs' progress (muster.agent.progress): a source of new reports, polled at each
        # heartbeat; reports not yet heard by the controller, latest per job attempt.
        self.progress_source: Callable[[], list[dict[str, Any]]] | None = None
        self._progress: dict[tuple[int, int], dict[str, Any]] = {}
        # How heartbeats travel: alone (None), or with those of the other nodes this
        # process hosts (``agent.host.HeartbeatBatch.send``), answered the same way.
        self.send_heartbeat: Callable[[dict[str, Any]], Awaitable[Any]] | None = None
        # ``core.confhash`` of the muster.conf this agent read (at start, at SIGHUP), said
        # in every heartbeat: the controller reports a node whose file differs from its own.
        self.config_hash: str | None = None

    def wake(self) -> None:
        """There is a new report to deliver."""
        self._reports_due.set()

    def register_again(self, controller: int | None = None) -> None:
        """A controller that just started or took over asks this node to register with it
        at once (``POST /v1/register``): the next contact, now, is a registration, sent first
        to that controller (its index among the configured ones)."""
        if controller is not None:
            self.client.prefer_controller(controller)
        self.registered = False
        self._contact_due.set()
        self._register_now.set()  # a contact under way (to a hung controller?) gives way
        self.wake()  # reports waiting for a controller go to the new one too

    def add_fault(self, fault: dict[str, Any]) -> None:
        """Tell the controller of a fault of this node with the next heartbeat, at once."""
        self.faults.append(fault)
        self._contact_due.set()

    def set_health(self, ok: bool, reason: str) -> None:
        changed = self.health is None or self.health.get("ok") != ok or self.health.get("reason") != reason
        self.health = {"ok": ok, "reason": reason}
        if changed:
            self._contact_due.set()

    # --- register and heartbeat -------------------------------------------------------

    async def run(self) -> None:
        backoff = MIN_BACKOFF
        while True:
            delay = self.interval
            registering = not self.registered
            try:
                answer = await self._contact_unless_called()
                if answer is _CALLED:
                    continue  # a new controller asked for us: register with it now
                backoff = MIN_BACKOFF
                self._obey(answer)
                if registering and self.registered:
                    # a heartbeat at once: it says what ended here too (a registration does
                    # not), so that a new controller sees at once which launches never came
                    delay = 0.0
            except DaemonRequestError as exc:
                self._mark_reachable(True)
                if exc.status == 404 and self.registered:
                    log.warning("controller asks this node to register again: %s", exc)
                    self.registered = False
                    delay = 0.0
                elif exc.status == 400 and self.registered and exc.message.startswith("invalid Heartbeat"):
                    # an older controller took over (a rollback) and refuses a field of the
                    # protocol we registered in: register again, in its protocol
                    log.warning("controller refused heartbeat (%s): registering again", exc)
                    self.registered, self.ctld_protocol = False, None
                    delay, backoff = backoff, min(backoff * 2, self.max_backoff)
                else:
                    if exc.status == 401:
                        log.error("controller refused our signature (same key? clocks in sync?): %s", exc)
                    else:
                        log.warning(
                            "controller refused %s: %s", "heartbeat" if self.registered else "registration", exc
                        )
                    delay, backoff = backoff, min(backoff * 2, self.max_backoff)
            except _NETWORK_ERRORS as exc:
                self._mark_reachable(False, exc)
                self.registered = False
                delay, backoff = backoff, min(backoff * 2, self.max_backoff)
            self._contact_due.clear()
            if self.faults or self.health is not None and not self.health.get("ok"):
                delay = min(delay, self.max_backoff)  # what is wrong here must be heard soon
            try:
                await asyncio.wait_for(self._contact_due.wait(), delay)
            except TimeoutError:
                pass

    async def _contact_unless_called(self) -> Any:
        """``contact``, abandoned when a controller that just started or took over asks this
        node to register (the contact may be waiting on a hung controller meanwhile)."""
        self._register_now.clear()
        contact = asyncio.ensure_future(self.contact())
        called = asyncio.ensure_future(self._register_now.wait())
        try:
            await asyncio.wait({contact, called}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            called.cancel()
        if contact.done():
            return contact.result()
        contact.cancel()
        await asyncio.gather(contact, return_exceptions=True)
        self.registered = False
        return _CALLED

    async def _register(self, body: dict[str, Any]) -> Any:
        """Register in this build's protocol; a controller of an older one (muster 0.2.0)
        refuses the fields it does not know (400 "invalid Register"): then again, written
        for the oldest protocol accepted (``messages.dump``), so that either side of an
        upgrade may go first. Notes the controller's protocol from its answer."""
        msg = read(Register, body)
        url = f"{self.base_url}/v1/agent/register"
        try:
            answer = await self.client.post(url, dump(msg))
        except DaemonRequestError as exc:
            if exc.status != 400 or not exc.message.startswith("invalid Register"):
                raise
            log.info(
                "controller refused this protocol's registration (%s): registering in protocol %d", exc, MIN_PROTOCOL
            )
            answer = await self.client.post(url, dump(msg, MIN_PROTOCOL))
        protocol = answer.get("protocol") if isinstance(answer, dict) else None
        self.ctld_protocol = protocol if isinstance(protocol, int) else LEGACY
        return answer

    async def contact(self) -> Any:
        """One registration (when due) or one heartbeat; returns the controller's answer."""
        if not self.registered:
            registration = self.registration()
            answer = await self._register(registration)
            self._mark_reachable(True)
            self.registered = True
            log.info(
                "registered with the controller at %s (%d running jobs)",
                self.base_url,
                len(registration.get("running", [])),
            )
            self.wake()
            return answer
        faults = list(self.faults)
        body: dict[str, Any] = {
            "node": self.node,
            "running": self.supervisor.running_attempts(),
            # ended here, reports on their way: the controller must not think them lost
            "ended": self.state.ended(),
        }
        if faults:
            body["faults"] = faults
        if self.health is not None:
            body["health"] = self.health
        if self.config_hash:
            body["config_hash"] = self.config_hash
        if self.progress_source is not None:
            for report in self.progress_source():
                self._progress[(int(report["job_id"]), int(report["attempt"]))] = report
        progress = dict(self._progress)
        if progress:
            body["progress"] = list(progress.values())
        sent = self._written(Heartbeat, body)
        if self.send_heartbeat is not None:
            answer = await self.send_heartbeat(sent)
        else:
            answer = await self.client.post(f"{self.base_url}/v1/agent/heartbeat", sent)
        self._mark_reachable(True)
        self.faults = [f for f in self.faults if f not in faults]
        for key, report in progress.items():
            if self._progress.get(key) is report:
                del self._progress[key]
        return answer

    def _written(self, model: type[Heartbeat] | type[JobDone], body: dict[str, Any]) -> dict[str, Any]:
        """``body`` as the controller's protocol reads it (``messages.dump``: what it does
        not know left out, so that a report is never refused, and dropped, for a field an
        older controller does not know); the oldest protocol accepted until a registration
        answers. A body that does not fit its model goes as it is: the controller's refusal
        names the fault."""
        try:
            return dump(read(model, body), self.ctld_protocol or MIN_PROTOCOL)
        except MessageError:
            return body

    def _obey(self, answer: Any) -> None:
        if not isinstance(answer, dict):
            return
        for job_id in answer.get("kill") or []:
            try:
                jid = int(job_id[0] if isinstance(job_id, list | tuple) else job_id)
            except (TypeError, ValueError, IndexError):
                continue
            if jid in self.supervisor.jobs:
                log.warning("job %s: the controller does not place it here; terminating", jid)
                self.supervisor.terminate(jid, "cancel")

    def _mark_reachable(self, ok: bool, exc: BaseException | None = None) -> None:
        if ok and self.reachable is not True:
            if self.reachable is False:
                log.info("controller at %s reachable again", self.base_url)
        elif not ok and self.reachable is not False:
            log.warning("controller at %s unreachable (%s); retrying", self.base_url, exc)
        self.reachable = ok

    # --- reports ----------------------------------------------------------------------

    async def deliver(self) -> None:
        backoff = MIN_BACKOFF
        while True:
            self._reports_due.clear()
            ok = await self.deliver_once()
            if ok:
                backoff = MIN_BACKOFF
                timeout = max(self.interval, 5.0)  # a safety net: reports are woken for
            else:
                timeout, backoff = backoff, min(backoff * 2, self.max_backoff)
            try:
                await asyncio.wait_for(self._reports_due.wait(), timeout)
            except TimeoutError:
                pass

    async def deliver_once(self) -> bool:
        """Try every pending report once; False when some must be retried later. Several
        go in one request (``/v1/agent/jobs_done``, committed together); when that is not
        answered yes, they go one by one, each with its own refusals counted."""
        reports = self.state.reports()
        if len(reports) > 1 and self._batches:
            try:
                batch = {"reports": [self._written(JobDone, r) for _, r in reports]}
                await self.client.post(f"{self.base_url}/v1/agent/jobs_done", batch)
            except DaemonRequestError as exc:
                if exc.status == 404 and not exc.data:  # no such route: an older controller
                    self._batches = False
                log.debug("%d reports not accepted together (%s); one by one", len(reports), exc)
            except _NETWORK_ERRORS as exc:
                log.debug("%d reports not delivered: %s", len(reports), exc)
                return False
            else:
                for key, _report in reports:
                    log.debug("job_done %s acknowledged", key)
                    self._drop(key)
                return True
        all_ok = True
        for key, report in reports:
            try:
                await self.client.post(f"{self.base_url}/v1/agent/job_done", self._written(JobDone, report))
            except DaemonRequestError as exc:
                if exc.status not in _REFUSED:
                    log.warning("job_done %s not accepted yet: %s", key, exc)
                    return False
                refusals = self._refusals.get(key, 0) + 1
                self._refusals[key] = refusals
                if refusals >= MAX_REFUSALS:
                    log.error("job_done %s refused %d times (%s); dropping it: %r", key, refusals, exc, report)
                    self._drop(key)
                    continue
                log.warning("job_done %s refused (%s); will retry", key, exc)
                if exc.status == 404:
                    self.registered = False
                all_ok = False
                continue
            except _NETWORK_ERRORS as exc:
                log.debug("job_done %s not delivered: %s", key, exc)
                return False
            log.debug("job_done %s acknowledged", key)
            self._drop(key)
        return all_ok

    def _drop(self, key: str) -> None:
        self.state.drop_report(key)
        self._refusals.pop(key, None)
