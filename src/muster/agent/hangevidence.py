"""Evidence of a hang, read from a job's processes without ending any of them.

The controller judged a job attempt hung (``ctld.training``); before it requeues the job
each of the job's nodes is asked (``POST /v1/hang_evidence``) for what every process of the
job here was doing. ``collect(pids, stacks_path)`` reads, for each process:

* from outside, never disturbing it: ``/proc/PID/status`` (name, state, threads, which
  signals it catches), ``/proc/PID/wchan`` (the kernel function it sleeps in),
  ``/proc/PID/stack`` (its kernel stack: root only), its command line, and, where
  ``py-spy`` is installed (it is not a dependency of muster), ``py-spy dump`` of a Python
  process;
* from inside, only when the process installed a handler for the diagnostic signal
  (SIGUSR1; bit 10 of ``SigCgt`` in its status): it is sent the signal, one process at a
  time. ``muster.progress`` installs such a handler (``faulthandler``) in every process that
  reports progress, writing all its threads' Python stacks to ``<progress file>.stacks``;
  what a process appended there after its signal is its ``python`` evidence.

A process that catches no SIGUSR1 (a bash script, ``sleep``, any program that did not ask
for it) is never sent it: its default action would end it, and with it the evidence and the
job's verdict. Nor is a launcher that catches it to *forward* it (srun, salloc, mpirun:
``FORWARDERS``): its tasks may not catch it; they are read where they run, each node
reading its own. Every text is cut to a bound (``FIELD_LIMIT``) so that a node's evidence
stays small enough to travel with its heartbeat (``TOTAL_LIMIT`` over all processes).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable
from typing import Any

from muster.core.clock import Clock, SystemClock

__all__ = ["DIAG_SIGNAL", "FORWARDERS", "catches", "collect", "describe", "forwards"]

log = logging.getLogger(__name__)

DIAG_SIGNAL = signal.SIGUSR1
FIELD_LIMIT = 8192  # characters kept of one text (a stack, a py-spy dump)
TOTAL_LIMIT = 64 * 1024  # characters of evidence per job per node, all processes together
DUMP_WAIT = 2.0  # seconds a signalled process is given to finish writing its stacks
PY_SPY_TIMEOUT = 10.0
# launchers that pass SIGUSR1 on to their tasks (which may not catch it): never signalled
FORWARDERS = frozenset({"srun", "salloc", "mpirun", "mpiexec", "orterun", "prterun", "hydra_pmi_proxy"})


def _read(path: str, limit: int = FIELD_LIMIT) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError:
        return None
    text = data.decode(errors="replace")
    return text if len(text) <= limit else text[:limit] + "\n[cut]"


def _status(pid: int, proc: str) -> dict[str, str]:
    text = _read(f"{proc}/{pid}/status") or ""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        out[key.strip()] = value.strip()
    return out


def catches(status: dict[str, str], sig: int = DIAG_SIGNAL) -> bool:
    """Whether the process whose ``/proc/PID/status`` this is has a handler for ``sig``."""
    try:
        mask = int(status.get("SigCgt", "0"), 16)
    except ValueError:
        return False
    return bool(mask & (1 << (int(sig) - 1)))


def describe(pid: int, proc: str = "/proc") -> dict[str, Any] | None:
    """What can be read of ``pid`` from outside (None: it is gone)."""
    status = _status(pid, proc)
    if not status:
        return None
    raw = _read(f"{proc}/{pid}/cmdline", 1024) or ""
    info: dict[str, Any] = {
        "pid": pid,
        "ppid": int(status.get("PPid", "0") or 0),
        "name": status.get("Name", ""),
        "cmdline": " ".join(a for a in raw.split("\0") if a)[:512],
        "state": status.get("State", ""),
        "threads": int(status.get("Threads", "0") or 0),
        "wchan": (_read(f"{proc}/{pid}/wchan", 128) or "").strip() or None,
        "catches_usr1": catches(status),
    }
    stack = _read(f"{proc}/{pid}/stack")  # EACCES unless the agent runs as root
    if stack:
        info["kernel_stack"] = stack
    return info


def forwards(info: dict[str, Any]) -> bool:
    """Whether the process is a launcher that forwards signals to its tasks (by its name,
    or the program among its first arguments: ``python -SP .../srun``)."""
    words = [info.get("name") or "", *(info.get("cmdline") or "").split(" ")[:3]]
    return any(os.path.basename(w) in FORWARDERS for w in words)


def _is_python(info: dict[str, Any]) -> bool:
    first = (info.get("cmdline") or "").split(" ", 1)[0]
    return "python" in os.path.basename(first) or "python" in (info.get("name") or "")


def _py_spy(pid: int, exe: str) -> str | None:
    try:
        out = subprocess.run(
            [exe, "dump", "--pid", str(pid)],
            capture_output=True,
            timeout=PY_SPY_TIMEOUT,
            check=False,
            text=True,
            errors="replace",
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"py-spy failed: {exc}"
    text = out.stdout if out.returncode == 0 else f"py-spy exit {out.returncode}: {out.stderr.strip()}"
    return text[:FIELD_LIMIT]


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def _signal_and_read(pid: int, stacks: str | None, clock: Clock) -> str | None:
    """Send the diagnostic signal to ``pid`` (it catches it) and return what it appended to
    ``stacks`` (its handler's dump), waiting until the file stops growing."""
    before = _size(stacks) if stacks else -1
    try:
        os.kill(pid, DIAG_SIGNAL)
    except OSError:
        return None
    if stacks is None or before < 0:
        return None
    deadline = clock.monotonic() + DUMP_WAIT
    last, still = before, 0
    while clock.monotonic() < deadline:
        time.sleep(0.05)
        now = _size(stacks)
        if now == last:
            still += 1
            if now > before and still >= 3:  # 150 ms without growth: the dump is done
                break
        else:
            last, still = now, 0
    if last <= before:
        return None
    try:
        fd = os.open(stacks, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        os.lseek(fd, before, os.SEEK_SET)
        data = os.read(fd, min(last - before, FIELD_LIMIT))
    except OSError:
        return None
    finally:
        os.close(fd)
    return data.decode(errors="replace")


def collect(
    pids: Iterable[int], stacks: str | None = None, proc: str = "/proc", clock: Clock | None = None
) -> list[dict[str, Any]]:
    """The evidence of each living process of ``pids`` (see the module docstring). Blocking
    (signalled processes get time to write, py-spy takes seconds): run it off the event loop."""
    py_spy = shutil.which("py-spy")
    out: list[dict[str, Any]] = []
    used = 0
    for pid in sorted(set(pids)):
        info = describe(pid, proc)
        if info is None:
            continue
        if info["catches_usr1"] and not forwards(info):
            info["signalled"] = "SIGUSR1"
            dump = _signal_and_read(pid, stacks, clock or SystemClock())
            if dump:
                info["python"] = dump
        else:
            info["signalled"] = None  # fatal by default, or passed on to tasks: outside only
        if py_spy and _is_python(info):
            info["py_spy"] = _py_spy(pid, py_spy)
        size = sum(len(v) for v in info.values() if isinstance(v, str))
        if used + size > TOTAL_LIMIT:
            for key in ("py_spy", "python", "kernel_stack"):
                info.pop(key, None)
            info["cut"] = True
        used += sum(len(v) for v in info.values() if isinstance(v, str))
        out.append(info)
    log.info("hang evidence: %d process(es), %d of them signalled", len(out), sum(1 for i in out if i["signalled"]))
    return out
