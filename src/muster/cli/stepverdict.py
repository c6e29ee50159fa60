"""srun's wait for the controller's verdict on nodes whose agents went silent mid-step, its
words for tasks that failed (``failure_lines``; slurmstepd's line for OOM kills,
``oom_line``), and what the tasks used (``usage_report``).

Whether a node failed is the controller's call (after SlurmdTimeout), and when it is, the
job ends NODE_FAIL and is requeued: srun must not end first and let a batch script fail
the job. So srun waits, at most SlurmdTimeout and a little, until a node is declared
down, the job ends, a node's agent is back (its tasks are gone then), or srun is told to
stop (SIGINT, SIGTERM, SIGHUP on its wake-up pipe). Standard library and
``protocol.client`` only: srun starts fast.
"""

from __future__ import annotations

import _signal
import os
import select
import time

from muster.core.arrays import format_ranges
from muster.protocol.client import ApiError, ConnectError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["await_verdict", "failure_lines", "oom_line", "usage_report"]


def await_verdict(ctl: Any, job_id: int, names: list[str], timeout: float, wake_r: int) -> bool:
    """Whether one of ``names`` was declared DOWN within ``timeout`` seconds and a little."""
    deadline = time.monotonic() + timeout + 5
    first: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        try:
            nodes = ctl.get("/v1/nodes?name=" + ",".join(names)).get("nodes") or []
            job = ctl.get(f"/v1/jobs/{job_id}").get("job") or {}
        except (ApiError, ConnectError):
            nodes, job = [], {}
        # DOWN, not merely not responding ("*": silent for a while, not yet judged); first,
        # since a node's death also ends the job
        if any(n.get("state") == "DOWN" for n in nodes):
            return True
        if job and (job.get("state") != "RUNNING" or job.get("completing")):
            return False
        starts = {n.get("name"): n.get("agent_start_time") for n in nodes}
        if first is None:
            first = starts
        elif starts != first:
            return False  # the agent restarted: the tasks it ran are gone
        ready, _, _ = select.select([wake_r], [], [], 0.5)
        if ready:
            try:
                raw = os.read(wake_r, 256)
            except BlockingIOError:
                raw = b""
            if any(sig in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP) for sig in raw):
                return False
    return False


def failure_lines(node: str, failed: list[tuple[int, int, int]], oom: set[int] | None = None) -> list[str]:
    """Slurm's lines for ``(task, code, signal)`` that failed on ``node``, one per outcome:
    ``error: node2: tasks 2-3: Exited with exit code 1``; a task in ``oom`` (its cgroup saw
    OOM kills) ``error: node2: task 0: Out Of Memory``."""
    groups: dict[tuple[int, int], list[int]] = {}
    for task, code, sig in failed:
        groups.setdefault((-1, -1) if oom and task in oom else (code, sig), []).append(task)
    lines = []
    for (code, sig), tasks in groups.items():
        what = "task" if len(tasks) == 1 else "tasks"
        if code < 0:
            text = "Out Of Memory"
        elif sig:
            try:
                text = _signal.strsignal(sig) or f"Signal {sig}"
            except ValueError:
                text = f"Signal {sig}"
        else:
            text = f"Exited with exit code {code}"
        lines.append(f"error: {node}: {what} {format_ranges(tasks)}: {text}")
    return lines


def usage_report(usage: dict[int, tuple[int, float, float, str]]) -> dict[str, Any] | None:
    """What the tasks used (task -> max RSS KB, user and system CPU, node), for the step's
    record (sacct's MaxRSS, AveRSS, CPU)."""
    if not usage:
        return None
    task, (rss, _u, _s, node) = max(usage.items(), key=lambda kv: (kv[1][0], -kv[0]))
    return {
        "max_rss_kb": rss,
        "max_rss_node": node,
        "max_rss_task": task,
        "ave_rss_kb": round(sum(u[0] for u in usage.values()) / len(usage), 1),
        "user_cpu": round(sum(u[1] for u in usage.values()), 3),
        "system_cpu": round(sum(u[2] for u in usage.values()), 3),
    }


def oom_line(count: int, step: str) -> str:
    """slurmstepd's line in a step's stderr when its tasks' cgroups saw OOM kills."""
    return (
        f"slurmstepd: error: Detected {count} oom_kill event{'s' if count != 1 else ''} in StepId={step}. "
        "Some of the step tasks have been OOM Killed.\n"
    )
