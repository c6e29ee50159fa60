"""Group commits: the agents' reports of ended runs that arrive together are committed in
one transaction, so one fsync acknowledges them all.

A report is answered only after the commit that holds it, as before: an agent keeps a
report until it is acknowledged, so what is acknowledged is durable. Reports are gathered
while the event loop is busy (``submit`` queues one and the first schedules the flush for
the loop's next turn), which is when there are many: a thousand-task array ends a few
reports at a time on every node. A group that fails (its commit, or one report in it)
is undone whole, in the store and in memory, and its reports are then applied one by one,
as if they had come alone, so that one bad report fails alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from muster.ctld.actions import Action
from muster.ctld.controller import Controller

log = logging.getLogger("musterctld.commits")


class GroupCommit:
    """Reports applied by ``apply`` (``Launches.job_done``), committed together."""

    def __init__(self, ctl: Controller, apply: Callable[[Any], list[Action]]) -> None:
        self.ctl = ctl
        self.apply = apply
        self._queue: list[tuple[Any, asyncio.Future[list[Action]]]] = []
        self.commits = 0  # group transactions committed (what a test counts)

    async def submit(self, body: Any) -> list[Action]:
        """Apply one report within the next group; return its actions once committed."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[list[Action]] = loop.create_future()
        self._queue.append((body, done))
        if len(self._queue) == 1:
            loop.call_soon(self.flush)
        return await done

    async def submit_many(self, bodies: list[Any]) -> list[list[Action] | BaseException]:
        """Apply several reports within the next group; each one's actions, or the error
        it met, once committed."""
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[list[Action]]] = []
        first = not self._queue
        for body in bodies:
            done: asyncio.Future[list[Action]] = loop.create_future()
            self._queue.append((body, done))
            futures.append(done)
        if first and futures:
            loop.call_soon(self.flush)
        return list(await asyncio.gather(*futures, return_exceptions=True))

    def flush(self) -> None:
        batch, self._queue = self._queue, []
        if len(batch) == 1:
            self._alone(*batch[0])
            return
        results = []
        try:
            with self.ctl.store.group():
                for body, _done in batch:
                    results.append(self.apply(body))
        except Exception as exc:
            log.warning("a group of %d reports was not committed (%s); applying them one by one", len(batch), exc)
            ids = [b.get("job_id") for b, _d in batch if isinstance(b, dict)]
            self.ctl.reload_jobs(self.ctl.jobs[i] for i in ids if isinstance(i, int) and i in self.ctl.jobs)
            for body, done in batch:
                self._alone(body, done)
            return
        self.commits += 1
        for (_body, done), actions in zip(batch, results, strict=True):
            if not done.done():
                done.set_result(actions)

    def _alone(self, body: Any, done: asyncio.Future[list[Action]]) -> None:
        try:
            actions = self.apply(body)
        except Exception as exc:  # the handler answers it as it would have
            if not done.done():
                done.set_exception(exc)
            return
        if not done.done():
            done.set_result(actions)
