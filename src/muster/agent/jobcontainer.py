"""A private /tmp per job (Slurm's ``JobContainerType=job_container/tmpfs``).

With ``JobContainerType=job_container/tmpfs`` in slurm.conf, every process of a job on a
node (its batch script, every task of its steps) sees its own ``/tmp`` (and the other
``Dirs``): a directory of the job's under ``BasePath``, bind-mounted over ``/tmp`` in a
mount namespace of the process's own, made in the forked child before it drops root
(``enter``). All of a job's processes on a node bind the same directory, so they share it;
no other job sees it, and the machine's ``/tmp`` is never written. The directory is removed
when the job ends on the node (``remove``).

``job_container.conf`` beside slurm.conf says where (Slurm's keys):

* ``BasePath=PATH``: where the jobs' directories are made (``PATH/<jobid>/_tmp`` for
  ``/tmp``); required. ``%n`` in it is the node's name (muster's: emulated nodes that share
  a machine keep apart).
* ``AutoBasePath=true|false``: create ``BasePath`` (0755) when missing; without it a missing
  ``BasePath`` fails the launch (the node's fault: drained).
* ``Dirs=/tmp,/dev/shm``: the directories made private (Slurm's default). Each is backed by
  a directory under the job's, so a private ``/dev/shm`` lives on ``BasePath``'s file system.
* ``NodeName=HOSTLIST Key=Value...``: settings for those nodes only.

The job's directory is root's (0700); each private directory in it is 1777, as ``/tmp``.
"""

from __future__ import annotations

import ctypes
import os
import shutil
from dataclasses import dataclass

from muster.core.nodeconf import NodeConfError, node_settings

__all__ = ["TMPFS", "JobContainer", "JobContainerError", "conf_path_beside", "enter", "parse_conf"]

TMPFS = "job_container/tmpfs"
DEFAULT_DIRS = ("/tmp", "/dev/shm")

_CLONE_NEWNS = 0x00020000
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18

# Loaded in the agent, never in a forked child (as ``nodeident`` does).
_libc = ctypes.CDLL(None, use_errno=True)


class JobContainerError(ValueError):
    """job_container.conf that cannot be used; ``str()`` names the file and the line."""


@dataclass(frozen=True, slots=True)
class JobContainer:
    """Where a node keeps its jobs' private directories."""

    base: str
    auto: bool = False
    dirs: tuple[str, ...] = DEFAULT_DIRS

    def job_dir(self, job_id: int) -> str:
        return os.path.join(self.base, str(job_id))

    def binds(self, job_id: int) -> tuple[tuple[str, str], ...]:
        """(directory of the job's, the directory it is bound over) for each of ``dirs``
        that this machine has (a container without ``/dev/shm`` has nothing to hide)."""
        top = self.job_dir(job_id)
        return tuple(
            (os.path.join(top, "_" + d.strip("/").replace("/", "_")), d) for d in self.dirs if os.path.isdir(d)
        )

    def prepare(self, job_id: int) -> tuple[tuple[str, str], ...]:
        """Make the job's directories (kept when they exist: the job's other processes here
        share them); the binds its processes make. Raises ``OSError``."""
        if self.auto:
            os.makedirs(self.base, mode=0o755, exist_ok=True)
        elif not os.path.isdir(self.base):
            raise OSError(2, f"BasePath {self.base} does not exist (AutoBasePath=false)")
        top = self.job_dir(job_id)
        try:
            os.mkdir(top, 0o700)
        except FileExistsError:
            pass
        binds = self.binds(job_id)
        for source, _target in binds:
            try:
                os.mkdir(source)
            except FileExistsError:
                continue
            os.chmod(source, 0o1777)
        return binds

    def remove(self, job_id: int) -> None:
        """The job's directories and all in them, gone (at the job's end on this node)."""
        shutil.rmtree(self.job_dir(job_id), ignore_errors=True)


def conf_path_beside(conf_path: str) -> str:
    """job_container.conf lives beside slurm.conf (as cgroup.conf does)."""
    return os.path.join(os.path.dirname(os.path.abspath(conf_path)), "job_container.conf")


def parse_conf(text: str, path: str, node: str) -> JobContainer:
    """``node``'s settings in job_container.conf; ``JobContainerError`` naming the line."""
    try:
        settings = node_settings(text, node)
    except NodeConfError as exc:
        raise JobContainerError(f"{path}:{exc.line}: {exc}") from None
    values: dict[str, str] = {}
    for key, (value, number) in settings.items():
        if key not in ("basepath", "autobasepath", "dirs", "shared"):
            raise JobContainerError(f"{path}:{number}: {key!r} is not supported (BasePath, AutoBasePath, Dirs)")
        values[key] = value
    base = values.get("basepath", "").replace("%n", node)
    if not base or not base.startswith("/"):
        raise JobContainerError(f"{path}: BasePath (an absolute path) is required for {TMPFS}")
    auto = values.get("autobasepath", "false").lower()
    if auto not in ("true", "false", "yes", "no"):
        raise JobContainerError(f"{path}: AutoBasePath={auto}: expected true or false")
    dirs = tuple(d.strip() for d in values.get("dirs", ",".join(DEFAULT_DIRS)).split(",") if d.strip())
    for d in dirs:
        if not d.startswith("/") or d == "/" or ".." in d.split("/"):
            raise JobContainerError(f"{path}: Dirs: {d!r} is not an absolute directory")
    return JobContainer(os.path.normpath(base), auto in ("true", "yes"), dirs)


def enter(binds: tuple[tuple[str, str], ...]) -> None:
    """In a forked child, as root: a mount namespace of its own where each target is the
    job's directory. Raises ``OSError``."""
    if _libc.unshare(_CLONE_NEWNS) != 0:
        raise _errno("unshare")
    # Our mounts must not propagate back to the machine's namespace.
    if _libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise _errno("making / private")
    # Every source is held open first: once /tmp is bound, a BasePath under /tmp no
    # longer resolves by its name (the binds go through /proc/self/fd instead).
    fds = [os.open(source, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for source, _target in binds]
    for fd, (source, target) in zip(fds, binds, strict=True):
        if _libc.mount(f"/proc/self/fd/{fd}".encode(), target.encode(), None, _MS_BIND, None) != 0:
            raise _errno(f"binding {source} over {target}")
    for fd in fds:
        os.close(fd)


def _errno(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")
