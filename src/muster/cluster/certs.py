"""The cluster CA and per-host certificates for ``TLSType=tls/muster``, made with ``openssl``.

``issue_all(config)`` creates whatever is missing: the CA (an EC P-256 key and a
self-signed certificate valid ten years), then one certificate per holder, signed by the
CA, valid 825 days: the controller's (common name ``ctld``) and each configured node's
(common name = its ``NodeName``). A holder's certificate also lists, as subject alternative
names, its muster name, its host name and its address, so that other TLS tools can check
it too; muster's own peers check the muster name. A certificate is replaced only when the
configuration names its holder somewhere it does not list (the controller's names every
``SlurmctldHost``: a head node added to the file gets a certificate that names it); the old
pair is kept as ``*.old``. The CA is never replaced.

``issue_all(config, hosts=[...])`` also issues a *host certificate* for each hostlist given
(one per agent process hosting those nodes; ``muster up --nodes-per-agent`` passes its
agents, ``muster keygen --host-cert HOSTLIST`` any): common name ``host <host name>``, a
``URI:muster:nodes:HOSTLIST`` alternative name listing the nodes it may speak for, the
host's name and address, and client use only (``core.tlsconf`` says why).

Private keys are written with mode 0600 (the process's umask is 077 while ``openssl``
runs). The CA key is needed only here, to issue certificates for new nodes: a site may
move it offline once every node has its certificate.

The ``openssl`` command line (OpenSSL 3) is used rather than a Python package: it is on
every Linux host that has Python's ``ssl``, and these files are made once per cluster.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import tempfile

from muster.core.config import Config
from muster.core.hostlist import expand
from muster.core.tlsconf import CTLD_NAME, NODES_URI, TLSFiles, TLSSettings

__all__ = ["CertError", "issue_all"]

CA_DAYS = 3650
CERT_DAYS = 825

_OPENSSL_CONF = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca_ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[leaf_ext]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth,clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = @alt
[host_ext]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = @alt
[alt]
{sans}
"""


class CertError(OSError):
    """A certificate could not be made; the message says which and why."""


def _san(names: list[str], uris: tuple[str, ...] = ()) -> str:
    """The ``[alt]`` section: one ``KIND.N = value`` line each (a section, not a
    comma-separated list, since a hostlist has commas)."""
    out: list[str] = []
    for name in names:
        if not name:
            continue
        item = _san_item(name)
        if item not in out:
            out.append(item)
    out += [f"URI:{uri}" for uri in uris]
    return "\n".join(f"{kind}.{i} = {value}" for i, (kind, _, value) in enumerate(x.partition(":") for x in out))


def missing_names(cert: str, names: list[str]) -> list[str]:
    """Those of ``names`` (host names, addresses) that the certificate ``cert`` does not list
    among its subject alternative names; all of them when it cannot be read."""
    exe = shutil.which("openssl")
    if exe is None:
        raise CertError("the openssl command is needed to read TLS certificates (install OpenSSL 3)")
    done = subprocess.run(
        [exe, "x509", "-in", cert, "-noout", "-ext", "subjectAltName"], capture_output=True, text=True
    )
    listed: set[str] = set()
    for item in done.stdout.replace("\n", ",").split(","):
        kind, _, value = item.strip().partition(":")
        if kind == "DNS":
            listed.add(f"DNS:{value}")
        elif kind == "IP Address":
            try:
                listed.add(f"IP:{ipaddress.ip_address(value)}")
            except ValueError:
                continue
    return [name for name in names if name and _san_item(name) not in listed]


def _san_item(name: str) -> str:
    try:
        return f"IP:{ipaddress.ip_address(name)}"
    except ValueError:
        return f"DNS:{name}"


def _openssl(args: list[str], sans: str, what: str) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise CertError("the openssl command is needed to create TLS certificates (install OpenSSL 3)")
    with tempfile.TemporaryDirectory(prefix="muster-ca-") as tmp:
        conf = os.path.join(tmp, "openssl.cnf")
        with open(conf, "w") as f:
            f.write(_OPENSSL_CONF.format(sans=sans or "DNS.0 = localhost"))
        argv = [exe, "req", "-x509", "-config", conf, "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
        argv += ["-nodes", *args]
        done = subprocess.run(
            argv, capture_output=True, text=True, umask=0o077, env={**os.environ, "OPENSSL_CONF": conf}
        )
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise CertError(f"openssl could not create {what}: {detail}")


def _directory(path: str) -> None:
    """Create ``path``'s directory, readable by all (every user's srun reads the CA
    certificate; the keys in it are 0600 themselves), whatever the umask."""
    where = os.path.dirname(path) or "."
    if not os.path.isdir(where):
        os.makedirs(where)
        os.chmod(where, 0o755)


def _subject(cn: str) -> str:
    return "/O=muster/CN=" + cn.replace("\\", "\\\\").replace("/", "\\/").replace("=", "\\=")


def make_ca(tls: TLSSettings, cluster: str) -> None:
    for path in (tls.ca_cert, tls.ca_key):
        _directory(path)
    args = ["-extensions", "ca_ext", "-keyout", tls.ca_key, "-out", tls.ca_cert]
    args += ["-days", str(CA_DAYS), "-subj", _subject(f"muster cluster CA {cluster}")]
    _openssl(args, "", f"the cluster CA {tls.ca_cert}")
    os.chmod(tls.ca_cert, 0o644)  # every command checks the controller against it


def make_cert(tls: TLSSettings, files: TLSFiles, names: list[str], host: str | None = None) -> None:
    """Issue ``files.cert``/``files.key`` for holder ``files.name``, signed by the CA; with
    ``host``, a host certificate for the hostlist ``files.name`` on host ``host``."""
    if not (os.path.exists(tls.ca_key) and os.path.exists(tls.ca_cert)):
        raise CertError(f"cannot issue a certificate for {files.name}: the CA key {tls.ca_key} is not here")
    for path in (files.cert, files.key):
        _directory(path)
    ext, subject = ("leaf_ext", files.name) if host is None else ("host_ext", f"host {host}"[:64])
    args = ["-extensions", ext, "-CA", tls.ca_cert, "-CAkey", tls.ca_key]
    args += ["-keyout", files.key, "-out", files.cert, "-days", str(CERT_DAYS), "-subj", _subject(subject)]
    sans = _san(names, (NODES_URI + files.name,)) if host is not None else _san([files.name, *names])
    _openssl(args, sans, f"the certificate of {files.name} ({files.cert})")
    os.chmod(files.cert, 0o644)  # public; the key stays 0600


def issue_all(config: Config, hosts: list[str] | None = None) -> list[str]:
    """Create the CA and every holder's certificate that is missing, and a host certificate
    for each hostlist of ``hosts`` (every node in it configured); the files created."""
    tls = config.tls
    made: list[str] = []
    if not os.path.exists(tls.ca_cert):
        if os.path.exists(tls.ca_key):
            raise CertError(f"{tls.ca_key} exists without its certificate {tls.ca_cert}: restore it or remove both")
        make_ca(tls, config.cluster_name)
        made.append(tls.ca_cert)
    # one certificate for the controller role, naming every SlurmctldHost (backups too)
    holders = [(tls.ctld(), list(dict.fromkeys(v for pair in config.ctld_addrs for v in pair)))]
    holders += [(tls.node(n.name), [n.hostname, n.addr]) for n in config.nodes if n.name != CTLD_NAME]
    for files, names in holders:
        if os.path.exists(files.cert) and os.path.exists(files.key):
            missing = missing_names(files.cert, [files.name, *names])
            if not missing:
                continue
            # The configuration names it somewhere the certificate does not (a head node
            # added, an address changed): issued again, the old pair kept beside it.
            if not os.path.exists(tls.ca_key):
                raise CertError(
                    f"{files.cert} does not name {', '.join(missing)}: the CA key {tls.ca_key} is needed "
                    "to issue it again (run muster keygen where the CA key is)"
                )
            for path in (files.cert, files.key):
                os.replace(path, path + ".old")
        make_cert(tls, files, names)
        made.append(files.cert)
    for hostlist in hosts or []:
        nodes = [config.node(name) for name in expand(hostlist)]
        missing = [name for name, node in zip(expand(hostlist), nodes, strict=True) if node is None]
        if missing or not nodes:
            raise CertError(f"cannot issue a host certificate for {hostlist}: not configured: {','.join(missing)}")
        files = tls.host(hostlist)
        if os.path.exists(files.cert) and os.path.exists(files.key):
            continue
        first = nodes[0]
        assert first is not None
        addrs = sorted({n.addr for n in nodes if n is not None})
        make_cert(tls, files, [first.hostname, *addrs], host=first.hostname)
        made.append(files.cert)
    return made
