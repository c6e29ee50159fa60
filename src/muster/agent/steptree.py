"""A step's launch relayed down the launch tree (Slurm's ``TreeWidth``), and the answers of
the nodes below merged into this node's own stream to srun.

srun contacts at most ``TreeWidth`` agents itself; each gets, with the launch, the names of
the nodes of its *subtree* (``"tree"``). Such an agent checks the grant, then passes the very
same launch (the controller's grant and signature, untouched: every node checks them itself,
so no agent can widen what it relays) to the heads of at most ``width`` smaller subtrees
(``core.launchtree.subtrees``), each with its own part of the tree, while it starts its own
tasks. The address and port of every node come from the grant (signed), never from the
request, so a launch cannot make an agent connect anywhere the controller did not name.

What comes back up is one stream of frames (``protocol.stream``): this node's own, and
each node's below it wrapped in a ``t`` frame, ``<name>\\n<its frames>``, so that srun knows
whose output, exits, tokens and errors they are. A node below that cannot be reached, does
not answer within ``timeout`` (a stopped agent: the kernel accepts the connection but
nobody answers), refuses the launch, or whose relay is lost before its tasks end, is
reported by name in a ``t``-wrapped ``m`` frame ``{"failed": why, "judge": bool}``:
``judge`` true when it is for the controller to say whether the node died (the node did
not answer), false when the node is alive and refused, or was cut off with its relay. A
head that fails before it answered fails alone: the next node of its group takes its
place, with the rest of the group (Slurm's forwarding does the same).
Nothing waits longer than ``timeout`` for a node's first answer, so a dead or stopped agent
anywhere in the tree is a named failure at srun after about ``timeout`` seconds, not a hang.

Back-pressure: merged frames go through one bounded queue to the HTTP response; a relay
that cannot put stops reading its child, whose TCP window then fills, and so on down.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from typing import Any

from muster.core.launchtree import subtrees
from muster.protocol.stream import ChunkedDecoder, FrameDecoder, StreamError, frame, json_frame

__all__ = ["Relay", "failure_frame", "tagged"]

log = logging.getLogger(__name__)

HEAD_LIMIT = 65536  # bytes of an answer's status line and headers


def tagged(name: str, frames: bytes) -> bytes:
    """``frames`` (complete ones) as node ``name``'s, inside one ``t`` frame."""
    return frame(b"t", -1, name.encode() + b"\n" + frames)


def failure_frame(name: str, why: str, judge: bool) -> bytes:
    """Node ``name``'s part of the step failed before its tasks ended: ``why``."""
    return tagged(name, json_frame(b"m", -1, {"failed": why, "judge": judge}) + frame(b"d", -1, b""))


class Relay:
    """The launch passed on to this node's subtree; every answer put on ``out`` as bytes of
    complete frames, and one ``None`` per child when that child's subtree is over."""

    def __init__(
        self,
        body: dict[str, Any],
        grant: dict[str, Any],
        tree: list[str],
        width: int,
        timeout: float,
        tls: ssl.SSLContext | None,
        out: asyncio.Queue[bytes | None],
    ) -> None:
        self.body = body
        self.width = width
        self.timeout = timeout
        self.tls = tls
        self.out = out
        step = grant.get("step") or {}
        names, addrs, ports = step.get("nodes") or [], step.get("addrs") or [], step.get("ports") or []
        self.where = {str(n): (str(a), int(p)) for n, a, p in zip(names, addrs, ports, strict=False)}
        self.children = subtrees([str(n) for n in tree], width)
        self.tasks: list[asyncio.Task[None]] = []

    def start(self) -> int:
        """Contact every child; returns how many ``None`` will come on ``out``."""
        self.tasks = [asyncio.create_task(self._child(group)) for group in self.children]
        return len(self.tasks)

    def cancel(self) -> None:
        """srun went away: close every child's connection (each then stops its step and
        cancels its own relays)."""
        for task in self.tasks:
            task.cancel()

    async def _child(self, group: list[str]) -> None:
        """Relay to ``group``'s head; a head that fails before it answered fails alone, and
        the next node of the group takes its place (as Slurm's forwarding does)."""
        while group and not await self._relay(group):
            group = group[1:]
        await self.out.put(None)

    async def _relay(self, group: list[str]) -> bool:
        """The launch through ``group[0]`` to the rest of ``group``: False when the head
        failed before it answered (it is reported; the others are not yet contacted)."""
        head, rest = group[0], group[1:]
        pending = dict.fromkeys(group)  # the nodes whose part is not over yet, in order
        why, judge_head, answered = "", True, False
        writer: asyncio.StreamWriter | None = None
        try:
            where = self.where.get(head)
            if where is None:
                raise _Refused(f"{head} is not in the step's grant (no address for it)")
            # "relayed": a node below keeps its step a moment when this relay goes (srun
            # then asks it directly: ``StepRunner.detach``)
            payload = json.dumps({**self.body, "tree": rest, "relayed": True}).encode()
            reader, writer = conn = await asyncio.wait_for(self._connect(head, *where), self.timeout)
            conn[1].write(
                (
                    f"POST /v1/steps/launch HTTP/1.1\r\nHost: {where[0]}:{where[1]}\r\nConnection: close\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
                ).encode()
                + payload
            )
            chunks = await asyncio.wait_for(_answer_head(reader), self.timeout)
            answered = True
            await self._forward(head, reader, chunks, pending)
            why = "connection closed before its tasks ended"
        except _Refused as e:
            why, judge_head = str(e), False
        except TimeoutError:
            why = f"no answer within {self.timeout:g} s"
        except (OSError, StreamError, ValueError, asyncio.IncompleteReadError) as e:
            why = f"cannot reach it: {getattr(e, 'strerror', None) or e}"
        except Exception as e:  # noqa: BLE001 - a surprise here must not leave srun waiting
            log.exception("relaying a step launch to %s", head)
            why = f"relay failed: {e}"
        finally:
            if writer is not None:
                writer.close()
        if head in pending:
            await self.out.put(failure_frame(head, why, judge_head))
            log.warning("step launch: %s failed: %s", head, why)
        if not answered:
            return False
        for name in rest:
            if name in pending:
                await self.out.put(failure_frame(name, f"lost with its relay {head} ({why})", False))
        return True

    async def _forward(
        self, head: str, reader: asyncio.StreamReader, chunks: ChunkedDecoder, pending: dict[str, None]
    ) -> None:
        """Pass the head's stream on, its own frames wrapped; ``pending`` loses each node
        whose part is over."""
        frames = FrameDecoder()
        while pending and not chunks.done:
            data = await reader.read(262144)
            if not data:
                return
            own: list[bytes] = []
            merged: list[bytes] = []
            for kind, task, payload in frames.feed(chunks.feed(data)):
                if kind == b"t":
                    tag, _, inner = payload.partition(b"\n")
                    if any(k == b"d" for k, _t, _p in FrameDecoder().feed(inner)):
                        pending.pop(tag.decode(errors="replace"), None)
                    merged.append(frame(kind, task, payload))
                else:
                    if kind == b"d":
                        pending.pop(head, None)
                    own.append(frame(kind, task, payload))
            if own:
                merged.append(tagged(head, b"".join(own)))
            if merged:
                await self.out.put(b"".join(merged))

    async def _connect(self, name: str, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.tls is None:
            return await asyncio.open_connection(host, port)
        return await asyncio.open_connection(host, port, ssl=self.tls, server_hostname=name)


class _Refused(Exception):
    """The node answered, and said no (or cannot be asked): it is alive."""


async def _answer_head(reader: asyncio.StreamReader) -> ChunkedDecoder:
    """Read the answer's status and headers; its chunked body's decoder when it is a
    stream, ``_Refused`` with the node's reason when it said no."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        raise StreamError("connection closed before an answer") from None
    except asyncio.LimitOverrunError:
        raise StreamError("malformed answer") from None
    lines = head[:-4].split(b"\r\n")
    try:
        status = int(lines[0].split(b" ", 2)[1])
    except (IndexError, ValueError):
        raise StreamError(f"malformed answer {lines[0][:60]!r}") from None
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    if status < 400 and b"chunked" in headers.get(b"transfer-encoding", b"").lower():
        return ChunkedDecoder()
    length = int(headers.get(b"content-length") or 0)
    body = await reader.readexactly(min(length, HEAD_LIMIT)) if length else b""
    try:
        error = json.loads(body).get("error") or f"HTTP {status}"
    except (ValueError, AttributeError):
        error = f"HTTP {status}"
    raise _Refused(str(error))
