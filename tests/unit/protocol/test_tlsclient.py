"""The commands' TLS client over ``_ssl`` checks what ``ssl``'s client context checks: a
certificate from the cluster CA that names the server meant; anything else ends the
handshake before a byte of the request is written."""

from __future__ import annotations

import pathlib
import shutil
import socket
import ssl
import threading
from collections.abc import Iterator

import pytest

from muster.cluster.certs import make_ca, make_cert
from muster.core.tlsconf import TLSSettings
from muster.protocol import tlsclient
from muster.protocol.client import ConnectError, tls_wrap
from muster.protocol.tls import server_context

pytestmark = pytest.mark.skipif(
    shutil.which("openssl") is None,
    reason="the fixtures issue certificates as muster keygen does, with the openssl command, which this machine lacks",
)


def authority(root: pathlib.Path, name: str) -> TLSSettings:
    tls = TLSSettings({}, str(root / "muster.key"))
    make_ca(tls, name)
    make_cert(tls, tls.node("node1"), ["127.0.0.1"])
    return tls


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> TLSSettings:
    return authority(tmp_path_factory.mktemp("ca"), "t")


@pytest.fixture(scope="module")
def rogue(tmp_path_factory: pytest.TempPathFactory) -> TLSSettings:
    return authority(tmp_path_factory.mktemp("rogue"), "rogue")


class EchoServer:
    """One TLS connection served with ``ssl`` (the daemons' side): what it received is
    echoed back in capitals, then the connection is closed."""

    def __init__(self, tls: TLSSettings) -> None:
        self.ctx = server_context(tls.node("node1"))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()[:2]
        self.received: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        try:
            with self.ctx.wrap_socket(conn, server_side=True) as s:
                data = s.recv(65536)
                self.received.append(data)
                s.sendall(data.upper() * 3000)  # several TLS records
        except (ssl.SSLError, OSError):
            pass

    def connect(self) -> socket.socket:
        return socket.create_connection(self.address, timeout=10)

    def close(self) -> None:
        self.thread.join(10)
        self.listener.close()


@pytest.fixture
def server(cluster: TLSSettings) -> Iterator[EchoServer]:
    s = EchoServer(cluster)
    yield s
    s.close()


def test_a_server_with_the_clusters_certificate_for_the_name_is_talked_to(
    server: EchoServer, cluster: TLSSettings
) -> None:
    conn = tlsclient.wrap(server.connect(), cluster.ca_cert, "node1")
    conn.sendall(b"hello")
    got = b""
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            break
        got += chunk
    conn.close()
    assert got == b"HELLO" * 3000
    assert server.received == [b"hello"]


def test_a_certificate_for_another_name_is_refused(server: EchoServer, cluster: TLSSettings) -> None:
    with pytest.raises(tlsclient.CertificateError) as e:
        tlsclient.wrap(server.connect(), cluster.ca_cert, "node2")
    assert "node2" in e.value.verify_message or "mismatch" in e.value.verify_message
    server.close()
    assert server.received == []


def test_a_certificate_from_another_ca_is_refused(server: EchoServer, rogue: TLSSettings) -> None:
    with pytest.raises(ConnectError, match="TLS handshake with node1 at here failed: .*certificate"):
        tls_wrap(server.connect(), rogue.ca_cert, "node1", "here")
    server.close()
    assert server.received == []


def test_a_missing_ca_is_named(tmp_path: pathlib.Path) -> None:
    with pytest.raises(tlsclient.CAError, match="cluster CA certificate missing: .*nothere.pem"):
        tlsclient.context(str(tmp_path / "nothere.pem"))
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    with pytest.raises(tlsclient.CAError, match="cannot load the cluster CA certificate"):
        tlsclient.context(str(tmp_path / "junk.pem"))


def test_the_context_requires_a_verified_certificate_and_the_name(cluster: TLSSettings) -> None:
    ctx = tlsclient.context(cluster.ca_cert)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2


def test_a_name_that_is_not_ascii_goes_through_ssl(server: EchoServer, cluster: TLSSettings) -> None:
    a, b = socket.socketpair()
    with a, b, pytest.raises(ValueError):
        tlsclient.wrap(a, cluster.ca_cert, "nöde1")
    with pytest.raises(ConnectError, match="TLS handshake with nöde1 at here failed"):  # ssl refuses it too
        tls_wrap(server.connect(), cluster.ca_cert, "nöde1", "here")


def test_a_handshake_begun_is_checked_when_finished(server: EchoServer, cluster: TLSSettings) -> None:
    conn = tlsclient.begin(server.connect(), cluster.ca_cert, "node1")
    conn.finish()
    conn.sendall(b"x")
    assert conn.recv(1) == b"X"
    conn.close()


def test_a_begun_handshake_with_the_wrong_server_fails_at_finish(server: EchoServer, rogue: TLSSettings) -> None:
    # Only the client's hello goes out in begin, unless the server's answer is already back
    # (loopback is fast): the check then fails in begin itself. Either way nothing is sent.
    with pytest.raises(tlsclient.CertificateError):
        tlsclient.begin(server.connect(), rogue.ca_cert, "node1").finish()
    server.close()
    assert server.received == []
