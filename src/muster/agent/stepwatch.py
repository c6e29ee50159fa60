"""sattach's door to a running step on this node: its output from the attach on, and input
to its tasks, beside the stream of the step's own srun.

=====================================  ===========================================================
``POST /v1/steps/watch``               ``{"watch", "sig"}`` (the controller's signed watch,
                                       ``protocol.stepcred.sign_watch``) -> a stream of frames:
                                       ``m`` ``{"node", "tasks"}`` first, then the step's ``o``,
                                       ``e`` and ``x`` frames written after the attach, then ``d``
                                       when the step has ended here
``POST /v1/steps/watch_stdin``         ``?watch=W&sig=S[&task=N]``, a chunked body copied to the
                                       stdin of the tasks here that take it (task ``N`` only with
                                       ``--input-filter``); its end leaves their stdin open
=====================================  ===========================================================

A watcher is no srun: it does not count as the step's attached stream (its leaving never
stops the step), it does not acknowledge the log (srun's progress alone paces the tasks'
output) and it reads the log through a descriptor of its own, so that the step's end and
its forgetting here do not cut the last output short. The watch is checked like a grant:
the cluster key's signature under its own purpose, its expiry, this node among its nodes.
An agent older than this module answers 404 ``no route``; sattach says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from typing import Any
from urllib.parse import parse_qs

from muster.agent.localstep import close_quietly
from muster.agent.pipes import write_pipe
from muster.agent.stepd import frames_in
from muster.agent.stepplan import StepLaunchError
from muster.agent.steps import CHUNK, StepRunner
from muster.protocol.httpd import read_body, send_json
from muster.protocol.stepcred import GrantError, verify_watch
from muster.protocol.stream import frame, json_frame

__all__ = ["watch_stdin", "watch_stream"]

log = logging.getLogger(__name__)

_FORWARDED = (b"o", b"e", b"x")  # what sattach is given of the step's log


def _watched(runner: StepRunner, text: str, sig: str) -> Any:
    """The running step the watch names here; ``StepLaunchError`` (403, 404) if none."""
    try:
        watch = verify_watch(runner.key, text, sig, runner.clock.now())
        key = (int(watch["job_id"]), int(watch["step_id"]))
        nodes = [str(n) for n in watch["nodes"]]
    except GrantError as e:
        raise StepLaunchError(str(e), 403, "auth") from None
    except (KeyError, TypeError, ValueError):
        raise StepLaunchError("malformed step credential", 403, "auth") from None
    if runner.node not in nodes:
        raise StepLaunchError(f"the watch does not name node {runner.node}", 403, "auth")
    if runner.closing:
        raise StepLaunchError(f"musterd on {runner.node} is stopping", 503, "unavailable")
    step = runner.steps.get(key)
    if step is None or step.log_fd < 0:
        raise StepLaunchError(f"no such step {key[0]}.{key[1]} here", 404, "not_found")
    return step


async def watch_stream(runner: StepRunner, receive: Any, send: Any) -> None:
    """Answer ``/v1/steps/watch``: the step's frames from now until its end here, the
    watcher's leaving or the agent's stopping (then without ``d``)."""
    try:
        body = json.loads(await read_body(receive) or b"{}")
    except ValueError:
        raise StepLaunchError("request body is not JSON") from None
    if not isinstance(body, dict):
        raise StepLaunchError("request body must be a JSON object")
    step = _watched(runner, str(body.get("watch") or ""), str(body.get("sig") or ""))
    fd = os.dup(step.log_fd)
    start = step.scan_pos  # before the first frame: what sattach's input causes comes after it
    try:
        log.info("step %s: sattach attached on %s", step.id_text, runner.node)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/x-muster-frames")],
            }
        )
        first = json_frame(b"m", -1, {"node": runner.node, "tasks": [t.task for t in step.tasks]})
        await send({"type": "http.response.body", "body": first, "more_body": True})
        gone = asyncio.Event()

        async def watch_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()
            step.wake()

        watcher = asyncio.create_task(watch_disconnect())
        try:
            ended = await _pump(runner, step, fd, start, gone, send)
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": frame(b"d", -1, b"") if ended else b""})
        finally:
            watcher.cancel()
    except OSError:
        pass
    finally:
        close_quietly(fd)


async def _pump(runner: StepRunner, step: Any, fd: int, pos: int, gone: asyncio.Event, send: Any) -> bool:
    """Send the log's frames from ``pos`` on; True once the step has ended here and all of
    its log is sent, False when the watcher went or the agent stops."""
    while not gone.is_set() and not runner.closing:
        over = step.finished or runner.steps.get(step.key) is not step
        limit = os.fstat(fd).st_size if over else step.scan_pos
        if pos < limit:
            data = os.pread(fd, min(CHUNK, limit - pos), pos)
            frames, used = frames_in(data)
            if not used:  # a frame cut at the end of an ended step's log: nothing more comes
                return True
            pos += used
            chunk = b"".join(frame(k, t, p) for k, t, p in frames if k in _FORWARDED)
            if chunk:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            continue
        if over:
            return True
        await step.changed()
    return False


async def watch_stdin(runner: StepRunner, scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answer ``/v1/steps/watch_stdin``: copy the body to the tasks' stdin as it comes."""
    query = parse_qs(scope.get("query_string", b"").decode())
    try:
        text, sig = query["watch"][0], query["sig"][0]
        only = int(query["task"][0]) if "task" in query else None
    except (KeyError, ValueError, IndexError):
        raise StepLaunchError("watch_stdin needs watch and sig") from None
    step = _watched(runner, text, sig)
    targets = [t for t in step.tasks if t.stdin_fd is not None and (only is None or t.task == only)]
    while True:
        message = await receive()
        if message["type"] == "http.disconnect" or runner.closing:
            break
        data = message.get("body", b"")
        for t in targets:
            if t.stdin_fd is not None and data and not await write_pipe(t.stdin_fd, data):
                close_quietly(t.stdin_fd)
                t.stdin_fd = None
        if not message.get("more_body"):
            break
    await send_json(send, 200, {"ok": True})
