"""One controller per state directory: an exclusive lock, not a pid file.

``hold(state_dir, index, who)`` takes ``flock(LOCK_EX)`` on ``<state_dir>/musterctld.lock``
(``.N`` for controller N of several) and keeps it for the life of the process: the kernel
drops it when the process ends, however it ends, so a crashed controller never blocks the
next one, and a stopping one keeps it until its store is closed (its listeners close first:
a second controller started meanwhile waits for nothing and is refused). The file holds the
holder's pid and name, for the message the next one prints; its presence means nothing.

``muster restore`` takes the same lock (``held``) for the time it writes the store: it is
refused while a controller runs, and a controller started during a restore is refused
until it is done.

The state directory and the files in it are private (``private_dir``): 0700, or 0711 when
the controller's Unix socket, or an agent's spool or socket directory, is inside it (other
users must reach those by name; they still cannot list the directory, and every file of
the controller's in it is 0600).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

from muster.core.conftypes import instance_path

__all__ = ["LOCK_NAME", "StateLocked", "held", "hold", "lock_path", "private_dir"]

LOCK_NAME = "musterctld.lock"


class StateLocked(Exception):
    """Another process holds the state directory's lock; ``str()`` says which."""

    def __init__(self, path: str, holder: str) -> None:
        self.path = path
        self.holder = holder  # "musterctld (pid 123)", or "another process"
        super().__init__(f"{holder} holds {path}: the state directory {os.path.dirname(path)} is in use")


def lock_path(state_dir: str, index: int = 0) -> str:
    return instance_path(os.path.join(state_dir, LOCK_NAME), index)


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0).decode(errors="replace").split()
    except OSError:
        text = []
    if len(text) >= 2 and text[0].isdigit():
        return f"{text[1]} (pid {text[0]})"
    return "another process"


def hold(state_dir: str, index: int = 0, who: str = "musterctld") -> int:
    """Take the lock for the rest of this process's life; its file descriptor (close it
    to let go). ``StateLocked`` when another process has it; ``OSError`` when the file
    cannot be created."""
    path = lock_path(state_dir, index)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise StateLocked(path, holder) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {who}\n".encode(), 0)
    return fd


@contextlib.contextmanager
def held(state_dir: str, who: str) -> Iterator[None]:
    """The lock for the time of a ``with`` block (``muster restore``)."""
    fd = hold(state_dir, 0, who)
    try:
        yield
    finally:
        os.close(fd)


def private_dir(path: str, reached: list[str] | tuple[str, ...] = ()) -> int:
    """Create ``path`` (and its parents, as the umask says) if missing and make it 0700,
    or 0711 when one of ``reached`` (what other users must reach by name: the controller's
    socket, an agent's spool on the same host) lies in it; the mode set."""
    os.makedirs(path, exist_ok=True)
    root = os.path.abspath(path)
    inside = any(os.path.commonpath([root, os.path.abspath(p)]) == root for p in reached if p)
    mode = 0o711 if inside else 0o700
    os.chmod(path, mode)
    return mode
