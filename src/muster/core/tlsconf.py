"""TLS settings: ``TLSType`` and ``TLSParameters``, read purely from a config's settings.

Slurm 25.05 switches TLS on with ``TLSType=tls/s2n`` and names its PEM files in
``TLSParameters`` (``ca_cert_file``, ``ctld_cert_file``, ``ctld_cert_key_file``,
``slurmd_cert_file``, ``slurmd_cert_key_file``). muster keeps those names, with its own
plugin name, since it speaks TLS through Python's ``ssl`` (OpenSSL), not s2n:

* ``TLSType=tls/none`` (the default): plain HTTP between the daemons and the commands.
* ``TLSType=tls/muster``: TLS on every TCP link; daemons authenticate each other with
  certificates signed by the cluster CA (mutual TLS), commands check the controller's.

File defaults sit in ``tls/`` beside the cluster key (``AuthKeyFile``): ``ca_cert.pem``,
``ctld_cert.pem``, ``ctld_cert_key.pem``, ``slurmd_%n_cert.pem`` and
``slurmd_%n_cert_key.pem``, where ``%n`` is the node's name (several emulated nodes can
share a host). ``ca_key_file`` (``ca_key.pem``) is muster's own: only ``muster keygen``
reads it, to issue certificates; no daemon needs it.

A *host certificate* (``slurmd_host_%n_cert.pem``, muster's own item, ``%n`` being the
hostlist of the nodes, e.g. ``node[1-64]``) lets one agent process that hosts several nodes
speak for all of them over one link (``agent.host``): its subject names the host, and a
``URI:muster:nodes:HOSTLIST`` alternative name lists the nodes it may speak for. It is a
client certificate only: it names no node as a DNS name, so it cannot pass for a node's
server.

A certificate names its holder in its subject's common name: ``ctld`` for the controller,
the ``NodeName`` for an agent. That name, not the address, is what peers check.
"""

from __future__ import annotations

import os

TLS_NONE = "tls/none"
TLS_MUSTER = "tls/muster"
TLS_TYPES = (TLS_NONE, TLS_MUSTER)
CTLD_NAME = "ctld"  # the controller's name in certificates (and in signed messages)
NODES_URI = "muster:nodes:"  # a host certificate's alternative name: this, then a hostlist

PARAMETERS = {
    "ca_cert_file": "ca_cert.pem",
    "ca_key_file": "ca_key.pem",
    "ctld_cert_file": "ctld_cert.pem",
    "ctld_cert_key_file": "ctld_cert_key.pem",
    "slurmd_cert_file": "slurmd_%n_cert.pem",
    "slurmd_cert_key_file": "slurmd_%n_cert_key.pem",
    "slurmd_host_cert_file": "slurmd_host_%n_cert.pem",
    "slurmd_host_cert_key_file": "slurmd_host_%n_cert_key.pem",
}


class TLSConfError(ValueError):
    """A TLS setting that cannot be used; the message says which and why."""


def check_type(value: str) -> str:
    kind = value.strip().lower()
    if kind not in TLS_TYPES:
        raise TLSConfError(f"TLSType={value!r} is not one of {', '.join(TLS_TYPES)}")
    return kind


def parse_parameters(value: str) -> dict[str, str]:
    """``TLSParameters``: comma-separated ``name=path`` items (names from ``PARAMETERS``)."""
    out: dict[str, str] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name, eq, path = item.partition("=")
        name = name.strip().lower()
        if not eq or not path.strip():
            raise TLSConfError(f"TLSParameters item {item!r} is not name=path")
        if name not in PARAMETERS:
            raise TLSConfError(f"TLSParameters names unknown item {name!r} (known: {', '.join(PARAMETERS)})")
        out[name] = path.strip()
    return out


class TLSFiles:
    """Where one holder's certificate and key are, and the CA they chain to."""

    __slots__ = ("ca_cert", "cert", "key", "name")

    def __init__(self, name: str, ca_cert: str, cert: str, key: str) -> None:
        self.name = name
        self.ca_cert = ca_cert
        self.cert = cert
        self.key = key


class TLSSettings:
    """The TLS view of a configuration (``Config.tls``)."""

    __slots__ = ("enabled", "paths")

    def __init__(self, settings: dict[str, str], key_file: str) -> None:
        self.enabled = check_type(settings.get("TLSType", TLS_NONE)) == TLS_MUSTER
        base = os.path.join(os.path.dirname(key_file), "tls")
        given = parse_parameters(settings.get("TLSParameters", ""))
        self.paths = {name: given.get(name) or os.path.join(base, default) for name, default in PARAMETERS.items()}

    @property
    def ca_cert(self) -> str:
        return self.paths["ca_cert_file"]

    @property
    def ca_key(self) -> str:
        return self.paths["ca_key_file"]

    def ctld(self) -> TLSFiles:
        return TLSFiles(CTLD_NAME, self.ca_cert, self.paths["ctld_cert_file"], self.paths["ctld_cert_key_file"])

    def node(self, name: str) -> TLSFiles:
        cert = self.paths["slurmd_cert_file"].replace("%n", name)
        key = self.paths["slurmd_cert_key_file"].replace("%n", name)
        return TLSFiles(name, self.ca_cert, cert, key)

    def host(self, nodes: str) -> TLSFiles:
        """The host certificate of the agent process hosting ``nodes`` (a hostlist)."""
        cert = self.paths["slurmd_host_cert_file"].replace("%n", nodes)
        key = self.paths["slurmd_host_cert_key_file"].replace("%n", nodes)
        return TLSFiles(nodes, self.ca_cert, cert, key)
