"""A task's container as an OCI bundle's ``config.json``, as pure functions (no I/O).

srun's container options (pyxis's ``--container-*`` and Slurm's ``--container``) arrive in
the step's launch body as one mapping; ``ContainerRequest.parse`` checks it, and
``task_config`` writes the runtime configuration of one task (``agent.containers`` does the
files and the runtime):

* the process: the task's command line, its environment (the host's ``PATH`` replaced by a
  container's, unless ``--container-env=PATH`` keeps it), its working directory inside the
  container, and the user's uid, gid and groups, with no capabilities and
  ``noNewPrivileges``: the task is the user, inside as outside;
* the root file system: the image's, read-only unless the container is writable;
* mounts: ``/proc``, a fresh ``/dev``, ``/sys`` read-only, a private ``/tmp`` for a
  read-only root, the user's home (unless ``--no-container-mount-home``) and each
  ``--container-mounts`` entry;
* namespaces: a mount namespace only. The network, IPC, PID, UTS and cgroup namespaces stay
  the host's (the emulated node's host name), so rendezvous over TCP or shared memory
  works, signals reach the task, and ``/proc/self/cgroup`` is the job's;
* devices: the GPUs the step holds on this node (and the NVIDIA control devices), nothing
  else: a GPU the job does not hold has no device node inside;
* no ``cgroupsPath`` and no ``resources``: the task already runs in its cgroup (joined
  before exec, ``agent.spawn``) and the runtime runs with its cgroup manager disabled, so
  the job's limits apply to the container as they do to any task.

``bundle_config`` does the same with a user's own bundle (``--container=DIR``): its
``config.json`` is kept for what it says about the image (root, env, mounts), and what
concerns the node is replaced (user, capabilities, hooks, devices, cgroups).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CONTAINER_PATH",
    "ContainerError",
    "ContainerRequest",
    "Device",
    "Mount",
    "TaskIdentity",
    "bind_mount",
    "bundle_config",
    "container_env",
    "device_path_inside",
    "parse_mounts",
    "task_config",
]

# The PATH a task gets inside a container unless ``--container-env=PATH`` keeps the host's.
CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_MOUNT_FLAGS = frozenset({"ro", "rw", "private", "rprivate", "slave", "rslave", "shared", "rshared", "bind", "rbind"})


class ContainerError(ValueError):
    """A container request that cannot run (the job's fault); ``str()`` says why."""


@dataclass(frozen=True, slots=True)
class Mount:
    source: str
    target: str
    readonly: bool = False
    flags: tuple[str, ...] = ()  # propagation flags, passed on


@dataclass(frozen=True, slots=True)
class Device:
    """A device node to create inside: its path there, its type (``c``/``b``), numbers."""

    path: str
    kind: str
    major: int
    minor: int


@dataclass(frozen=True, slots=True)
class TaskIdentity:
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str = ""  # the user's home directory on the host ("" when unknown)
    umask: int | None = None


@dataclass(frozen=True, slots=True)
class ContainerRequest:
    """srun's container options, as the launch body carries them."""

    image: str = ""  # a path (tarball or directory) or a name for ContainerImageDir
    bundle: str = ""  # Slurm's --container=DIR (an OCI bundle)
    name: str = ""  # --container-name: reused by the job's later steps on the node
    mounts: tuple[Mount, ...] = ()
    workdir: str = ""
    writable: bool = False
    mount_home: bool = True
    env: tuple[str, ...] = ()  # --container-env: host values kept for these names
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, body: Any) -> ContainerRequest:
        """The launch body's ``container``; ``ContainerError`` naming what is wrong."""
        if not isinstance(body, Mapping):
            raise ContainerError("malformed container request")
        image = str(body.get("image") or "")
        bundle = str(body.get("bundle") or "")
        name = str(body.get("name") or "")
        if image and bundle:
            raise ContainerError("--container and --container-image cannot be used together")
        if not (image or bundle or name):
            raise ContainerError("a container needs --container-image, --container-name or --container")
        if bundle and not os.path.isabs(bundle):
            raise ContainerError(f"--container={bundle}: the bundle must be an absolute path")
        if name and (name.startswith(".") or "/" in name or len(name) > 128):
            raise ContainerError(f"--container-name={name}: not a valid container name")
        workdir = str(body.get("workdir") or "")
        if workdir and not os.path.isabs(workdir):
            raise ContainerError(f"--container-workdir={workdir}: must be an absolute path")
        raw = body.get("mounts") or ""
        mounts = parse_mounts(raw) if isinstance(raw, str) else parse_mounts(",".join(str(m) for m in raw))
        env = tuple(e for e in str(body.get("env") or "").split(",") if e)
        return cls(
            image=image,
            bundle=bundle,
            name=name,
            mounts=mounts,
            workdir=workdir,
            writable=bool(body.get("writable")),
            mount_home=body.get("mount_home", True) is not False,
            env=env,
        )


def parse_mounts(text: str) -> tuple[Mount, ...]:
    """``SRC[:DST[:FLAGS]][,...]`` (pyxis's form; FLAGS joined by ``+``, e.g. ``ro+rprivate``)."""
    out = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        parts = item.split(":")
        if len(parts) > 3:
            raise ContainerError(f"--container-mounts: {item!r}: expected SRC:DST[:FLAGS]")
        source = parts[0]
        target = parts[1] if len(parts) > 1 and parts[1] else source
        flags = tuple(f for f in (parts[2].split("+") if len(parts) > 2 else ()) if f)
        for path in (source, target):
            if not os.path.isabs(path) or ".." in path.split("/"):
                raise ContainerError(f"--container-mounts: {item!r}: {path!r} is not an absolute path")
        unknown = [f for f in flags if f not in _MOUNT_FLAGS]
        if unknown:
            raise ContainerError(f"--container-mounts: {item!r}: unknown flag {unknown[0]!r}")
        readonly = "ro" in flags
        rest = tuple(f for f in flags if f not in ("ro", "rw", "bind", "rbind"))
        out.append(Mount(os.path.normpath(source), os.path.normpath(target), readonly, rest))
    return tuple(out)


def container_env(task_env: Mapping[str, str], keep: Iterable[str], image_env: Sequence[str] = ()) -> list[str]:
    """The task's environment inside: the task's own, with the image's variables (``KEY=V``;
    a plain rootfs has none but ``PATH``) in place of the host's, except those ``keep``
    names (``--container-env``), whose host values stay."""
    kept = set(keep)
    env = dict(task_env)
    image = {"PATH": CONTAINER_PATH}
    for item in image_env:
        key, eq, value = item.partition("=")
        if eq:
            image[key] = value
    for key, value in image.items():
        if key not in kept or key not in env:
            env[key] = value
    return [f"{k}={v}" for k, v in env.items()]


def device_path_inside(host_path: str) -> str:
    """Where a device node appears inside: its own path under ``/dev``, else ``/dev/NAME``
    (an emulated GPU's device file may live anywhere on the host)."""
    norm = os.path.normpath(host_path)
    return norm if norm.startswith("/dev/") else "/dev/" + os.path.basename(norm)


def bind_mount(mount: Mount) -> dict[str, Any]:
    """A bind mount's entry in ``config.json``."""
    return _bind(mount)


def _bind(mount: Mount) -> dict[str, Any]:
    options = ["rbind", "nosuid", "nodev", "ro" if mount.readonly else "rw", *mount.flags]
    return {"destination": mount.target, "type": "bind", "source": mount.source, "options": options}


def _devices(devices: Sequence[Device], who: TaskIdentity) -> list[dict[str, Any]]:
    return [
        {"path": d.path, "type": d.kind, "major": d.major, "minor": d.minor, "fileMode": 0o666, "uid": 0, "gid": 0}
        for d in devices
    ]


def _process(argv: Sequence[str], env: list[str], cwd: str, who: TaskIdentity) -> dict[str, Any]:
    user: dict[str, Any] = {"uid": who.uid, "gid": who.gid, "additionalGids": list(who.groups)}
    if who.umask is not None:
        user["umask"] = who.umask
    return {
        "terminal": False,
        "user": user,
        "args": list(argv),
        "env": env,
        "cwd": cwd,
        "noNewPrivileges": True,
        "capabilities": {k: [] for k in ("bounding", "effective", "permitted", "inheritable", "ambient")},
    }


def task_config(
    request: ContainerRequest,
    *,
    rootfs: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    host_cwd: str,
    who: TaskIdentity,
    devices: Sequence[Device] = (),
) -> dict[str, Any]:
    """The ``config.json`` of one task in a pyxis-style container (``--container-image``)."""
    readonly = not request.writable
    mounts: list[dict[str, Any]] = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {
            "destination": "/dev",
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
        },
        {
            "destination": "/dev/pts",
            "type": "devpts",
            "source": "devpts",
            "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"],
        },
        {
            "destination": "/dev/shm",
            "type": "tmpfs",
            "source": "shm",
            "options": ["nosuid", "noexec", "nodev", "mode=1777"],
        },
        {
            "destination": "/sys",
            "type": "bind",
            "source": "/sys",
            "options": ["rbind", "nosuid", "noexec", "nodev", "ro"],
        },
    ]
    if readonly:  # somewhere to write, as in any Unix: the container's own /tmp
        mounts.append(
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]}
        )
    binds = list(request.mounts)
    if request.mount_home and who.home and who.home != "/" and not any(m.target == who.home for m in binds):
        binds.insert(0, Mount(who.home, who.home))
    mounts += [_bind(m) for m in binds]
    cwd = request.workdir or _cwd_inside(host_cwd, binds)
    return {
        "ociVersion": "1.0.2",
        "process": _process(argv, container_env(env, request.env), cwd, who),
        "root": {"path": rootfs, "readonly": readonly},
        "mounts": mounts,
        "linux": {
            "namespaces": [{"type": "mount"}],
            "devices": _devices(devices, who),
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"],
            "readonlyPaths": ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"],
        },
    }


def _cwd_inside(host_cwd: str, binds: Sequence[Mount]) -> str:
    """The task's working directory inside: srun's own when a mount brings it in (the home
    directory, a ``--container-mounts`` target of the same path), else ``/``."""
    for m in binds:
        if m.source == m.target and (host_cwd == m.target or host_cwd.startswith(m.target.rstrip("/") + "/")):
            return host_cwd
    return "/"


def bundle_config(
    user_config: Mapping[str, Any],
    request: ContainerRequest,
    *,
    argv: Sequence[str],
    env: Mapping[str, str],
    who: TaskIdentity,
    devices: Sequence[Device] = (),
) -> dict[str, Any]:
    """A user's bundle (``--container=DIR``) made safe to run for this task: the bundle's
    root, mounts and environment are kept; the command is srun's, the identity the user's
    (no capabilities, ``noNewPrivileges``), hooks (run as root on the host) and devices are
    dropped, the allocated GPUs added, cgroups left to muster, and the network, IPC and PID
    namespaces the host's (rendezvous, signals)."""
    config = {k: v for k, v in user_config.items() if k not in ("hooks",)}
    root = config.get("root")
    if not isinstance(root, Mapping) or not isinstance(root.get("path"), str):
        raise ContainerError(f"{request.bundle}/config.json: no root.path")
    rootfs = root["path"] if os.path.isabs(root["path"]) else os.path.join(request.bundle, root["path"])
    config["root"] = {"path": os.path.normpath(rootfs), "readonly": bool(root.get("readonly", False))}
    process = config.get("process") if isinstance(config.get("process"), Mapping) else {}
    assert isinstance(process, Mapping)
    image_env = [str(e) for e in process.get("env") or [] if isinstance(e, str)]
    cwd = request.workdir or str(process.get("cwd") or "/")
    config["process"] = _process(argv, container_env(env, request.env, image_env), cwd, who)
    mounts = [m for m in config.get("mounts") or [] if isinstance(m, Mapping)]
    config["mounts"] = [*mounts, *(_bind(m) for m in request.mounts)]
    linux = dict(config.get("linux") or {})
    for key in ("resources", "cgroupsPath", "devices", "uidMappings", "gidMappings"):
        linux.pop(key, None)
    spaces = [n for n in linux.get("namespaces") or [] if isinstance(n, Mapping)]
    host = {"network", "ipc", "pid", "cgroup", "user", "uts"}
    kept = [dict(n) for n in spaces if n.get("type") not in host]
    if not any(n.get("type") == "mount" for n in kept):
        kept.append({"type": "mount"})
    linux["namespaces"] = kept
    linux["devices"] = _devices(devices, who)
    config["linux"] = linux
    return config
