"""Container tasks on a node: oci.conf, the OCI runtime, images unpacked once, bundles.

A node runs containers when ``oci.conf`` sits beside the config (as Slurm's does). Its keys
(Slurm's names where Slurm has the idea; docs/containers.md):

* ``RunTimeRun="crun --root %m/run/%j --cgroup-manager=disabled run --bundle %b %n.%j.%s.%t"``
  (that is the default: the runtime's state per job in the spool, gone with the job, so a
  runtime killed mid-step leaves nothing that a requeued run of the job would trip on): the command that runs one task's container in the foreground. Slurm's
  patterns: ``%b`` the bundle, ``%j`` job id, ``%s`` step id, ``%t`` task id, ``%n`` the node,
  ``%u`` the user's name, ``%U`` uid, ``%r`` the root file system, ``%m`` the node's
  container spool. Its first word must be an executable on the agent's PATH.
* ``RunTimeEnvExclude=REGEX``: variables left out of the container's environment.
* ``ContainerImageDir=DIR`` (muster's): where ``--container-image=NAME[:TAG]`` is found: the
  site's "registry" is a directory of files ``NAME:TAG.tar``, ``.tar.gz``, ``.tgz`` or a
  directory ``NAME:TAG`` (a ``/`` in NAME is written ``+``); no network is used.
* ``NodeName=HOSTLIST Key=Value...`` (muster's, as in job_container.conf): for those nodes.

A node whose oci.conf cannot be used (a malformed line, a runtime that is not installed)
is *broken*: ``Containers.broken`` says why, the agent reports it as a fault (the
controller drains the node with that reason) and refuses every container task there
rather than run it unconfined. A task with a container on a node without oci.conf is
refused as the job's error.

Images: a rootfs tarball (``.tar``, ``.tar.gz``, ``.tgz``) is unpacked once per node into
``<spool>/containers/images/<digest>`` (keyed by path, size and mtime, unpacked beside and
renamed into place, so a half unpacked image is never used); a directory is used as it is.
An unnamed, read-only container runs on the image itself. ``--container-name`` and
``--container-writable`` get an overlay on it (``overlay_mount``: ``metacopy=on``, its files
given to the user, as enroot's are, by copying metadata up; a copy of the image where the
kernel refuses overlays), one per (job, name) under ``<spool>/containers/jobs/<job>/``: a
named container's changes are seen by the job's later steps on the node; the overlays are
unmounted and the job's directory removed at its end (``remove``). The batch script of
``sbatch --container``/``--container-image`` is a container task too (``batch_request``).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import pwd
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from muster.agent import ocibundle
from muster.agent.ocibundle import ContainerError, ContainerRequest, Device, Mount, TaskIdentity
from muster.core.nodeconf import NodeConfError, node_settings

__all__ = [
    "BATCH_STEP",
    "DEFAULT_RUN",
    "batch_request",
    "identity",
    "request_of",
    "runtime_argv",
    "step_gpus",
    "user_reaches",
    "Containers",
    "ContainerError",
    "NodeFault",
    "OciConf",
    "OciConfError",
    "conf_path_beside",
    "hide",
    "parse_conf",
]

log = logging.getLogger("muster.agent.containers")

DEFAULT_RUN = "crun --root %m/run/%j --cgroup-manager=disabled run --bundle %b %n.%j.%s.%t"
_KEYS = {"runtimerun": "run", "runtimeenvexclude": "env_exclude", "containerimagedir": "image_dir"}
_UNSUPPORTED = ("runtimecreate", "runtimestart", "runtimequery", "runtimekill", "runtimedelete")
_SUFFIXES = (".tar", ".tar.gz", ".tgz", "")
# NVIDIA's control devices: every process using a GPU opens them.
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
# crun refuses a hybrid cgroup hierarchy whose v2 side has controllers, even when told to
# leave cgroups alone; muster manages the task's cgroups itself, so the runtime is shown
# none there (``hide``).
UNIFIED = "/sys/fs/cgroup/unified"

_CLONE_NEWNS = 0x00020000
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)  # loaded in the agent, never in a forked child
# Launches prepare their containers in threads: one at a time makes an image or a copy.
_making = threading.Lock()


class OciConfError(ValueError):
    """oci.conf that cannot be used; ``str()`` names the file and the line."""


class NodeFault(Exception):
    """The node cannot run containers (drain it); ``str()`` is the reason."""


@dataclass(frozen=True, slots=True)
class OciConf:
    run: str = DEFAULT_RUN
    env_exclude: str = ""
    image_dir: str = ""


def conf_path_beside(conf_path: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(conf_path)), "oci.conf")


def parse_conf(text: str, path: str, node: str) -> OciConf:
    """``node``'s settings in oci.conf (values may be quoted); ``OciConfError`` naming the line."""
    try:
        settings = node_settings(text, node, quoted=True)
    except NodeConfError as exc:
        raise OciConfError(f"{path}:{exc.line}: {exc}") from None
    values: dict[str, str] = {}
    for key, (value, number) in settings.items():
        if key in _UNSUPPORTED:
            raise OciConfError(f"{path}:{number}: {key}: muster runs containers with RunTimeRun only")
        if key not in _KEYS:
            raise OciConfError(
                f"{path}:{number}: {key!r} is not supported (RunTimeRun, RunTimeEnvExclude, ContainerImageDir)"
            )
        values[_KEYS[key]] = value
    conf = OciConf(**values)
    if not shlex.split(conf.run) or "%b" not in conf.run:
        raise OciConfError(f"{path}: RunTimeRun must name a runtime and its bundle (%b)")
    if conf.env_exclude:
        try:
            re.compile(conf.env_exclude)
        except re.error as exc:
            raise OciConfError(f"{path}: RunTimeEnvExclude: {exc}") from None
    if conf.image_dir and not os.path.isabs(conf.image_dir):
        raise OciConfError(f"{path}: ContainerImageDir must be an absolute directory")
    return conf


def hide(paths: Sequence[str]) -> None:
    """In a forked child, as root, before exec of the runtime: a mount namespace of its own
    where each of ``paths`` is an empty tmpfs. Raises ``OSError``."""
    if _libc.unshare(_CLONE_NEWNS) != 0:
        raise _errno("unshare")
    if _libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise _errno("making / private")
    for path in paths:
        if _libc.mount(b"tmpfs", path.encode(), b"tmpfs", 0, b"size=4k,mode=755") != 0:
            raise _errno(f"hiding {path}")


def _errno(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


@dataclass(slots=True)
class Containers:
    """This node's containers: its oci.conf, spool and GPU device files."""

    conf: OciConf
    spool: str  # <agent state>/containers
    node: str
    gpu_files: tuple[str, ...] = ()
    broken: str | None = None  # why this node cannot run containers (drained)
    runtime: str = ""  # the runtime's executable, found on PATH
    masks: tuple[str, ...] = field(default_factory=tuple)
    overlay: bool = True  # writable containers as overlays where the kernel allows (else copies)

    @classmethod
    def configure(cls, conf_path: str, spool: str, node: str, gpu_files: Sequence[str]) -> Containers | None:
        """The node's containers as oci.conf beside the config says; None without oci.conf.
        A bad oci.conf or a missing runtime gives a *broken* one (``broken`` says why)."""
        path = conf_path_beside(conf_path)
        try:
            with open(path) as f:
                text = f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            return cls(OciConf(), spool, node, tuple(gpu_files), broken=f"oci.conf: cannot read {path}: {exc.strerror}")
        try:
            conf = parse_conf(text, path, node)
        except OciConfError as exc:
            return cls(OciConf(), spool, node, tuple(gpu_files), broken=f"oci.conf: {exc}")
        found = cls(conf, spool, node, tuple(gpu_files))
        if os.geteuid() != 0:
            found.broken = "containers need musterd to run as root (oci.conf is present)"
            return found
        found.check_runtime()
        return found

    def check_runtime(self) -> str | None:
        """Is the runtime still installed? Sets and returns ``broken`` when not."""
        exe = shlex.split(self.conf.run)[0]
        where = shutil.which(exe)
        if where is None:
            self.broken = f"container runtime {exe} not found (oci.conf RunTimeRun)"
            return self.broken
        self.runtime = where
        self.masks = (UNIFIED,) if _has_v2_controllers() and os.path.basename(where) == "crun" else ()
        if self.broken and self.broken.startswith("container runtime"):
            self.broken = None
        return self.broken

    # --- images -------------------------------------------------------------------------

    def image_path(self, ref: str) -> str:
        """The file or directory ``--container-image`` names here; ``ContainerError`` when none."""
        if ref.startswith("/"):
            if not os.path.exists(ref):
                raise ContainerError(f"container image {ref} not found on {self.node}")
            return ref
        if not self.conf.image_dir:
            raise ContainerError(
                f"container image {ref}: not a path, and {self.node} has no ContainerImageDir in oci.conf"
            )
        name = ref.split("#", 1)[-1].removeprefix("docker://")
        if "@" in name.split("/")[0]:
            name = name.split("@", 1)[1]
        base, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "latest")
        if "/" in tag or ".." in base.split("/") or not base:
            raise ContainerError(f"container image {ref}: not a valid image name")
        stem = os.path.join(self.conf.image_dir, f"{base.replace('/', '+')}:{tag}")
        for suffix in _SUFFIXES:
            if os.path.exists(stem + suffix):
                return stem + suffix
        raise ContainerError(
            f"container image {ref} not found on {self.node} (looked for {stem}.tar in ContainerImageDir)"
        )

    def unpacked(self, path: str) -> str:
        """The image's root file system here: a directory as it is, a tarball unpacked once."""
        if os.path.isdir(path):
            return path
        st = os.stat(path)
        digest = hashlib.sha256(f"{os.path.realpath(path)}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:24]
        images = os.path.join(self.spool, "images")
        final = os.path.join(images, digest)
        if os.path.isdir(final):
            return final
        os.makedirs(images, mode=0o700, exist_ok=True)
        work = tempfile.mkdtemp(prefix=".unpack-", dir=images)
        os.chmod(work, 0o755)
        # GNU tar as root keeps owners and modes, strips leading / and refuses ../ members.
        done = subprocess.run(
            ["tar", "-x", "--no-same-permissions", "-f", path, "-C", work],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            shutil.rmtree(work, ignore_errors=True)
            detail = (done.stderr.strip().splitlines() or ["tar failed"])[-1]
            raise ContainerError(f"container image {path} cannot be unpacked on {self.node}: {detail}")
        try:
            os.rename(work, final)
        except OSError:  # another launch unpacked it first
            shutil.rmtree(work, ignore_errors=True)
        log.info("node %s: image %s unpacked into %s", self.node, path, final)
        return final

    # --- a task's container -------------------------------------------------------------

    def job_dir(self, job_id: int) -> str:
        return os.path.join(self.spool, "jobs", str(job_id))

    def rootfs(self, request: ContainerRequest, job_id: int, step_id: int | str, uid: int, gid: int) -> str:
        """The root file system the step's tasks run on (a named or writable container's
        copy, made on first use; otherwise the image itself)."""
        with _making:
            return self._rootfs(request, job_id, step_id, uid, gid)

    def _rootfs(self, request: ContainerRequest, job_id: int, step_id: int | str, uid: int, gid: int) -> str:
        if not (request.name or request.writable):
            return self.unpacked(self.image_path(request.image))
        name = request.name or "_unnamed"
        top = os.path.join(self.job_dir(job_id), "named", name)
        root = os.path.join(top, "rootfs")
        if request.name and os.path.isdir(root):
            return root  # the job's container of that name, as its earlier steps left it
        if not request.image:
            raise ContainerError(f"container {request.name} does not exist on {self.node}: give --container-image")
        image = self.unpacked(self.image_path(request.image))
        os.makedirs(top, mode=0o700, exist_ok=True)
        if not request.name:  # a writable unnamed container: one copy per step, its tasks' own
            root = os.path.join(top, f"step_{step_id}", "rootfs")
            if os.path.isdir(root):
                return root
            os.makedirs(os.path.dirname(root), mode=0o700, exist_ok=True)
        # metacopy only on an image this agent unpacked: a lower directory of the user's is
        # not trusted with it (overlayfs.rst: never metacopy=on with untrusted layers)
        mine = image.startswith(os.path.join(self.spool, "images") + os.sep)
        if self.overlay and overlay_mount(image, root, metacopy=mine):
            _chown_tree(root, uid, gid)  # metadata only: metacopy copies no data up
            return root
        work = root + ".copy"
        shutil.rmtree(work, ignore_errors=True)
        done = subprocess.run(["cp", "-a", "--reflink=auto", image, work], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            shutil.rmtree(work, ignore_errors=True)
            raise OSError(f"copying the image for the container: {done.stderr.strip()}")
        _chown_tree(work, uid, gid)
        os.rename(work, root)
        return root

    def devices(self, gpus: Sequence[int]) -> list[Device]:
        """The device nodes of ``gpus`` (indexes into ``gpu_files``) and NVIDIA's control
        devices where the machine has them."""
        paths = [self.gpu_files[g] for g in gpus if 0 <= g < len(self.gpu_files)]
        if paths:
            paths += [p for p in CONTROL_DEVICES if os.path.exists(p)]
        out = []
        for path in paths:
            try:
                st = os.stat(path)
            except OSError:
                continue  # no device file for that GPU here (emulated GPUs): nothing to add
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                kind = "c" if stat.S_ISCHR(st.st_mode) else "b"
                out.append(Device(ocibundle.device_path_inside(path), kind, os.major(st.st_rdev), os.minor(st.st_rdev)))
        return out

    def prepare(
        self,
        request: ContainerRequest,
        *,
        job_id: int,
        step_id: int | str,
        task: int,
        argv: Sequence[str],
        env: Mapping[str, str],
        host_cwd: str,
        who: TaskIdentity,
        gpus: Sequence[int],
        user: str,
        binds: Sequence[Mount] = (),
    ) -> list[str]:
        """Write the task's bundle; the runtime's command line that runs it. ``binds`` are
        the node's own bind mounts (the batch script's spool directory), not checked
        against the user's reach. Raises ``NodeFault`` (drain), ``ContainerError`` (the
        job's) or ``OSError`` (the node's)."""
        if self.broken is None:
            self.check_runtime()
        if self.broken is not None:
            raise NodeFault(self.broken)
        if self.conf.env_exclude:
            drop = re.compile(self.conf.env_exclude)
            env = {k: v for k, v in env.items() if not drop.fullmatch(k)}
        # The runtime (root) opens what the user names: the user must be able to reach it
        # themselves, or a bind mount would pass a directory they cannot enter.
        named = [(m.source, f"--container-mounts: {m.source}") for m in request.mounts]
        if request.bundle:
            named.append((os.path.join(request.bundle, "config.json"), f"--container={request.bundle}"))
        elif request.image.startswith("/"):
            named.append((request.image, f"container image {request.image}"))
        for path, what in named:
            if os.path.exists(path) and not user_reaches(path, who):
                raise ContainerError(f"{what}: permission denied for uid {who.uid} on {self.node}")
        devices = self.devices(gpus)
        if request.bundle:
            config_path = os.path.join(request.bundle, "config.json")
            try:
                with open(config_path) as f:
                    user_config = json.load(f)
            except (OSError, ValueError) as exc:
                raise ContainerError(f"--container={request.bundle}: cannot read config.json: {exc}") from None
            if not isinstance(user_config, dict):
                raise ContainerError(f"--container={request.bundle}: config.json is not an object")
            config = ocibundle.bundle_config(user_config, request, argv=argv, env=env, who=who, devices=devices)
            if not os.path.isdir(config["root"]["path"]):
                raise ContainerError(f"--container={request.bundle}: no root file system at {config['root']['path']}")
        else:
            rootfs = self.rootfs(request, job_id, step_id, who.uid, who.gid)
            config = ocibundle.task_config(
                request, rootfs=rootfs, argv=argv, env=env, host_cwd=host_cwd, who=who, devices=devices
            )
        config["mounts"] = [*config["mounts"], *(ocibundle.bind_mount(m) for m in binds)]
        bundle = os.path.join(self.job_dir(job_id), "bundles", f"{step_id}.{task}")
        os.makedirs(bundle, mode=0o700, exist_ok=True)
        with open(os.path.join(bundle, "config.json"), "w") as f:
            json.dump(config, f, indent=1)
        fields = {
            "%b": bundle,
            "%j": str(job_id),
            "%s": str(step_id),
            "%t": str(task),
            "%n": self.node,
            "%u": user,
            "%U": str(who.uid),
            "%r": str(config["root"]["path"]),
            "%m": self.spool,
            "%%": "%",
        }
        return runtime_argv(self.conf.run, self.runtime, fields)

    def remove(self, job_id: int) -> None:
        """The job's containers (their overlays unmounted first), bundles and runtime state
        here, gone (at the job's end on this node)."""
        top = self.job_dir(job_id)
        for point in mounts_under(top):
            if _libc.umount2(point.encode(), _MNT_DETACH) != 0:
                log.warning("node %s: cannot unmount %s: %s", self.node, point, _errno("umount").strerror)
                return  # removing its files would reach through it: left for the next try
        shutil.rmtree(top, ignore_errors=True)
        shutil.rmtree(os.path.join(self.spool, "run", str(job_id)), ignore_errors=True)


def overlay_mount(image: str, root: str, metacopy: bool = True) -> bool:
    """A writable container's root file system as an overlay on ``image`` (read-only
    below): ``root`` is the merged view, its ``upper`` and ``work`` directories beside it;
    with ``metacopy`` (``metacopy=on``) giving the user the tree (``_chown_tree``) copies
    metadata up, not data. False (nothing left mounted) where the kernel or the paths do not allow
    it (an option separator in the image's path, no overlayfs, an upper on overlayfs):
    the caller copies the image instead."""
    if any(c in image for c in ",:\\"):
        return False
    top = os.path.dirname(root)
    upper, work = os.path.join(top, "upper"), os.path.join(top, "work")
    for path in (upper, work, root):
        os.makedirs(path, mode=0o755, exist_ok=True)
    base = f"lowerdir={image},upperdir={upper},workdir={work}"
    for options in (base + ",metacopy=on", base) if metacopy else (base,):
        if _libc.mount(b"overlay", root.encode(), b"overlay", 0, options.encode()) == 0:
            return True
    log.info("overlay refused for %s (%s): copying the image instead", root, _errno("mount").strerror)
    for path in (root, work, upper):
        shutil.rmtree(path, ignore_errors=True)
    return False


def mounts_under(top: str) -> list[str]:
    """Mount points at or below ``top`` in this mount namespace, deepest first."""
    prefix = os.path.realpath(top).rstrip("/") + "/"
    found = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                point = line.split()[4].replace("\\040", " ")
                if (point + "/").startswith(prefix):
                    found.append(point)
    except OSError:
        return []
    return sorted(found, key=len, reverse=True)


def runtime_argv(run: str, runtime: str, fields: Mapping[str, str]) -> list[str]:
    """RunTimeRun's words with Slurm's patterns filled (``%b``, ``%j``...; ``%%`` is ``%``),
    its first the runtime found on PATH."""
    words = shlex.split(run)
    out = [re.sub(r"%[bjstnuUrm%]", lambda m: fields[m.group(0)], w) for w in words]
    out[0] = runtime
    return out


def user_reaches(path: str, who: TaskIdentity) -> bool:
    """Whether the user could open ``path`` themselves (search on every directory above it,
    read on it), by the mode bits of its real path: what the agent, as root, must check
    before it binds or reads a path on the user's behalf."""
    real = os.path.realpath(path)
    parts = real.split("/")
    for depth in range(1, len(parts) + 1):
        current = "/".join(parts[:depth]) or "/"
        try:
            st = os.stat(current)
        except OSError:
            return False
        last = depth == len(parts)
        want = (stat.S_IROTH if not stat.S_ISDIR(st.st_mode) else stat.S_IXOTH) if last else stat.S_IXOTH
        if not _allowed(st, who, want):
            return False
    return True


def _allowed(st: os.stat_result, who: TaskIdentity, other_bit: int) -> bool:
    """Mode bits as the kernel reads them: owner's, else group's, else others'."""
    if who.uid == 0:
        return True
    if st.st_uid == who.uid:
        return bool(st.st_mode & (other_bit << 6))
    if st.st_gid == who.gid or st.st_gid in who.groups:
        return bool(st.st_mode & (other_bit << 3))
    return bool(st.st_mode & other_bit)


def _has_v2_controllers() -> bool:
    try:
        with open(os.path.join(UNIFIED, "cgroup.controllers")) as f:
            return bool(f.read().strip())
    except OSError:
        return False


def _chown_tree(top: str, uid: int, gid: int) -> None:
    """Everything under ``top`` owned by the user (links themselves, never followed)."""
    os.lchown(top, uid, gid)
    for base, dirs, files in os.walk(top):
        for name in (*dirs, *files):
            os.lchown(os.path.join(base, name), uid, gid)


def identity(uid: int, gid: int, groups: Sequence[int] | None, umask: int | None) -> TaskIdentity:
    """The task's user as a container process: its groups and home directory."""
    try:
        home = pwd.getpwuid(uid).pw_dir
    except KeyError:
        home = ""
    return TaskIdentity(uid, gid, tuple(groups or (gid,)), home if home and os.path.isdir(home) else "", umask)


def step_gpus(layout: Mapping[str, Any], node: str) -> list[int]:
    """The GPU indexes a step's grant gives it on ``node`` (its layout's ``gpus``)."""
    nodes = list(layout.get("nodes") or [])
    gpus = list(layout.get("gpus") or [])
    at = nodes.index(node) if node in nodes else -1
    try:
        return [int(g) for g in gpus[at]] if 0 <= at < len(gpus) else []
    except (TypeError, ValueError):
        return []


# The batch step's name where a step id is written (bundles, RunTimeRun's ``%s``), as
# Slurm names it (``StepId=<job>.batch``).
BATCH_STEP = "batch"
# sbatch's container options, as the job's environment carries them to the batch script
# (and to every srun in it): Slurm's ``--container`` and pyxis's ``--container-*``
# (``cli.containeropts``; a flag's value is ``1``).
_SPANK = "SLURM_SPANK__SLURM_SPANK_OPTION_pyxis_"
_SPANK_KEYS = {
    "container_image": "image",
    "container_mounts": "mounts",
    "container_workdir": "workdir",
    "container_name": "name",
    "container_env": "env",
}


def batch_request(env: Mapping[str, str], workdir: str) -> ContainerRequest | None:
    """The batch script's container, from the job's environment: ``SLURM_CONTAINER``
    (``sbatch --container``, Slurm's) or pyxis's options given to sbatch; None when the
    job has none. A relative path is the job's working directory's. ``ContainerError``."""
    raw: dict[str, Any] = {}
    bundle = env.get("SLURM_CONTAINER", "").strip()
    if bundle:
        raw["bundle"] = os.path.normpath(os.path.join(workdir, bundle))
    for key, field_name in _SPANK_KEYS.items():
        value = env.get(_SPANK + key, "").strip()
        if value:
            raw[field_name] = value
    if raw.get("image", "").startswith("."):
        raw["image"] = os.path.normpath(os.path.join(workdir, raw["image"]))
    flags: dict[str, tuple[str, bool]] = {
        "container_writable": ("writable", True),
        "container_readonly": ("writable", False),
        "container_mount_home": ("mount_home", True),
        "no_container_mount_home": ("mount_home", False),
    }
    for flag, (field_name, on) in flags.items():
        if env.get(_SPANK + flag):
            raw[field_name] = on
    if not (raw.get("image") or raw.get("bundle") or raw.get("name")):
        return None
    return ContainerRequest.parse(raw)


def request_of(body: Mapping[str, Any]) -> ContainerRequest | None:
    """The launch body's container request, or None when the step has none."""
    raw = body.get("container")
    return None if not raw else ContainerRequest.parse(raw)
