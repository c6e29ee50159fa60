"""What a job's cgroups are and hold, as pure functions (``agent.cgroupfs`` writes them).

Slurm confines jobs with cgroups when ``ProctrackType=proctrack/cgroup`` (processes are
tracked by their cgroup) and ``TaskPlugin=task/cgroup`` (their resources are constrained
by it), tuned by ``cgroup.conf`` beside the main config. muster reads the same keys:

* ``CgroupPlugin=autodetect|cgroup/v1|cgroup/v2`` (default ``autodetect``: v2 where the
  whole hierarchy is cgroup2, v1 where the v1 controllers are mounted),
  ``CgroupMountpoint`` (default ``/sys/fs/cgroup``);
* ``ConstrainCores``, ``ConstrainRAMSpace``, ``ConstrainSwapSpace``, ``ConstrainDevices``
  (yes/no, default no), ``AllowedRAMSpace`` (percent of the job's memory, default 100),
  ``AllowedSwapSpace`` (percent added for swap, default 0);
* muster's own ``GpuDeviceFiles`` (a hostlist-style expression, ``/dev/nvidia[0-7]`` by
  default): the device file of each GPU index, as Slurm's gres.conf ``File=`` says it.

Layout: ``<mount>[/<controller>]/muster/<node>/job_<id>/step_<name>/task_<n>`` (``step_batch``
for the batch script, whose one task is ``task_0``; ``n`` is the task's local id on the node);
limits sit on the job's directory, processes in the tasks'.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from muster.core.conftext import strip_comment
from muster.core.hostlist import HostlistError, expand

__all__ = [
    "CgroupConf",
    "CgroupConfError",
    "JobLimits",
    "conf_path_beside",
    "job_limits",
    "job_rel",
    "node_rel",
    "oom_message",
    "parse_cgroup_conf",
    "step_rel",
    "task_rel",
    "tracking_wanted",
    "constraints_wanted",
    "containment",
]

PLUGINS = ("autodetect", "cgroup/v1", "cgroup/v2")
TOP = "muster"
DEFAULT_GPU_FILES = "/dev/nvidia[0-63]"
_BOOL = {"yes": True, "true": True, "1": True, "no": False, "false": False, "0": False}


class CgroupConfError(ValueError):
    """cgroup.conf is malformed: ``<path>:<line>: <what>``."""


@dataclass(frozen=True, slots=True)
class CgroupConf:
    plugin: str = "autodetect"
    mountpoint: str = "/sys/fs/cgroup"
    constrain_cores: bool = False
    constrain_ram: bool = False
    constrain_swap: bool = False
    constrain_devices: bool = False
    allowed_ram: float = 100.0  # percent of the job's memory
    allowed_swap: float = 0.0  # percent of the job's memory, on top, for swap
    gpu_files: tuple[str, ...] = field(default_factory=lambda: tuple(expand(DEFAULT_GPU_FILES)))


def conf_path_beside(main_conf: str) -> str:
    """cgroup.conf lives in the directory of the main config (as Slurm's does)."""
    return os.path.join(os.path.dirname(os.path.abspath(main_conf)), "cgroup.conf")


def parse_cgroup_conf(text: str, path: str = "cgroup.conf") -> CgroupConf:
    """``Key=Value`` lines (case-insensitive keys, ``#`` comments); unknown Slurm keys are
    ignored as Slurm's own tools would warn. Raises ``CgroupConfError`` on a bad value."""
    values: dict[str, object] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = strip_comment(raw).strip()
        for item in line.split():
            key, eq, value = item.partition("=")
            where = f"{path}:{lineno}"
            if not eq:
                raise CgroupConfError(f"{where}: expected Key=Value, got {item!r}")
            k = key.lower()
            if k == "cgroupplugin":
                if value.lower() not in PLUGINS:
                    raise CgroupConfError(f"{where}: CgroupPlugin must be one of {', '.join(PLUGINS)}, not {value!r}")
                values["plugin"] = value.lower()
            elif k == "cgroupmountpoint":
                if not value.startswith("/"):
                    raise CgroupConfError(f"{where}: CgroupMountpoint must be an absolute path, not {value!r}")
                values["mountpoint"] = value.rstrip("/") or "/"
            elif k in _BOOL_KEYS:
                if value.lower() not in _BOOL:
                    raise CgroupConfError(f"{where}: {key} must be yes or no, not {value!r}")
                values[_BOOL_KEYS[k]] = _BOOL[value.lower()]
            elif k in ("allowedramspace", "allowedswapspace"):
                try:
                    pct = float(value)
                except ValueError:
                    pct = -1.0
                if not 0 <= pct <= 10000:
                    raise CgroupConfError(f"{where}: {key} must be a percentage, not {value!r}")
                values["allowed_ram" if k == "allowedramspace" else "allowed_swap"] = pct
            elif k == "gpudevicefiles":
                try:
                    values["gpu_files"] = tuple(expand(value))
                except HostlistError as exc:
                    raise CgroupConfError(f"{where}: GpuDeviceFiles: {exc}") from None
    return CgroupConf(**values)  # type: ignore[arg-type]


_BOOL_KEYS = {
    "constraincores": "constrain_cores",
    "constrainramspace": "constrain_ram",
    "constrainswapspace": "constrain_swap",
    "constraindevices": "constrain_devices",
}


def tracking_wanted(proctrack: str | None, task_plugin: str | None) -> bool:
    """Whether jobs go into cgroups at all (slurm.conf's ProctrackType / TaskPlugin)."""
    return "cgroup" in (proctrack or "").lower() or "cgroup" in (task_plugin or "").lower()


def constraints_wanted(conf: CgroupConf, task_plugin: str | None) -> CgroupConf:
    """The constraints that apply: only under ``TaskPlugin=task/cgroup`` (as in Slurm)."""
    if "cgroup" in (task_plugin or "").lower():
        return conf
    return CgroupConf(plugin=conf.plugin, mountpoint=conf.mountpoint, gpu_files=conf.gpu_files)  # tracking only


@dataclass(frozen=True, slots=True)
class JobLimits:
    """What a job's cgroup enforces on one node; None/empty: not constrained."""

    mem_bytes: int | None = None
    memsw_bytes: int | None = None  # memory + swap (v1 memsw; v2 swap.max = this - mem)
    cpus: tuple[int, ...] = ()
    deny: tuple[tuple[str, int, int], ...] = ()  # ("c", major, minor) the job may not use
    allow: tuple[tuple[str, int, int], ...] = ()  # its own GPUs' devices


NO_CONTAINMENT = "none"  # proctrack/linuxproc: processes tracked by parentage, nothing confined


def containment(version: str, conf: CgroupConf) -> str:
    """What the node's cgroups do, as its agent registers it (``scontrol show node``'s
    ``Containment=``, sinfo's ``%K``): ``cgroup/<version>:`` and the active mechanisms,
    ``freezer`` (v1) or ``freeze`` (v2's ``cgroup.freeze``: tracking, killing, suspend),
    ``memory``, ``swap``, ``devices`` (v2: ``devices(ebpf)``), ``cores``."""
    active = ["freezer" if version == "v1" else "freeze"]
    if conf.constrain_ram:
        active.append("memory")
    if conf.constrain_swap:
        active.append("swap")
    if conf.constrain_devices:
        active.append("devices" if version == "v1" else "devices(ebpf)")
    if conf.constrain_cores:
        active.append("cores")
    return f"cgroup/{version}:{','.join(active)}"


def job_limits(
    conf: CgroupConf,
    mem_mb: int,
    cpus: Sequence[int] | None,
    gpu_ids: Sequence[int],
    devices: Mapping[int, tuple[str, int, int]],
) -> JobLimits:
    """A job's limits on a node: ``mem_mb`` its memory here (0: unlimited, as a job
    without ``--mem`` on a node without ``DefMemPerCPU``), ``devices`` the node's GPU
    index -> (kind, major, minor) of its device file."""
    mem = memsw = None
    if conf.constrain_ram and mem_mb > 0:
        mem = int(mem_mb * 1024 * 1024 * conf.allowed_ram / 100)
        if conf.constrain_swap:
            memsw = mem + int(mem_mb * 1024 * 1024 * conf.allowed_swap / 100)
    deny: tuple[tuple[str, int, int], ...] = ()
    allow: tuple[tuple[str, int, int], ...] = ()
    if conf.constrain_devices:
        mine = set(gpu_ids)
        deny = tuple(sorted(d for i, d in devices.items() if i not in mine))
        allow = tuple(sorted(d for i, d in devices.items() if i in mine))
    return JobLimits(
        mem_bytes=mem,
        memsw_bytes=memsw,
        cpus=tuple(cpus or ()) if conf.constrain_cores else (),
        deny=deny,
        allow=allow,
    )


def node_rel(node: str) -> str:
    return f"{TOP}/{node}"


def job_rel(node: str, job_id: int) -> str:
    return f"{TOP}/{node}/job_{job_id}"


def step_rel(node: str, job_id: int, step: str) -> str:
    return f"{job_rel(node, job_id)}/step_{step}"


def task_rel(node: str, job_id: int, step: str, task: int) -> str:
    return f"{step_rel(node, job_id, step)}/task_{task}"


def device_rule(dev: tuple[str, int, int]) -> str:
    """A v1 devices.allow/deny line."""
    kind, major, minor = dev
    return f"{kind} {major}:{minor} rwm"


def oom_message(count: int, step: str) -> str:
    """slurmstepd's line in the job's error file when the step's cgroup saw OOM kills."""
    return (
        f"slurmstepd: error: Detected {count} oom_kill event{'s' if count != 1 else ''} in StepId={step}. "
        "Some of the step tasks have been OOM Killed.\n"
    )
