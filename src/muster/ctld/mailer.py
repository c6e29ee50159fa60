"""``MailProg``, run for each ``Mail`` without ever holding up the controller.

``Mailer.send`` only queues (it is called inside commits, on the event loop); workers on
the loop run ``MailProg -s <subject> <recipient>`` (``/bin/mail`` by default, else
``/usr/bin/mail``, as Slurm chooses) with the message's environment, stdin empty, as the
controller's user, in a session of its own. Bounds:

* at most ``PROCESSES`` MailProg processes at once; the others wait in the queue;
* each is killed (its whole process group) after ``TIMEOUT`` seconds;
* the queue holds at most ``QUEUE`` messages; newer ones beyond are dropped and counted.

A failure (MailProg missing, not executable, a non-zero exit, a timeout) is logged once,
with what failed; later failures are only counted (``muster_mail_failures_total{why}``)
until a message goes through again, which is logged too. ``muster_mail_sent_total``,
``muster_mail_dropped_total`` and ``muster_mail_queued`` complete the picture
(docs/metrics.md, docs/runbook.md "Mail not delivered").
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import signal
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from muster.core.conftypes import Config
from muster.ctld.mailnotes import DEFAULT_MAIL_PROGS, Mail

__all__ = ["Mailer", "mail_prog"]

log = logging.getLogger("musterctld")

PROCESSES = 4
TIMEOUT = 60.0
QUEUE = 10_000
# What MailProg runs with besides the message's variables: a plain PATH, nothing of the
# controller's own environment.
BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


def mail_prog(config: Config) -> str:
    """``MailProg``, else Slurm's default: ``/bin/mail``, or ``/usr/bin/mail`` when only
    that one exists."""
    given = (config.get("MailProg") or "").strip()
    if given:
        return given
    for path in DEFAULT_MAIL_PROGS:
        if os.path.exists(path):
            return path
    return DEFAULT_MAIL_PROGS[0]


class Mailer:
    def __init__(
        self,
        config: Callable[[], Config],
        registry: CollectorRegistry | None = None,
        *,
        processes: int = PROCESSES,
        timeout: float = TIMEOUT,
        queue: int = QUEUE,
    ) -> None:
        self.config = config  # read per message: ``scontrol reconfigure`` may change MailProg
        self.processes = processes
        self.timeout = timeout
        self.limit = queue
        self.queue: collections.deque[Mail] = collections.deque()
        self.workers: set[asyncio.Task[None]] = set()
        self.running: set[asyncio.subprocess.Process] = set()
        self.failing = 0  # failures since the last message that went through
        self.dropping = False
        self.sent_count = 0
        self.failures_count = 0
        registry = registry if registry is not None else CollectorRegistry()
        self._sent = Counter("muster_mail_sent", "Messages MailProg accepted (exit status 0)", registry=registry)
        self._failed = Counter(
            "muster_mail_failures",
            "Messages MailProg did not take, by why (spawn, exit, timeout)",
            ["why"],
            registry=registry,
        )
        self._dropped = Counter("muster_mail_dropped", "Messages dropped: the mail queue was full", registry=registry)
        self._queued = Gauge("muster_mail_queued", "Messages waiting for or inside MailProg", registry=registry)

    # --- queueing (synchronous: called from commits) -------------------------------------

    def send(self, mail: Mail) -> None:
        """Queue ``mail``; a worker starts if fewer than ``processes`` run. Never blocks."""
        if len(self.queue) >= self.limit:
            self._dropped.inc()
            if not self.dropping:
                self.dropping = True
                log.error("mail: queue full (%d messages): dropping new ones, first: %s", self.limit, mail.subject)
            return
        self.queue.append(mail)
        self._gauge()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a test calling the controller directly): it stays queued
        if len(self.workers) < self.processes:
            task = asyncio.create_task(self._work(), name="mail")
            self.workers.add(task)
            task.add_done_callback(self.workers.discard)

    def _gauge(self) -> None:
        self._queued.set(len(self.queue) + len(self.running))

    async def stop(self) -> None:
        """Kill what MailProg runs and stop the workers (the controller is stopping); the
        messages still queued are lost, as Slurm's are."""
        for proc in list(self.running):
            _kill(proc)
        workers = list(self.workers)
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)

    # --- running MailProg ----------------------------------------------------------------

    async def _work(self) -> None:
        try:
            while self.queue:
                mail = self.queue.popleft()
                await self._deliver(mail)
                self._gauge()
        finally:
            # at once, not in a done callback: a message queued from now on starts a worker
            task = asyncio.current_task()
            if task is not None:
                self.workers.discard(task)

    async def _deliver(self, mail: Mail) -> None:
        prog = mail_prog(self.config())
        try:
            proc = await asyncio.create_subprocess_exec(
                prog,
                "-s",
                mail.subject,
                mail.recipient,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                env={**BASE_ENV, **mail.env},
                start_new_session=True,
            )
        except OSError as exc:
            self._failure("spawn", prog, mail, f"cannot run it: {exc.strerror or exc}")
            return
        self.running.add(proc)
        self._gauge()
        try:
            try:
                _, err = await asyncio.wait_for(proc.communicate(), self.timeout)
            except TimeoutError:
                _kill(proc)
                await proc.wait()
                self._failure("timeout", prog, mail, f"killed after {self.timeout:g} s")
                return
            except asyncio.CancelledError:  # the controller is stopping: leave nothing behind
                _kill(proc)
                raise
        finally:
            self.running.discard(proc)
        if proc.returncode != 0:
            lines = (err or b"").decode(errors="replace").strip().splitlines()
            said = f": {lines[-1][:200]}" if lines else ""
            self._failure("exit", prog, mail, f"exit status {proc.returncode}{said}")
            return
        self._sent.inc()
        self.sent_count += 1
        self.dropping = False
        if self.failing:
            log.warning("mail: MailProg %s delivers again, after %d failures", prog, self.failing)
            self.failing = 0

    def _failure(self, why: str, prog: str, mail: Mail, what: str) -> None:
        self._failed.labels(why).inc()
        self.failures_count += 1
        if not self.failing:
            log.error(
                "mail: MailProg %s failed (%s) for mail to %s (%s); further failures are counted in "
                "muster_mail_failures_total, not logged, until a message goes through",
                prog,
                what,
                mail.recipient,
                mail.subject,
            )
        self.failing += 1


def _kill(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
