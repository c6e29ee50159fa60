"""The node's GPUs: detected when the hardware can be asked, emulated otherwise.

``detect(configured, gpu_type, mode)`` returns a ``GpuInventory``:

* ``mode="auto"`` (the default), on a node configured with GPUs, asks ``nvidia-smi`` (when
  it is on PATH), then NVML through ``pynvml`` (when importable). The configured count is
  trusted, as for CPUs: the first that many detected GPUs are used; when fewer are found
  (none, a failing driver, or one real GPU shared by several emulated nodes) the configured
  count is emulated, so that a laptop or a CI box can pretend to be a GPU node. A node
  configured without GPUs has none, whatever the host holds (as in Slurm).
* ``mode="nvidia"`` registers exactly what detection finds (no GPU found: none, and a
  warning); the controller drains a node that reports fewer GPUs than configured.
* ``mode="emulate"`` never asks the hardware. ``muster up`` uses it when several agents
  share one host: each of them would otherwise claim the host's real GPUs.

Indices are what the job sees in ``CUDA_VISIBLE_DEVICES``: nvidia-smi's ``index`` column,
or ``0..n-1`` when emulated. ``parse_nvidia_smi`` is pure and tolerant: it keeps every line
that starts with an integer index and skips the rest (warnings, blank lines, "No devices were
found", a driver that answers "NVIDIA-SMI has failed ...").
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["GpuInfo", "GpuInventory", "detect", "parse_nvidia_smi", "type_from_name"]

log = logging.getLogger(__name__)

NVIDIA_SMI_ARGS = [
    "--query-gpu=index,name,uuid,memory.total",
    "--format=csv,noheader",
]
MODES = ("auto", "nvidia", "emulate")


@dataclass(frozen=True, slots=True)
class GpuInfo:
    index: int
    name: str
    uuid: str = ""
    memory_mb: int | None = None


@dataclass(slots=True)
class GpuInventory:
    gpus: list[GpuInfo] = field(default_factory=list)
    source: str = "emulated"  # "nvidia-smi", "nvml" or "emulated"
    gpu_type: str | None = None

    @property
    def count(self) -> int:
        return len(self.gpus)

    def describe(self) -> list[dict[str, object]]:
        return [{"index": g.index, "name": g.name, "uuid": g.uuid, "memory_mb": g.memory_mb} for g in self.gpus]


def parse_nvidia_smi(text: str) -> list[GpuInfo]:
    """Parse ``nvidia-smi --query-gpu=index,name,uuid,memory.total --format=csv,noheader``."""
    gpus: list[GpuInfo] = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 2 or not fields[0].isdigit():
            continue
        index = int(fields[0])
        memory: int | None = None
        uuid = ""
        rest = fields[1:]
        if len(rest) >= 3:
            memory = _parse_memory(rest[-1])
            uuid = _clean(rest[-2])
            name = ", ".join(rest[:-2])  # a name with a comma in it survives
        elif len(rest) == 2:
            uuid = _clean(rest[1])
            name = rest[0]
        else:
            name = rest[0]
        gpus.append(GpuInfo(index=index, name=_clean(name) or "gpu", uuid=uuid, memory_mb=memory))
    gpus.sort(key=lambda g: g.index)
    return gpus


def type_from_name(name: str) -> str:
    """A GRES type from a marketing name: ``NVIDIA H100 80GB HBM3`` -> ``h100``."""
    words = [w for w in name.lower().replace("-", " ").split() if w not in ("nvidia", "tesla", "geforce")]
    return words[0] if words else "gpu"


def _parse_memory(text: str) -> int | None:
    number = text.split()[0] if text.split() else ""
    if not number.isdigit():
        return None
    value = int(number)
    unit = text[len(number) :].strip().lower()
    if unit.startswith("gib") or unit.startswith("gb"):
        return value * 1024
    return value  # MiB, nvidia-smi's unit


def _clean(text: str) -> str:
    return "" if text.strip("[] ").lower() in ("n/a", "not supported", "") else text.strip()


Runner = Callable[[list[str]], str]


def _run_nvidia_smi(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=15, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {(done.stderr or done.stdout).strip()[:200]}")
    return done.stdout


def _from_nvidia_smi(runner: Runner | None) -> list[GpuInfo]:
    if runner is None:
        exe = shutil.which("nvidia-smi")
        if exe is None:
            return []
        argv = [exe, *NVIDIA_SMI_ARGS]
        runner = _run_nvidia_smi
    else:
        argv = ["nvidia-smi", *NVIDIA_SMI_ARGS]
    try:
        return parse_nvidia_smi(runner(argv))
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        log.warning("nvidia-smi failed: %s", exc)
        return []


def _from_nvml() -> list[GpuInfo]:
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
        try:
            out = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                name = pynvml.nvmlDeviceGetName(handle)
                uuid = pynvml.nvmlDeviceGetUUID(handle)
                mem = pynvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024)
                out.append(
                    GpuInfo(
                        index=i,
                        name=name.decode() if isinstance(name, bytes) else str(name),
                        uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                        memory_mb=int(mem),
                    )
                )
            return out
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # NVML raises its own error family; any failure means "none"
        log.warning("NVML failed: %s", exc)
        return []


def emulate(count: int, gpu_type: str | None) -> GpuInventory:
    name = gpu_type or "gpu"
    gpus = [GpuInfo(index=i, name=f"emulated {name}", uuid=f"EMU-{i}") for i in range(count)]
    return GpuInventory(gpus=gpus, source="emulated", gpu_type=gpu_type)


def detect(
    configured: int,
    gpu_type: str | None,
    mode: str = "auto",
    runner: Runner | None = None,
    nvml: Callable[[], list[GpuInfo]] = _from_nvml,
) -> GpuInventory:
    """Find the GPUs (see the module docstring). ``runner`` replaces nvidia-smi in tests."""
    if mode not in MODES:
        raise ValueError(f"unknown GPU detection mode {mode!r} (expected one of {', '.join(MODES)})")
    if mode == "emulate" or (mode == "auto" and configured == 0):
        # A node configured without GPUs has none, whatever the host holds (as Slurm).
        inv = emulate(configured, gpu_type)
        log.info("GPUs: emulating %d (%s) as configured", configured, gpu_type or "untyped")
        return inv
    probes: tuple[tuple[str, Callable[[], list[GpuInfo]]], ...] = (
        ("nvidia-smi", lambda: _from_nvidia_smi(runner)),
        ("nvml", nvml),
    )
    for source, probe in probes:
        found = probe()
        if not found:
            continue
        names = ", ".join(g.name for g in found)
        detected_type = gpu_type or type_from_name(found[0].name)
        if mode == "auto" and len(found) < configured:
            # The configuration is trusted for GPUs as for CPUs: several emulated nodes
            # may share one real GPU host. "nvidia" mode registers what was found instead.
            log.warning(
                "GPUs: %s found %d (%s) but the configuration says %d; emulating %d",
                source,
                len(found),
                names,
                configured,
                configured,
            )
            return emulate(configured, gpu_type)
        if mode == "auto" and len(found) > configured:
            log.info("GPUs: %s found %d; using the %d configured", source, len(found), configured)
            found = found[:configured]
        log.info("GPUs: %d detected by %s (%s)", len(found), source, names)
        return GpuInventory(gpus=found, source=source, gpu_type=detected_type)
    if mode == "nvidia":
        log.warning("GPUs: none detected (nvidia-smi/NVML absent or failing); registering 0")
        return GpuInventory(gpus=[], source="nvidia-smi", gpu_type=gpu_type)
    log.info(
        "GPUs: no nvidia-smi or NVML answer; emulating %d (%s) as configured",
        configured,
        gpu_type or "untyped",
    )
    return emulate(configured, gpu_type)
