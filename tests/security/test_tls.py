"""Attacks on a cluster whose links are TLS (``TLSType=tls/muster``, ``muster up``'s default).

A network attacker here can connect to every port but holds no certificate from the
cluster CA (a rogue CA's, or none); a "stolen node" holds node2's certificate and the
cluster key. Every refusal must be one clear line in the refusing daemon's log.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from harness import Harness
from muster.cluster.certs import make_ca, make_cert
from muster.cluster.local import ClusterShape
from muster.core.tlsconf import TLSSettings
from muster.protocol.client import ConnectError, request
from muster.protocol.signing import load_key, sign_request
from muster.protocol.tls import client_context, server_context
from waiting import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tls_world() -> Iterator[Harness]:
    h = Harness(ClusterShape(nodes=2, gpus_per_node=1, cpus_per_node=2, mem_per_node=4000), tls=True)
    h.up()
    try:
        yield h
    finally:
        h.down()


@pytest.fixture(scope="module")
def rogue(tmp_path_factory: pytest.TempPathFactory) -> TLSSettings:
    """Another CA, and certificates from it that claim to be node1 and the controller."""
    tls = TLSSettings({}, str(tmp_path_factory.mktemp("rogue") / "muster.key"))
    make_ca(tls, "rogue")
    make_cert(tls, tls.node("node1"), ["127.0.0.1"])
    make_cert(tls, tls.ctld(), ["127.0.0.1"])
    return tls


# --- helpers -----------------------------------------------------------------------------------


def addr_of(world: Harness, name: str) -> tuple[str, int]:
    cfg = world.cluster.config()
    if name == "ctld":
        return cfg.ctld_addr, cfg.ctld_port
    node = next(n for n in cfg.nodes if n.name == name)
    return node.addr, node.port


def real_ca(world: Harness) -> str:
    return world.cluster.config().tls.ca_cert


def as_holder(world: Harness, name: str | None) -> ssl.SSLContext:
    """A client context that trusts the cluster CA and presents ``name``'s certificate."""
    tls = world.cluster.config().tls
    files = None if name is None else (tls.ctld() if name == "ctld" else tls.node(name))
    return client_context(tls.ca_cert, files)


def https(
    ctx: ssl.SSLContext,
    addr: tuple[str, int],
    server_name: str,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """One HTTP/1.1 request over TLS; (status, JSON body)."""
    with socket.create_connection(addr, timeout=10) as raw_sock:
        with ctx.wrap_socket(raw_sock, server_hostname=server_name) as s:
            head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {len(body)}\r\n"
            head += "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
            s.sendall(head.encode() + b"\r\n" + body)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    payload = rest.partition(b"\r\n\r\n")[2]
    return int(status_line.split()[1]), json.loads(payload) if payload else {}


def signed(world: Harness, method: str, path: str, body: bytes, sender: str, receiver: str) -> dict[str, str]:
    key = load_key(world.cluster.config().auth_key_file)
    headers = sign_request(key, method, path, body, time.time(), sender=sender, receiver=receiver)
    headers["Content-Type"] = "application/json"
    return headers


def log_of(world: Harness, name: str) -> str:
    daemon = "musterctld" if name == "ctld" else name
    with open(os.path.join(world.cluster.state_dir, "log", f"{daemon}.log")) as f:
        return f.read()


def wait_for_line(world: Harness, name: str, text: str, before: int) -> str:
    """The first new line of ``name``'s log that holds ``text`` (the log had ``before`` chars)."""

    def line() -> str | None:
        return next((one for one in log_of(world, name)[before:].splitlines() if text in one), None)

    try:
        return wait_for(line, 10, what=f"a line with {text!r} in {name}'s log")
    except AssertionError:
        raise AssertionError(f"no line with {text!r} in {name}'s log: {log_of(world, name)[before:][-2000:]}") from None


def heartbeat(node: str) -> bytes:
    return json.dumps({"node": node, "running": []}).encode()


# --- a network attacker ------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["ctld", "node1"])
def test_a_plain_http_request_to_a_tls_daemon_is_refused(tls_world: Harness, target: str) -> None:
    before = len(log_of(tls_world, target))
    with socket.create_connection(addr_of(tls_world, target), timeout=10) as s:
        s.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        try:
            answer = s.recv(65536)
        except ConnectionResetError:
            answer = b""
    assert not answer.startswith(b"HTTP/1.1 200")
    line = wait_for_line(tls_world, target, "refused a connection from 127.0.0.1", before)
    assert "plain HTTP sent to a TLS port" in line


@pytest.mark.parametrize("target", ["ctld", "node1"])
def test_a_certificate_from_another_ca_is_refused_at_the_handshake(
    tls_world: Harness, rogue: TLSSettings, target: str
) -> None:
    """The attacker trusts the cluster CA (it is public) but holds a rogue CA's certificate
    that names node1: the daemon ends the handshake and logs why."""
    ctx = client_context(real_ca(tls_world), rogue.node("node1"))
    before = len(log_of(tls_world, target))
    path = "/v1/agent/heartbeat" if target == "ctld" else "/v1/status"
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError, IndexError, ValueError)):
        https(ctx, addr_of(tls_world, target), target, "POST", path, heartbeat("node1"))
    line = wait_for_line(tls_world, target, "refused a connection from 127.0.0.1", before)
    assert "certificate not accepted" in line


def test_without_a_certificate_nothing_is_served(tls_world: Harness) -> None:
    """A TLS client with no certificate reaches only what a credential or signature opens."""
    anonymous = as_holder(tls_world, None)
    status, body = https(anonymous, addr_of(tls_world, "ctld"), "ctld", "GET", "/v1/jobs")
    assert status == 401 and body["code"] == "auth"
    status, body = https(anonymous, addr_of(tls_world, "node1"), "node1", "GET", "/v1/status")
    assert status == 401 and body["code"] == "auth"


def test_a_stolen_key_without_a_certificate_cannot_heartbeat(tls_world: Harness) -> None:
    """The cluster key alone (a message signed with it) is not enough any more."""
    before = len(log_of(tls_world, "ctld"))
    body = heartbeat("node1")
    headers = signed(tls_world, "POST", "/v1/agent/heartbeat", body, "node1", "ctld")
    status, answer = https(
        as_holder(tls_world, None), addr_of(tls_world, "ctld"), "ctld", "POST", "/v1/agent/heartbeat", body, headers
    )
    assert status == 401 and "client certificate is missing" in answer["error"]
    wait_for_line(tls_world, "ctld", "client certificate is missing", before)


@pytest.mark.parametrize("target", ["ctld", "node1"])
def test_the_commands_do_not_talk_to_an_impostor(tls_world: Harness, rogue: TLSSettings, target: str) -> None:
    """A man in the middle with a rogue CA's certificate for the controller or a node:
    the command's TLS check fails before a byte of the request (or its credential) leaves."""
    ctx = server_context(rogue.ctld() if target == "ctld" else rogue.node("node1"))
    listener = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            with ctx.wrap_socket(conn, server_side=True) as s:
                received.append(s.recv(65536))
        except (ssl.SSLError, OSError):
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with pytest.raises(ConnectError, match="TLS handshake with"):
            request(
                "GET",
                "/v1/jobs",
                address=listener.getsockname()[:2],
                headers={"X-Muster-Credential": "secret"},
                tls=(real_ca(tls_world), target),
                timeout=10,
            )
    finally:
        thread.join(10)
        listener.close()
    assert not received


# --- a stolen node ------------------------------------------------------------------------------


def test_a_certificate_for_node2_cannot_heartbeat_as_node1(tls_world: Harness) -> None:
    before = len(log_of(tls_world, "ctld"))
    body = heartbeat("node1")
    headers = signed(tls_world, "POST", "/v1/agent/heartbeat", body, "node1", "ctld")
    status, answer = https(
        as_holder(tls_world, "node2"), addr_of(tls_world, "ctld"), "ctld", "POST", "/v1/agent/heartbeat", body, headers
    )
    assert status == 401 and "certificate names node2" in answer["error"]
    line = wait_for_line(tls_world, "ctld", "client certificate names node2", before)
    assert "sender node1" in line
    # node1's own certificate carries the very same kind of message
    headers = signed(tls_world, "POST", "/v1/agent/heartbeat", body, "node1", "ctld")
    status, _ = https(
        as_holder(tls_world, "node1"), addr_of(tls_world, "ctld"), "ctld", "POST", "/v1/agent/heartbeat", body, headers
    )
    assert status == 200


def test_a_certificate_for_node2_gives_no_orders_to_node1(tls_world: Harness) -> None:
    """A message signed as the controller, sent with node2's certificate, is refused."""
    before = len(log_of(tls_world, "node1"))
    headers = signed(tls_world, "GET", "/v1/status", b"", "ctld", "node1")
    status, answer = https(
        as_holder(tls_world, "node2"), addr_of(tls_world, "node1"), "node1", "GET", "/v1/status", b"", headers
    )
    assert status == 401 and "certificate names node2" in answer["error"]
    wait_for_line(tls_world, "node1", "client certificate names node2", before)


def test_a_captured_message_is_still_refused_with_tls_on(tls_world: Harness) -> None:
    body = heartbeat("node2")
    headers = signed(tls_world, "POST", "/v1/agent/heartbeat", body, "node2", "ctld")
    node2 = as_holder(tls_world, "node2")
    assert https(node2, addr_of(tls_world, "ctld"), "ctld", "POST", "/v1/agent/heartbeat", body, headers)[0] == 200
    before = len(log_of(tls_world, "ctld"))
    status, answer = https(node2, addr_of(tls_world, "ctld"), "ctld", "POST", "/v1/agent/heartbeat", body, headers)
    assert status == 401 and "replayed" in answer["error"]
    wait_for_line(tls_world, "ctld", "replayed", before)


# --- the cluster works over TLS -----------------------------------------------------------------


def test_a_tls_cluster_runs_a_batch_job_and_srun_end_to_end(tls_world: Harness) -> None:
    """The cluster `muster up` makes by default (no TLS setting given) runs jobs over TLS."""
    assert tls_world.settings is None and "TLSType=tls/muster" in open(tls_world.cluster.conf_path).read()
    job_id = tls_world.sbatch("-N2", "-o", "tls-%j.out", "--wrap", "srun hostname; echo done")
    job = tls_world.wait_job(job_id)
    assert job["state"] == "COMPLETED", job
    out = tls_world.read(f"tls-{job_id}.out")
    assert out.count("\n") == 3 and out.endswith("done\n")
    srun = tls_world.run(["srun", "-N2", "-l", "echo", "over-tls"], timeout=60)
    assert srun.returncode == 0, srun.stderr
    assert sorted(srun.stdout.split("\n")[:2]) == ["0: over-tls", "1: over-tls"]


def test_commands_reach_the_controller_over_tcp_with_tls(tls_world: Harness) -> None:
    """Off the controller's host (no Unix socket), squeue speaks TLS to its TCP port."""
    conf = os.path.join(tls_world.root, "tcp.conf")
    with open(tls_world.cluster.conf_path) as f:
        text = f.read()
    with open(conf, "w") as f:
        f.write(text.replace("CtldSocket=", "CtldSocket=/nonexistent/"))
    out = tls_world.run(["squeue", "-h", "-o", "%i"], env={"MUSTER_CONF": conf})
    assert out.returncode == 0, out.stderr


def test_an_unprivileged_user_runs_srun_over_tls(tls_world: Harness, users: Any) -> None:
    """The CA certificate is readable by everyone; the keys are not."""
    tls = tls_world.cluster.config().tls
    out = tls_world.run(["srun", "-N2", "-l", "id", "-un"], uid=users.alice, timeout=60)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split("\n")[:2]) == ["0: mustersec-alice", "1: mustersec-alice"]
    peek = tls_world.run(["cat", tls.node("node1").key], uid=users.alice)
    assert peek.returncode != 0 and "PRIVATE KEY" not in peek.stdout


def test_a_flood_of_failed_handshakes_is_cut_short(tls_world: Harness) -> None:
    """Failed handshakes spend the address's budget of failed authentications; beyond it
    a connection is dropped before any handshake work, and the daemon says so."""
    before = len(log_of(tls_world, "node2"))
    for _ in range(40):
        with socket.create_connection(addr_of(tls_world, "node2"), timeout=10) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            try:
                s.recv(100)
            except ConnectionResetError:
                pass
    wait_for_line(tls_world, "node2", "refused a connection from 127.0.0.1: too many failed authentications", before)
    time.sleep(8)  # sleep: the budget refills (5 per second) before the next test talks to node2
