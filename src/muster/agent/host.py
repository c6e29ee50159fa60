"""One musterd process hosting several nodes (``musterd --node node[1-64]``): how a laptop
or a CI runner emulates a cluster of a thousand nodes (``muster up --nodes-per-agent``).

Each hosted node is its own node to the controller and to its users: its own name, address
and port, Unix socket, state directory, GPUs, jobs, heartbeats, replay floor and faults;
its jobs run as separate processes with its own environment (``SLURMD_NODENAME``, ...).
What the nodes share is the process and its event loop (about a tenth of an agent's memory
per extra node instead of a whole interpreter). Hence a SIGTERM stops them all, leaving
their jobs running as one agent does, and a ``kill -9`` or SIGSTOP of the process takes
all of them down together, as the power of a rack would. A real deployment keeps one
musterd per machine, the default.

Log lines carry the node they are about (``musterd[node7]``): every task a node's daemon
starts inherits its name through a context variable (``NODE``).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging

from muster.agent.daemon import AgentDaemon

__all__ = ["NODE", "NodeField", "serve_nodes"]

NODE: contextvars.ContextVar[str] = contextvars.ContextVar("musterd_node", default="-")


class NodeField(logging.Filter):
    """Puts the node a log record is about into it, as ``%(node)s``."""

    def __init__(self, default: str) -> None:
        super().__init__()
        self.default = default

    def filter(self, record: logging.LogRecord) -> bool:
        node = NODE.get()
        record.node = self.default if node == "-" else node
        return True


async def serve_nodes(daemons: list[AgentDaemon]) -> None:
    """Serve every daemon in this event loop until all are stopped (``request_stop``).

    All of them bind their sockets before any serves: a node that cannot start (its port
    taken, its state directory locked) stops the whole host with its ``StartupError``,
    rather than leaving a rack with a hole the controller would call a dead node."""
    sockets = []
    try:
        for daemon in daemons:
            sockets.append(daemon.prepare())
    except BaseException:
        for bound in sockets:
            for sock in bound:
                sock.close()
        raise

    async def serve(daemon: AgentDaemon, bound: list[object]) -> None:
        NODE.set(daemon.node.name)  # this task's context: every task it starts inherits it
        await daemon.serve(hosted=True, sockets=bound)

    tasks = [asyncio.create_task(serve(d, s), name=d.node.name) for d, s in zip(daemons, sockets, strict=True)]
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
