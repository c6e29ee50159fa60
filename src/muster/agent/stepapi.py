"""srun's door to the node's job steps: launch, feed and signal them over HTTP.

srun talks to the agent directly (TCP ``NodeAddr:Port``), with no cluster-key signature:
what authorizes a launch is the *grant* the controller signed for this step
(``protocol.stepcred``), which srun carries verbatim. The grant fixes the job, the step, the
user, the nodes and the task layout; srun supplies the command, its environment, its
working directory and how to connect stdio.

=============================  ==================================================================
``POST /v1/steps/launch``      ``{"grant", "sig", "argv", "env", "cwd", "umask", "torch_env", "preserve_env",
                               "launch_host", "srun_port", "stdin", "stdout", "stderr",
                               "open_mode", "cpu_bind"}`` -> a stream of frames
                               (``protocol.stream``) that ends when every task here has
                               ended and its output is sent
``POST /v1/steps/stdin``       ``?job=J&step=S&token=T``, a chunked body copied to the stdin of
                               the tasks here that take it; its end closes their stdin
``POST /v1/steps/signal``      ``{"job_id", "step_id", "token", "signal", "kill"}`` ->
                               ``{"ok": true}``; ``kill`` stops the step (TERM, KillWait, KILL)
``POST /v1/steps/attach``      ``{"job_id", "step_id", "token", "frames"}`` -> the step's stream
                               again, after the first ``frames`` of its log (``o``, ``e``, ``x``
                               and ``m`` frames), then ``d``: srun resuming after this agent
                               restarted (503 while it stops, 404 for a step it does not know)
``POST /v1/steps/watch``       sattach's stream of a running step, and ``/v1/steps/watch_stdin``
                               its input (``agent.stepwatch``)
=============================  ==================================================================

``token`` is a random value the launch stream's first frame gives srun, so that only the
srun that launched a step can feed or signal it.

A launch that carries ``"tree"`` (a list of node names, possibly empty) comes through the
launch tree (``agent.steptree``): once the grant is checked it is answered 200 at once (so
that whoever relayed it knows this agent is alive, whatever its Prolog takes), relayed to
the nodes of that subtree (``"tree_width"``, ``"message_timeout"`` say how), and its stream
carries this node's frames and, ``t``-wrapped, those of every node below; a failure of this
node's own launch is an ``m`` frame ``{"failed", "judge": false}`` instead of an error
status. The stream ends when this node's part and every subtree's are over.

The frames come from the step's log, which the step's supervisor (``agent.stepd``)
writes and which outlives the agent; a stopping agent ends its streams without their ``d``
frame, and srun attaches to the next one.

``StepApi`` parses and answers; what a launch, an input or a signal does is the step
runner's (``agent.steps``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import signal
import ssl
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs

from muster.agent.localstep import close_quietly
from muster.agent.pipes import write_pipe as _write_all
from muster.agent.stepd import frames_in
from muster.agent.stepplan import StepLaunchError
from muster.agent.steps import CHUNK, StepRunner
from muster.agent.steptree import Relay
from muster.agent.stepwatch import watch_stdin, watch_stream
from muster.protocol.httpd import read_body
from muster.protocol.stepcred import GrantError, verify_grant
from muster.protocol.stream import frame, json_frame

__all__ = ["StepApi"]

log = logging.getLogger(__name__)


class StepApi:
    """The ASGI app for ``/v1/steps/*`` on the agent's TCP socket, over a ``StepRunner``."""

    def __init__(self, runner: StepRunner, relay_tls: ssl.SSLContext | None = None) -> None:
        self.runner = runner
        self.relay_tls = relay_tls  # TLSType=tls/muster: how this agent reaches the nodes it relays to

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path, method = scope["path"], scope["method"]
        try:
            if method != "POST":
                raise StepLaunchError("method not allowed", 405, "invalid")
            if path == "/v1/steps/launch":
                await self._launch(receive, send)
            elif path == "/v1/steps/stdin":
                await self._stdin(scope, receive, send)
            elif path == "/v1/steps/signal":
                await self._signal_request(receive, send)
            elif path == "/v1/steps/attach":
                await self._attach(receive, send)
            elif path == "/v1/steps/watch":  # sattach (agent.stepwatch)
                await watch_stream(self.runner, receive, send)
            elif path == "/v1/steps/watch_stdin":
                await watch_stdin(self.runner, scope, receive, send)
            else:
                raise StepLaunchError(f"no route {path}", 404, "not_found")
        except StepLaunchError as e:
            await _json(send, e.status, {"error": str(e), "code": e.code})

    async def _launch(self, receive: Any, send: Any) -> None:
        body = _parse_json(await read_body(receive))
        if isinstance(body.get("tree"), list):
            await self._launch_tree(body, receive, send)
            return
        step = await self.runner.launch(body)
        step.attached += 1
        started = [t.task for t in step.tasks]
        first = json_frame(b"m", -1, {"started": started, "token": step.token, "node": self.runner.node})
        await self._stream(step, first, 0, receive, send)

    async def _attach(self, receive: Any, send: Any) -> None:
        """srun again, after this agent restarted or its stream broke: the step's frames
        after the ``frames`` srun has had (``o``, ``e``, ``x`` and ``m``), then ``d``."""
        body = _parse_json(await read_body(receive))
        try:
            key = (int(body["job_id"]), int(body["step_id"]))
            skip = max(0, int(body.get("frames") or 0))
        except (KeyError, TypeError, ValueError):
            raise StepLaunchError("attach needs job_id, step_id, token and frames") from None
        step = self.runner.attach(key[0], key[1], str(body.get("token") or ""))
        if step is None:
            raise StepLaunchError(f"no such step {key[0]}.{key[1]} here", 404, "not_found")
        log.info("step %s: srun reattached on %s after %d frame(s)", step.id_text, self.runner.node, skip)
        await self._stream(step, b"", skip, receive, send)

    async def _stream(self, step: Any, first: bytes, skip: int, receive: Any, send: Any) -> None:
        """Answer with the step's frames (after ``first``) until its ``d``, srun's leaving or
        the agent's stopping; then the runner is told (``detach``)."""
        delivered = False
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/x-muster-frames")],
                }
            )
            gone = asyncio.Event()

            async def watch_disconnect() -> None:
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        gone.set()
                        step.wake()
                        return

            watcher = asyncio.create_task(watch_disconnect())
            try:
                if first:
                    await send({"type": "http.response.body", "body": first, "more_body": True})
                async for data, last in self._output(step, gone, skip):
                    await send({"type": "http.response.body", "body": data, "more_body": not last})
                    delivered = last
                if not delivered and not gone.is_set():  # the agent stops: srun reconnects later
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                watcher.cancel()
        except OSError:
            pass
        finally:
            self.runner.detach(step, delivered)

    async def _launch_tree(self, body: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            grant = verify_grant(
                self.runner.key, str(body.get("grant") or ""), str(body.get("sig") or ""), self.runner.clock.now()
            )
        except GrantError as e:  # refused here, and relayed nowhere
            raise StepLaunchError(str(e), 403, "auth") from None
        width, timeout = (
            _bounded(body.get("tree_width"), 50, 1, 65533),
            _bounded(body.get("message_timeout"), 10, 1, 300),
        )
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/x-muster-frames")],
            }
        )
        out: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=64)
        relay = Relay(body, grant, [str(n) for n in body["tree"]], width, timeout, self.relay_tls, out)
        producers = relay.start() + 1  # the subtrees first: they start while this node does
        # through a relay: when it goes (its agent restarting), srun asks this node directly
        grace = float(timeout) if body.get("relayed") else 0.0
        local = asyncio.create_task(self._pump_local(body, out, grace))

        async def write() -> None:
            left = producers
            while left:
                item = await out.get()
                chunks = []
                while True:
                    if item is None:
                        left -= 1
                    else:
                        chunks.append(item)
                    if out.empty():
                        break
                    item = out.get_nowait()
                if chunks:
                    await send({"type": "http.response.body", "body": b"".join(chunks), "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def watch_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        writer, watcher = asyncio.create_task(write()), asyncio.create_task(watch_disconnect())
        closing = asyncio.create_task(self.runner.closed.wait())  # the agent stops: srun resumes each node
        try:
            await asyncio.wait({writer, watcher, closing}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (writer, watcher, local, closing):
                task.cancel()  # srun went away (or the answer is over): nothing below goes on
            relay.cancel()
        if writer.done() and not writer.cancelled() and isinstance(writer.exception(), Exception):
            log.info("step launch stream ended: %s", writer.exception())

    async def _pump_local(self, body: dict[str, Any], out: asyncio.Queue[bytes | None], grace: float = 0.0) -> None:
        """This node's own part of a tree launch: its frames on ``out``, then ``None``;
        ``grace``: how long the step waits for srun when the stream ends early."""
        launching = asyncio.ensure_future(self.runner.launch(body))
        try:
            step = await asyncio.shield(launching)
        except Exception as e:  # noqa: BLE001 - whatever it was, srun is told, by this node's name
            if not isinstance(e, StepLaunchError):
                log.exception("step launch failed")
            await out.put(json_frame(b"m", -1, {"failed": str(e), "judge": False}) + frame(b"d", -1, b""))
            await out.put(None)
            return
        except asyncio.CancelledError:  # srun went away while the tasks were starting
            launching.add_done_callback(self._detach_started)
            raise
        step.attached += 1
        delivered = False
        try:
            started = [t.task for t in step.tasks]
            await out.put(json_frame(b"m", -1, {"started": started, "token": step.token, "node": self.runner.node}))
            async for data, last in self._output(step):
                await out.put(data)
                delivered = last
        finally:
            self.runner.detach(step, delivered, grace)
        await out.put(None)

    async def _output(
        self, step: Any, gone: asyncio.Event | None = None, skip: int = 0
    ) -> AsyncIterator[tuple[bytes, bool]]:
        """The step's frames from its log as they come (``p`` frames kept back, the first
        ``skip`` of the others too: srun had them), then its ``d`` frame (``True``: the
        last); stops early once ``gone`` (srun went away) is set or the agent stops. srun's
        progress through the log is told to the supervisor (its back-pressure)."""
        pos = 0
        while not (gone is not None and gone.is_set()) and not self.runner.closing:
            if pos < step.scan_pos and step.log_fd >= 0:
                data = os.pread(step.log_fd, min(CHUNK, step.scan_pos - pos), pos)
                frames, used = frames_in(data)
                pos += used
                chunks = []
                for kind, task, payload in frames:
                    if kind == b"p":
                        continue
                    if skip:
                        skip -= 1
                        continue
                    chunks.append(frame(kind, task, payload))
                if chunks:
                    yield b"".join(chunks), False
                self.runner.ack(step, pos)
                continue
            if step.finished:
                yield frame(b"d", -1, b""), True
                return
            await step.changed()

    def _detach_started(self, launching: asyncio.Future[Any]) -> None:
        if not launching.cancelled() and launching.exception() is None:
            step = launching.result()
            step.attached += 1
            self.runner.detach(step, False)

    async def _stdin(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        query = parse_qs(scope.get("query_string", b"").decode())
        try:
            key = (int(query["job"][0]), int(query["step"][0]))
            token = query["token"][0]
        except (KeyError, ValueError, IndexError):
            raise StepLaunchError("stdin needs job, step and token") from None
        step = self.runner.steps.get(key)
        if step is None or not secrets.compare_digest(step.token, token):
            raise StepLaunchError(f"no such step {key[0]}.{key[1]} here", 404, "not_found")
        targets = [t for t in step.tasks if t.stdin_fd is not None]

        async def feed() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                data = message.get("body", b"")
                for t in targets:
                    if t.stdin_fd is not None and data:
                        if not await _write_all(t.stdin_fd, data):
                            close_quietly(t.stdin_fd)
                            t.stdin_fd = None
                if not message.get("more_body"):
                    return

        # A stopping agent ends the stream at once (its server waits for every request):
        # the tasks' stdin then ends with the agent, the steps go on.
        feeding, closing = asyncio.ensure_future(feed()), asyncio.ensure_future(self.runner.closed.wait())
        try:
            await asyncio.wait({feeding, closing}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            feeding.cancel()
            closing.cancel()
            for t in targets:
                if t.stdin_fd is not None:
                    if (
                        t.pty and not self.runner.closing
                    ):  # a terminal's end of input is ^D (twice: after a partial line too)
                        await _write_all(t.stdin_fd, b"\x04\x04")
                    close_quietly(t.stdin_fd)
                    t.stdin_fd = None
        if feeding.done() and not feeding.cancelled() and feeding.exception() is not None:
            raise feeding.exception()  # type: ignore[misc]
        if self.runner.closing:
            await _json(send, 503, {"error": f"musterd on {self.runner.node} is stopping", "code": "unavailable"})
            return
        await _json(send, 200, {"ok": True})

    async def _signal_request(self, receive: Any, send: Any) -> None:
        body = _parse_json(await read_body(receive))
        try:
            key = (int(body["job_id"]), int(body["step_id"]))
            sig = int(body.get("signal") or signal.SIGTERM)
        except (KeyError, TypeError, ValueError):
            raise StepLaunchError("signal needs job_id, step_id and signal") from None
        step = self.runner.steps.get(key)
        if step is None or not secrets.compare_digest(step.token, str(body.get("token") or "")):
            raise StepLaunchError(f"no such step {key[0]}.{key[1]} here", 404, "not_found")
        if body.get("kill") and sig == signal.SIGKILL:
            self.runner.kill_at_once(step)  # srun's -W, --quit-on-interrupt: Slurm's SIGKILL
        elif body.get("kill"):
            self.runner.stop(step, "cancel", None)
        else:
            self.runner.signal_tasks(step, sig)
        await _json(send, 200, {"ok": True})


def _bounded(value: Any, default: float, low: float, high: float) -> int:
    """A number srun passed on (not signed: only bounded), or ``default``."""
    try:
        return int(min(high, max(low, float(value))))
    except (TypeError, ValueError):
        return int(default)


def _parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        raise StepLaunchError("request body is not JSON") from None
    if not isinstance(body, dict):
        raise StepLaunchError("request body must be a JSON object")
    return body


async def _json(send: Any, status: int, data: dict[str, Any]) -> None:
    payload = json.dumps(data).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": payload})
