"""Is each of the node's GPUs still fit to run jobs? Checked at start and periodically.

``GpuHealth.check()`` returns the faults found now, as ``GpuFault(index, cause)``; the
caller (``agent.daemon``) reports each new one to the controller, which drains the node
with ``GPU <index>: <cause>`` as the reason and requeues the jobs on it elsewhere.

Where the answer comes from, in the order of ``GpuInventory.source``:

* ``nvml`` (``nvidia-ml-py``, imported as ``pynvml``): a GPU whose handle cannot be had
  or that answers ``NVML_ERROR_GPU_IS_LOST`` has fallen off the bus; uncorrected volatile
  ECC errors; a row-remapping failure (``nvmlDeviceGetRemappedRows``); critical XID events
  read from an NVML event set (``nvmlEventTypeXidCriticalError``); fewer GPUs than the
  inventory holds.
* ``nvidia-smi``: the same questions through ``--query-gpu`` (no XIDs: nvidia-smi has no
  query for them); a GPU that nvidia-smi lists as ``[GPU is lost]`` or cannot query is
  fallen off the bus; a missing index is missing.
* ``emulated``: a fault file (``GpuFaultFile=``, default ``<state dir>/gpu-faults``) says
  which GPUs fail and why, one per line: ``<index> <cause>``, where cause is ``xid N``,
  ``ecc``, ``remap``, ``lost`` (fallen off the bus), ``missing`` or any text. This makes the
  whole path (detection, drain, requeue) testable without hardware.

The fault file is read for every source, so an operator can also mark a real GPU bad by
hand. Only XIDs that mean the hardware (not the program) is at fault count (``NODE_XIDS``);
an application's own XIDs (13, 31, 43, 45...) are logged and ignored. Nothing here talks
to the controller; an NVML or nvidia-smi error never raises out of ``check``.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from muster.agent.gpus import GpuInventory

__all__ = ["NODE_XIDS", "GpuFault", "GpuHealth", "describe_xid", "parse_fault_file", "parse_smi_health"]

log = logging.getLogger(__name__)

# XIDs that mean the GPU or its memory, NVLink or firmware failed (NVIDIA's XID catalogue):
# such a GPU must not take the next job. Others are usually the program's own doing.
NODE_XIDS: dict[int, str] = {
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping event",
    64: "ECC page retirement or row remapper failure",
    74: "NVLink error",
    79: "fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}

LOST = "fallen off the bus"
MISSING = "missing (not detected)"
ECC = "uncorrected ECC errors"
REMAP = "row remapping failed"

SMI_HEALTH_ARGS = [
    "--query-gpu=index,ecc.errors.uncorrected.volatile.total,remapped_rows.failure",
    "--format=csv,noheader",
]


@dataclass(frozen=True, slots=True, order=True)
class GpuFault:
    index: int
    cause: str

    @property
    def reason(self) -> str:
        """The node's drain reason, e.g. ``GPU 3: XID 79 (fallen off the bus)``."""
        return f"GPU {self.index}: {self.cause}"


def describe_xid(xid: int) -> str:
    what = NODE_XIDS.get(xid)
    return f"XID {xid} ({what})" if what else f"XID {xid}"


def _cause(words: list[str]) -> str:
    """A fault file's cause words as a drain reason's words."""
    head = words[0].lower() if words else ""
    if head == "xid" and len(words) > 1 and words[1].isdigit():
        return describe_xid(int(words[1]))
    known = {"ecc": ECC, "remap": REMAP, "lost": LOST, "missing": MISSING}
    if head in known and len(words) == 1:
        return known[head]
    return " ".join(words) or "failed"


def parse_fault_file(text: str) -> list[GpuFault]:
    """``<index> <cause>`` per line; blank lines and ``#`` comments skipped, as are lines
    that do not start with an index (logged)."""
    faults = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if not words[0].isdigit():
            log.warning("GPU fault file: line %r does not start with a GPU index; ignored", line)
            continue
        faults.append(GpuFault(int(words[0]), _cause(words[1:])))
    return sorted(set(faults))


def parse_smi_health(text: str, expected: list[int]) -> list[GpuFault]:
    """Faults in ``nvidia-smi --query-gpu=index,ecc...,remapped_rows.failure`` output."""
    faults: set[GpuFault] = set()
    seen: set[int] = set()
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if not fields or not fields[0].isdigit():
            # e.g. "Unable to determine the device handle for GPU 0000:3B:00.0: GPU is lost"
            continue
        index = int(fields[0])
        seen.add(index)
        rest = " ".join(fields[1:]).lower()
        if "gpu is lost" in rest or "unknown error" in rest:
            faults.add(GpuFault(index, LOST))
            continue
        if len(fields) > 1 and fields[1].isdigit() and int(fields[1]) > 0:
            faults.add(GpuFault(index, f"{ECC} ({fields[1]})"))
        if len(fields) > 2 and fields[2].lower() in ("yes", "1"):
            faults.add(GpuFault(index, REMAP))
    if seen:  # nvidia-smi answered: a GPU it no longer lists is gone
        faults.update(GpuFault(i, MISSING) for i in expected if i not in seen)
    return sorted(faults)


Runner = Callable[[list[str]], str]


def _run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=15, check=False)
    # nvidia-smi exits non-zero when one GPU fails to answer but still prints the others
    return done.stdout + "\n" + done.stderr


class GpuHealth:
    """The checks of one node's GPUs (see the module docstring)."""

    def __init__(
        self,
        inventory: GpuInventory,
        fault_file: str,
        nvml: Any = None,
        runner: Runner | None = None,
    ) -> None:
        self.inventory = inventory
        self.fault_file = fault_file
        self._nvml = nvml  # a pynvml-like module; None: imported on first use when the source is nvml
        self._nvml_ready = False
        self._events: Any = None
        self._runner = runner

    @property
    def indices(self) -> list[int]:
        return [g.index for g in self.inventory.gpus]

    def check(self) -> list[GpuFault]:
        faults = set(self._from_file())
        if self.inventory.source == "nvml":
            faults.update(self._from_nvml())
        elif self.inventory.source == "nvidia-smi":
            faults.update(self._from_smi())
        return sorted(faults)

    # --- the fault file (every source) ----------------------------------------------------

    def _from_file(self) -> list[GpuFault]:
        try:
            with open(self.fault_file, encoding="utf-8", errors="replace") as f:
                text = f.read(64 * 1024)
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.warning("cannot read the GPU fault file %s: %s", self.fault_file, exc.strerror or exc)
            return []
        known = set(self.indices)
        return [f for f in parse_fault_file(text) if f.index in known]

    # --- nvidia-smi -----------------------------------------------------------------------

    def _from_smi(self) -> list[GpuFault]:
        runner = self._runner
        exe = "nvidia-smi"
        if runner is None:
            found = shutil.which("nvidia-smi")
            if found is None:
                return [GpuFault(i, MISSING) for i in self.indices]  # the driver's tool is gone
            exe, runner = found, _run
        try:
            text = runner([exe, *SMI_HEALTH_ARGS])
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("nvidia-smi health query failed: %s", exc)
            return []
        if "has failed" in text and not any(line[:1].isdigit() for line in text.splitlines()):
            # "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"
            return [GpuFault(i, f"{MISSING}: driver not answering") for i in self.indices]
        return parse_smi_health(text, self.indices)

    # --- NVML -----------------------------------------------------------------------------

    def _module(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml  # type: ignore[import-not-found]
            except ImportError:
                return None
            self._nvml = pynvml
        if not self._nvml_ready:
            try:
                self._nvml.nvmlInit()
            except Exception as exc:  # NVML's own error family
                log.warning("NVML init failed: %s", exc)
                return None
            self._nvml_ready = True
            self._events = self._xid_events()
        return self._nvml

    def _xid_events(self) -> Any:
        nv = self._nvml
        try:
            events = nv.nvmlEventSetCreate()
        except Exception as exc:
            log.info("NVML XID events unavailable: %s", exc)
            return None
        for i in self.indices:
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(i)
                nv.nvmlDeviceRegisterEvents(handle, nv.nvmlEventTypeXidCriticalError, events)
            except Exception as exc:  # a lost GPU, or one without events (some vGPUs)
                log.info("GPU %d: no XID events from NVML: %s", i, exc)
        return events

    def _from_nvml(self) -> list[GpuFault]:
        nv = self._module()
        if nv is None:
            return []
        faults: set[GpuFault] = set()
        try:
            count = int(nv.nvmlDeviceGetCount())
        except Exception as exc:
            log.warning("NVML device count failed: %s", exc)
            return [GpuFault(i, f"{MISSING}: {exc}") for i in self.indices]
        lost_code = getattr(nv, "NVML_ERROR_GPU_IS_LOST", 15)
        for i in self.indices:
            if i >= count:
                faults.add(GpuFault(i, MISSING))
                continue
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(i)
                ecc = _try(
                    functools.partial(
                        nv.nvmlDeviceGetTotalEccErrors,
                        handle,
                        nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                        nv.NVML_VOLATILE_ECC,
                    )
                )
                if isinstance(ecc, int) and ecc > 0:
                    faults.add(GpuFault(i, f"{ECC} ({ecc})"))
                rows = _try(functools.partial(nv.nvmlDeviceGetRemappedRows, handle))
                if isinstance(rows, tuple | list) and len(rows) >= 4 and rows[3]:
                    faults.add(GpuFault(i, REMAP))
            except Exception as exc:
                if getattr(exc, "value", None) == lost_code or "lost" in str(exc).lower():
                    faults.add(GpuFault(i, describe_xid(79)))
                else:
                    log.warning("NVML query of GPU %d failed: %s", i, exc)
        faults.update(self._xids())
        return sorted(faults)

    def _xids(self) -> list[GpuFault]:
        """XID events NVML queued since the last check (drained without waiting)."""
        if self._events is None:
            return []
        nv = self._nvml
        out = []
        for _ in range(64):
            try:
                data = nv.nvmlEventSetWait(self._events, 0)
            except Exception:  # NVML_ERROR_TIMEOUT: nothing queued
                break
            xid = int(getattr(data, "eventData", 0) or 0)
            try:
                index = int(nv.nvmlDeviceGetIndex(data.device))
            except Exception:
                continue
            if xid in NODE_XIDS:
                out.append(GpuFault(index, describe_xid(xid)))
            else:
                log.info("GPU %d: XID %d (an application error; not a node fault)", index, xid)
        return out


def _try(call: Callable[[], Any]) -> Any:
    """A query that a GPU may not support (ECC off, no row remapping): None then; a lost
    GPU's error goes on."""
    try:
        return call()
    except Exception as exc:
        if "lost" in str(exc).lower() or getattr(exc, "value", None) == 15:
            raise
        return None


def default_fault_file(state_root: str, configured: str | None) -> str:
    return configured.strip() if configured and configured.strip() else os.path.join(state_root, "gpu-faults")
