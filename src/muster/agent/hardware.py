"""The node's real hardware, as ``slurmd -C`` reports it: CPUs and their layout, memory, uptime.

``probe(root)`` reads Linux's ``/sys/devices/system/cpu`` (the online CPUs, each one's
package and core), ``/proc/meminfo`` (``MemTotal``) and ``/proc/uptime``; ``root`` stands
for ``/`` in tests. A layout that cannot be read falls back to one socket of
``os.cpu_count()`` single-thread cores. ``RealMemory`` is ``MemTotal`` in MiB, rounded down,
as slurmd reports it (a little below the DIMMs' size: the kernel keeps some).

``slurmd_line`` is ``musterd -C``'s text: the node's line in slurm.conf's syntax, then
``UpTime=``::

    NodeName=gpu1 CPUs=64 Boards=1 SocketsPerBoard=2 CoresPerSocket=16 ThreadsPerCore=2 RealMemory=515701 Gres=gpu:8
    UpTime=12-03:04:05

The agent registers what ``probe`` finds when it detects hardware for real (``--gpu-detect
nvidia``), and the controller drains a node configured larger than that (``ctld.agents``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["Hardware", "format_uptime", "parse_cpu_list", "probe", "slurmd_line"]


@dataclass(frozen=True, slots=True)
class Hardware:
    cpus: int
    sockets: int  # per board (one board)
    cores_per_socket: int
    threads_per_core: int
    real_memory: int  # MiB
    uptime: float | None = None  # seconds since boot

    @property
    def boards(self) -> int:
        return 1


def parse_cpu_list(text: str) -> list[int]:
    """The kernel's CPU list syntax: ``0-3,8,10-11``."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _layout(root: str) -> tuple[int, int, int, int] | None:
    """(CPUs, sockets, cores per socket, threads per core) from sysfs, or None."""
    base = os.path.join(root, "sys/devices/system/cpu")
    online = _read(os.path.join(base, "online"))
    if not online:
        return None
    try:
        cpus = parse_cpu_list(online)
    except ValueError:
        return None
    cores: set[tuple[str, str]] = set()
    sockets: set[str] = set()
    for cpu in cpus:
        package = _read(os.path.join(base, f"cpu{cpu}/topology/physical_package_id"))
        core = _read(os.path.join(base, f"cpu{cpu}/topology/core_id"))
        if package is None or core is None:
            return None
        sockets.add(package.strip())
        cores.add((package.strip(), core.strip()))
    if not cpus or not cores:
        return None
    per_socket = max(1, len(cores) // len(sockets))
    threads = max(1, len(cpus) // len(cores))
    return len(cpus), len(sockets), per_socket, threads


def _mem_total_mib(root: str) -> int:
    text = _read(os.path.join(root, "proc/meminfo")) or ""
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            fields = line.split()
            if len(fields) >= 2 and fields[1].isdigit():
                return int(fields[1]) // 1024  # kB -> MiB
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    except (ValueError, OSError):
        return 0


def _uptime(root: str) -> float | None:
    text = _read(os.path.join(root, "proc/uptime"))
    try:
        return float(text.split()[0]) if text else None
    except (ValueError, IndexError):
        return None


def probe(root: str = "/") -> Hardware:
    """What this machine has (see the module docstring)."""
    layout = _layout(root)
    if layout is None:
        n = os.cpu_count() or 1
        layout = (n, 1, n, 1)
    cpus, sockets, cores, threads = layout
    return Hardware(cpus, sockets, cores, threads, _mem_total_mib(root), _uptime(root))


def format_uptime(seconds: float | None) -> str:
    """Slurm's form of a duration: ``D-HH:MM:SS`` from a day on, ``HH:MM:SS`` below."""
    if seconds is None:
        return "N/A"
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def slurmd_line(name: str, hw: Hardware, gpus: int = 0) -> str:
    """``musterd -C``'s two lines (without the final newline)."""
    words = [
        f"NodeName={name}",
        f"CPUs={hw.cpus}",
        f"Boards={hw.boards}",
        f"SocketsPerBoard={hw.sockets}",
        f"CoresPerSocket={hw.cores_per_socket}",
        f"ThreadsPerCore={hw.threads_per_core}",
        f"RealMemory={hw.real_memory}",
    ]
    if gpus:
        words.append(f"Gres=gpu:{gpus}")
    return " ".join(words) + f"\nUpTime={format_uptime(hw.uptime)}"
