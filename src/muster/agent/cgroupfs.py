"""A node's job cgroups on disk: probe, create with limits, list, kill, remove (v1 and v2).

``NodeCgroups.probe(conf, node)`` decides the version (``CgroupPlugin``), creates the node's
directory ``muster/<node>`` in every controller it needs and checks that each configured
constraint can be honoured; it returns the object, or raises ``CgroupUnusable`` with the
reason the node then drains with (``agent.daemon``). Per job (``agent.cgroups`` computes
what; this writes it, as root, in the agent):

* ``create_job(job_id, limits, step, task)``: ``job_<id>`` with the limits (once, when
  made), ``step_<step>/task_<task>`` in it; returns the ``cgroup.procs`` files the forked
  child writes ``0`` into (``agent.spawn``) before it drops root, so that everything it
  ever forks is born inside;
* ``oom_kills``, ``peak_bytes``, ``memory``: the memory controller's counters for the end
  report and sstat (``agent.memacct`` reads them);
* ``kill_all``: v2 ``cgroup.kill``; v1 freeze, SIGKILL every pid listed, thaw, until empty
  (a process that cleared its environment and ``setsid``-ed is in the list all the same);
* ``remove_job``: rmdir from the leaves up, once empty.

v1 controllers used: ``freezer`` (tracking, always), ``memory`` (ConstrainRAMSpace),
``devices`` (ConstrainDevices), ``cpuset`` (ConstrainCores). v2: one directory; the
``memory`` and ``cpuset`` controllers must be enabled down to it; devices are refused by an
eBPF program attached to the job's directory (``agent.devbpf``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import time
from dataclasses import dataclass, field

from muster.agent import cgroups, devbpf, memacct
from muster.agent.cgroups import CgroupConf, JobLimits

__all__ = ["CgroupUnusable", "NodeCgroups", "detect_version", "gpu_devices"]

V1_TRACK = "freezer"
KILL_PAUSE = 0.01  # seconds between the rounds of kill_all


class CgroupUnusable(Exception):
    """The node cannot confine jobs as configured; ``str()`` says why."""


def detect_version(conf: CgroupConf) -> str:
    """``v1`` or ``v2`` as ``CgroupPlugin`` says or the mount shows; raises
    ``CgroupUnusable`` when neither is there."""
    mount = conf.mountpoint
    if conf.plugin == "cgroup/v1":
        if os.path.isdir(os.path.join(mount, V1_TRACK)):
            return "v1"
        raise CgroupUnusable(f"cgroup/v1: no freezer hierarchy under {mount}")
    if conf.plugin == "cgroup/v2":
        if _v2_root(mount) is not None:
            return "v2"
        raise CgroupUnusable(f"cgroup/v2: no cgroup2 file system at {mount} or {mount}/unified")
    if os.path.exists(os.path.join(mount, "cgroup.controllers")):
        return "v2"
    if os.path.isdir(os.path.join(mount, V1_TRACK)):
        return "v1"
    raise CgroupUnusable(f"no cgroup hierarchy under {mount}")


def _v2_root(mount: str) -> str | None:
    for path in (mount, os.path.join(mount, "unified")):
        if os.path.exists(os.path.join(path, "cgroup.controllers")):
            return path
    return None


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _mkdir(path: str) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o755)


@dataclass
class NodeCgroups:
    conf: CgroupConf
    node: str
    version: str
    roots: dict[str, str]  # controller ("" on v2) -> the hierarchy's root directory
    devices: dict[int, tuple[str, int, int]] = field(default_factory=dict)  # GPU index -> its device
    node_mem_mb: int = 0  # the node's memory: the limit of a job that asked for none (as Slurm)

    @classmethod
    def probe(cls, conf: CgroupConf, node: str, gpus: int = 0, mem_mb: int = 0) -> NodeCgroups:
        """The node's cgroups, ready for jobs; raises ``CgroupUnusable`` with the reason."""
        version = detect_version(conf)
        devices = gpu_devices(conf, gpus) if conf.constrain_devices else {}
        if version == "v1":
            wanted = [V1_TRACK]
            if conf.constrain_ram:
                wanted.append("memory")
            if conf.constrain_devices:
                wanted.append("devices")
            if conf.constrain_cores:
                wanted.append("cpuset")
            roots = {}
            for ctl in wanted:
                root = os.path.join(conf.mountpoint, ctl)
                if not os.path.isdir(root):
                    raise CgroupUnusable(f"cgroup/v1: no {ctl} hierarchy under {conf.mountpoint} ({_needed(ctl)})")
                roots[ctl] = root
        else:
            unified = _v2_root(conf.mountpoint)
            assert unified is not None
            roots = {"": unified}
            if conf.constrain_devices:
                try:
                    devbpf.check()
                except OSError as exc:
                    raise CgroupUnusable(f"cgroup/v2: ConstrainDevices needs eBPF device programs: {exc}") from None
        self = cls(conf, node, version, roots, devices, mem_mb)
        self._make_node_dirs()
        return self

    # --- paths --------------------------------------------------------------------------

    def _dirs(self, rel: str) -> dict[str, str]:
        return {ctl: os.path.join(root, rel) for ctl, root in self.roots.items()}

    def job_dir(self, job_id: int, ctl: str | None = None) -> str:
        ctl = ("" if self.version == "v2" else V1_TRACK) if ctl is None else ctl
        return os.path.join(self.roots[ctl], cgroups.job_rel(self.node, job_id))

    # --- setup --------------------------------------------------------------------------

    def _make_node_dirs(self) -> None:
        for rel in (cgroups.TOP, cgroups.node_rel(self.node)):
            for ctl, path in self._dirs(rel).items():
                try:
                    _mkdir(path)
                    if ctl == "cpuset":
                        _copy_cpuset(path)
                except OSError as exc:
                    raise CgroupUnusable(f"cannot create {path}: {exc.strerror or exc}") from None
        if self.version == "v2":
            self._enable_v2()

    def _enable_v2(self) -> None:
        """Enable the controllers the constraints need from the root down to the node."""
        need = []
        if self.conf.constrain_ram:
            need.append("memory")
        if self.conf.constrain_cores:
            need.append("cpuset")
        if not need:
            return
        root = self.roots[""]
        have = _read(os.path.join(root, "cgroup.controllers")).split()
        missing = [c for c in need if c not in have]
        if missing:
            raise CgroupUnusable(
                f"cgroup/v2: the {', '.join(missing)} controller is not delegated to {root} "
                f"({', '.join(_needed(c) for c in missing)})"
            )
        path = root
        for part in (cgroups.TOP, self.node):
            try:
                _write(os.path.join(path, "cgroup.subtree_control"), " ".join(f"+{c}" for c in need))
            except OSError as exc:
                raise CgroupUnusable(
                    f"cgroup/v2: cannot enable {', '.join(need)} in {path}: {exc.strerror or exc}"
                ) from None
            path = os.path.join(path, part)
        # the node's directory hands them on to its jobs
        try:
            _write(os.path.join(path, "cgroup.subtree_control"), " ".join(f"+{c}" for c in need))
        except OSError as exc:
            raise CgroupUnusable(f"cgroup/v2: cannot enable {', '.join(need)} in {path}: {exc.strerror}") from None

    def create_job(self, job_id: int, limits: JobLimits, step: str = "batch", task: int = 0) -> tuple[str, ...]:
        """The job's cgroup with its limits, the step's in it and the task's in that;
        returns the ``cgroup.procs`` files a process writes to join the task's. A job's
        cgroup is limited once, when made (its later steps find it). Raises ``OSError``."""
        if not all(os.path.isdir(p) for p in self._dirs(cgroups.node_rel(self.node)).values()):
            try:  # removed behind the agent's back (an admin, a cleanup): made again
                self._make_node_dirs()
            except CgroupUnusable as exc:
                raise OSError(str(exc)) from None
        rel = cgroups.job_rel(self.node, job_id)
        for ctl, path in self._dirs(rel).items():
            try:
                os.mkdir(path, 0o755)
            except FileExistsError:
                continue
            try:
                self._limit(ctl, path, limits)
            except OSError:
                os.rmdir(path)  # never left in place unlimited
                raise
        procs = []
        for ctl, path in self._dirs(cgroups.task_rel(self.node, job_id, step, task)).items():
            for level in (os.path.dirname(path), path):
                _mkdir(level)
                if ctl == "cpuset":
                    _copy_cpuset(level)
            procs.append(os.path.join(path, "cgroup.procs"))
        return tuple(procs)

    def _limit(self, ctl: str, path: str, limits: JobLimits) -> None:
        if self.version == "v2":
            if limits.mem_bytes is not None:
                _write(os.path.join(path, "memory.max"), str(limits.mem_bytes))
                swap = 0 if limits.memsw_bytes is None else limits.memsw_bytes - limits.mem_bytes
                if self.conf.constrain_swap:
                    with contextlib.suppress(FileNotFoundError):  # no swap accounting
                        _write(os.path.join(path, "memory.swap.max"), str(swap))
            if limits.cpus:
                _write(os.path.join(path, "cpuset.cpus"), _cpulist(limits.cpus))
            if limits.deny:  # no devices.deny on v2: an eBPF program on the job's cgroup
                devbpf.attach(path, limits.deny)
            return
        if ctl == "memory" and limits.mem_bytes is not None:
            _write(os.path.join(path, "memory.limit_in_bytes"), str(limits.mem_bytes))
            memsw = os.path.join(path, "memory.memsw.limit_in_bytes")
            if limits.memsw_bytes is not None and os.path.exists(memsw):  # ConstrainSwapSpace
                _write(memsw, str(limits.memsw_bytes))
        elif ctl == "devices":
            for dev in limits.deny:
                _write(os.path.join(path, "devices.deny"), cgroups.device_rule(dev))
            for dev in limits.allow:
                _write(os.path.join(path, "devices.allow"), cgroups.device_rule(dev))
        elif ctl == "cpuset":
            _copy_cpuset(path)
            if limits.cpus:
                _write(os.path.join(path, "cpuset.cpus"), _cpulist(limits.cpus))

    # --- during and after ---------------------------------------------------------------

    def pids(self, job_id: int) -> set[int]:
        """Every process in the job's cgroup (its steps' included)."""
        out: set[int] = set()
        for dirpath, _dirs, _files in os.walk(self.job_dir(job_id)):
            with contextlib.suppress(OSError):
                out.update(int(p) for p in _read(os.path.join(dirpath, "cgroup.procs")).split())
        return out

    def step_task_pids(self, job_id: int) -> set[int]:
        """The processes of the job's srun steps (``step_<n>``), not of its batch step: a
        signal for the job's tasks reaches them through srun, which forwards it."""
        base = self.job_dir(job_id)
        out: set[int] = set()
        try:
            names = os.listdir(base)
        except OSError:
            return out
        for name in names:
            if not name.startswith("step_") or name == "step_batch":
                continue
            for dirpath, _dirs, _files in os.walk(os.path.join(base, name)):
                with contextlib.suppress(OSError):
                    out.update(int(p) for p in _read(os.path.join(dirpath, "cgroup.procs")).split())
        return out

    def oom_kills(self, job_id: int) -> dict[str, int]:
        """OOM kills in the job's memory cgroup, by step (``batch``, ``0``, ...): on v1 each
        step's directory counts its own (its tasks' included); on v2 only the job's has the
        memory controller, and its count is the batch step's."""
        if self.version == "v1" and "memory" not in self.roots:
            return {}
        base = self.job_dir(job_id, "" if self.version == "v2" else "memory")
        if self.version == "v2":
            count = _counter(os.path.join(base, "memory.events"), "oom_kill")
            return {"batch": count} if count else {}
        out: dict[str, int] = {}
        for dirpath, _dirs, _files in os.walk(base):
            count = _counter(os.path.join(dirpath, "memory.oom_control"), "oom_kill")
            if count:
                rel = os.path.relpath(dirpath, base).split(os.sep)[0]
                step = rel[len("step_") :] if rel.startswith("step_") else "batch"
                out[step] = out.get(step, 0) + count
        return out

    def peak_bytes(self, job_id: int) -> int | None:
        if self.version == "v1":
            if "memory" not in self.roots:
                return None
            path = os.path.join(self.job_dir(job_id, "memory"), "memory.max_usage_in_bytes")
        else:
            path = os.path.join(self.job_dir(job_id), "memory.peak")
        try:
            return int(_read(path).split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def memory(self, job_id: int, step: str, task: int = 0) -> memacct.Memory | None:
        """The memory accounting of one task's cgroup (``agent.memacct``): sstat's RSS, the
        batch step's MaxRSS; None where it has no memory controller of its own (v2, where
        only the job's directory has it, or ConstrainRAMSpace=no on v1)."""
        return memacct.read(self._dirs(cgroups.task_rel(self.node, job_id, step, task)).values())

    def freeze(self, job_id: int, frozen: bool) -> None:
        """Suspend (or resume) every process of the job at once."""
        if self.version == "v2":
            _write(os.path.join(self.job_dir(job_id), "cgroup.freeze"), "1" if frozen else "0")
        else:
            _write(os.path.join(self.job_dir(job_id), "freezer.state"), "FROZEN" if frozen else "THAWED")

    def kill_all(self, job_id: int, timeout: float = 5.0) -> bool:
        """SIGKILL every process of the job; True once none is left (within about ``timeout``
        seconds, counted in rounds: no clock is read here)."""
        if not os.path.isdir(self.job_dir(job_id)):
            return True
        kill_file = os.path.join(self.job_dir(job_id), "cgroup.kill")
        for _ in range(max(1, int(timeout / KILL_PAUSE))):
            pids = self.pids(job_id)
            if not pids:
                return True
            if self.version == "v2" and os.path.exists(kill_file):
                _write(kill_file, "1")
            else:  # frozen, nobody can fork while we go through the list
                with contextlib.suppress(OSError):
                    self.freeze(job_id, True)
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(OSError):
                    self.freeze(job_id, False)  # a frozen process cannot die of its SIGKILL
            time.sleep(KILL_PAUSE)
        return not self.pids(job_id)

    def remove_job(self, job_id: int) -> bool:
        """Remove the job's directories, leaves first; False if some remain (still busy)."""
        ok = True
        for ctl in self.roots:
            base = self.job_dir(job_id, ctl)
            for dirpath, _dirs, _files in sorted(os.walk(base), key=lambda w: -len(w[0])):
                try:
                    os.rmdir(dirpath)
                except FileNotFoundError:
                    pass
                except OSError:
                    ok = False
        return ok

    def remove_node(self) -> None:
        """The node's directory, when no job is left in it (the agent stops)."""
        for rel in (cgroups.node_rel(self.node), cgroups.TOP):  # the top one: if no node is left
            for path in self._dirs(rel).values():
                with contextlib.suppress(OSError):
                    os.rmdir(path)

    def describe(self) -> str:
        return f"cgroup/{self.version} ({', '.join(sorted(c or 'unified' for c in self.roots))})"

    def adopt(self, job_id: int, pid: int, step: str) -> None:
        """Move ``pid`` (and, on v1, only it: its children follow it from then on) into the
        job's ``step_<step>/task_0`` (``agent.adopt``). Raises ``OSError`` (the job has no
        cgroup here, or the process is gone)."""
        if not os.path.isdir(self.job_dir(job_id)):
            raise FileNotFoundError(f"job {job_id} has no cgroup on {self.node}")
        for ctl, path in self._dirs(cgroups.task_rel(self.node, job_id, step, 0)).items():
            for level in (os.path.dirname(path), path):
                _mkdir(level)
                if ctl == "cpuset":
                    _copy_cpuset(level)
            _write(os.path.join(path, "cgroup.procs"), str(pid))

    def containment(self) -> str:
        """What this node confines, as registered (``cgroups.containment``)."""
        return cgroups.containment(self.version, self.conf)


def gpu_devices(conf: CgroupConf, gpus: int) -> dict[int, tuple[str, int, int]]:
    """GPU index -> (kind, major, minor) of its device file (``GpuDeviceFiles``); raises
    ``CgroupUnusable`` when a GPU of the node has none (ConstrainDevices cannot be kept)."""
    out = {}
    for index in range(gpus):
        if index >= len(conf.gpu_files):
            raise CgroupUnusable(f"ConstrainDevices: GpuDeviceFiles names no device for GPU {index}")
        path = conf.gpu_files[index]
        try:
            st = os.stat(path)
        except OSError as exc:
            raise CgroupUnusable(f"ConstrainDevices: GPU {index}'s device {path}: {exc.strerror}") from None
        if not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
            raise CgroupUnusable(f"ConstrainDevices: GPU {index}'s {path} is not a device file")
        kind = "c" if stat.S_ISCHR(st.st_mode) else "b"
        out[index] = (kind, os.major(st.st_rdev), os.minor(st.st_rdev))
    return out


def _needed(ctl: str) -> str:
    return {
        "memory": "ConstrainRAMSpace",
        "devices": "ConstrainDevices",
        "cpuset": "ConstrainCores",
        V1_TRACK: "ProctrackType=proctrack/cgroup",
    }.get(ctl, ctl)


def _counter(path: str, key: str) -> int:
    try:
        for line in _read(path).splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _copy_cpuset(path: str) -> None:
    """A v1 cpuset must have CPUs and memory nodes before a process may join it."""
    parent = os.path.dirname(path)
    for name in ("cpuset.cpus", "cpuset.mems"):
        mine = os.path.join(path, name)
        if not _read(mine).strip():
            _write(mine, _read(os.path.join(parent, name)).strip() or "0")


def _cpulist(cpus: tuple[int, ...]) -> str:
    return ",".join(str(c) for c in sorted(cpus))
