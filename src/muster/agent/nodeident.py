"""Emulated nodes that look like machines: each node's jobs see its own host name.

On a real cluster a node's processes see ``hostname`` = the node's name, and every node's
name resolves to its address. Tools rely on both: torchrun's c10d rendezvous
(``--rdzv_endpoint=$SLURM_JOB_NODELIST_HET_GROUP_0:29500``, as torchx writes it) hosts
its store on the process whose host name is the endpoint's, and the others connect to
that name; Gloo finds its interface by resolving its own host name. Emulated nodes on one
machine (``muster up``: ``node1`` at 127.0.0.2, ...) break both: every job sees the
machine's name and no node name resolves.

So, with ``NodeHostnames=auto`` (the default) and an agent running as root, a node whose
``NodeHostname`` is not the machine's and whose address is a loopback one (an emulated
node) starts its batch scripts and tasks in their own UTS and mount namespaces
(``enter``, in the forked child before it drops root): the host name is the node's, and
``/etc/hosts`` is the machine's plus one line per emulated node of the config (its
address and names), bind-mounted over it for those processes only; the machine's own file
is never written. Nothing else is isolated: the file system, the network and the
processes are the machine's. ``NodeHostnames=yes`` asks for it for any node (and makes the
agent refuse to start when the kernel will not allow it), ``no`` never.

``configure`` decides once per hosted node, at the agent's start, and checks in a forked
probe that the namespaces can be made (a container without CAP_SYS_ADMIN cannot: ``auto``
then logs why and leaves jobs with the machine's name).
"""

from __future__ import annotations

import ctypes
import ipaddress
import logging
import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from muster.core.conftypes import Config, NodeConf

__all__ = ["NodeIdentity", "SETTING", "configure", "enter", "for_node", "hosts_text", "is_emulated"]

log = logging.getLogger("musterd")

SETTING = "NodeHostnames"  # auto (default), yes, no

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUTS = 0x04000000
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_HOSTS = b"/etc/hosts"

# Loaded in the agent, never in a forked child (dlopen after a fork of a threaded process
# could wait forever on a lock another thread held).
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    """What a node's job processes see: ``hostname``, and ``hosts_file`` over /etc/hosts."""

    hostname: str
    hosts_file: str


_IDENTITIES: dict[str, NodeIdentity] = {}  # node name -> its identity (hosted nodes share the process)
_PROBED: tuple[str | None] | None = None  # what the probe said, once it ran


def for_node(node: str) -> NodeIdentity | None:
    """The identity ``configure`` gave ``node``'s jobs, or None (they see the machine)."""
    return _IDENTITIES.get(node)


def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return addr == "localhost"


def is_emulated(node: NodeConf, machine: str) -> bool:
    """A node that is not this machine: another host name, at a loopback address."""
    return node.hostname.split(".")[0] != machine.split(".")[0] and _is_loopback(node.addr)


def hosts_text(machine_hosts: str, cfg: Config) -> str:
    """The machine's hosts file plus a line for each emulated node of ``cfg``."""
    lines = [machine_hosts.rstrip("\n"), "# muster: the emulated nodes of this cluster"]
    for node in cfg.nodes:
        if _is_loopback(node.addr) and node.addr != "localhost":
            names = dict.fromkeys((node.hostname, node.name))
            lines.append(f"{node.addr}\t{' '.join(names)}")
    return "\n".join(lines) + "\n"


def enter(identity: NodeIdentity) -> None:
    """In a forked child, as root: new UTS and mount namespaces with the node's host name
    and hosts file. Raises OSError."""
    if _libc.unshare(_CLONE_NEWUTS | _CLONE_NEWNS) != 0:
        raise _errno("unshare")
    # Our mounts must not propagate back to the machine's namespace.
    if _libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise _errno("making / private")
    if _libc.mount(identity.hosts_file.encode(), _HOSTS, None, _MS_BIND, None) != 0:
        raise _errno(f"binding {identity.hosts_file} over /etc/hosts")
    socket.sethostname(identity.hostname)


def _errno(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def _probe(identity: NodeIdentity) -> str | None:
    """Whether ``enter`` works here, tried in a throw-away child: None, or why not."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(r)
            enter(identity)
            os._exit(0)
        except BaseException as exc:  # noqa: BLE001 - told to the parent
            os.write(w, str(exc).encode()[:500])
            os._exit(1)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        why = f.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    return None if os.waitstatus_to_exitcode(status) == 0 else (why or "the probe failed")


def configure(cfg: Config, node: NodeConf, state_root: str) -> NodeIdentity | None:
    """Decide whether ``node``'s jobs get their own host name (see the module docstring);
    write its hosts file under ``state_root``. Raises OSError when ``NodeHostnames=yes``
    cannot be honoured."""
    global _PROBED
    mode = (cfg.get(SETTING) or "auto").strip().lower()
    _IDENTITIES.pop(node.name, None)
    if mode not in ("auto", "yes", "no"):
        raise OSError(f"{SETTING}={mode}: expected auto, yes or no")
    if mode == "no":
        return None
    forced = mode == "yes"
    if not forced and (os.geteuid() != 0 or not is_emulated(node, socket.gethostname())):
        return None
    try:
        with open(_HOSTS, encoding="utf-8", errors="replace") as f:
            machine = f.read()
    except OSError:
        machine = "127.0.0.1\tlocalhost\n"
    path = os.path.join(state_root, "hosts")
    with open(path + ".new", "w") as f:
        f.write(hosts_text(machine, cfg))
    os.chmod(path + ".new", 0o644)
    os.replace(path + ".new", path)
    identity = NodeIdentity(hostname=node.hostname, hosts_file=path)
    if _PROBED is None or forced:  # once per process: the nodes it hosts share its kernel
        _PROBED = (_probe(identity),)
    why = _PROBED[0]
    if why is not None:
        if forced:
            raise OSError(f"{SETTING}=yes: cannot give the jobs of {node.name} their own host name: {why}")
        log.warning("jobs of %s keep this machine's host name: %s", node.name, why)
        return None
    _IDENTITIES[node.name] = identity
    return identity
