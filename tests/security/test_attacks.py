"""Attacks on a running cluster, as a hostile user or a network attacker would try them.

The cluster runs with ``PrivateData=jobs,usage,accounts,users`` and small caps (see
``conftest``). "Captured" messages are made the way the controller makes them (the test
runs as root and can read the key): a byte-for-byte copy of what a sniffer would see.
"""

from __future__ import annotations

import json
import os
import select
import socket
import stat
import time
from typing import Any

import pytest

from harness import Harness
from muster.protocol.signing import load_key, sign_request
from waiting import wait_for

pytestmark = pytest.mark.integration


# --- raw HTTP, as an attacker speaks it -----------------------------------------------------------


def raw(
    addr: tuple[str, int],
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    source: str | None = None,
) -> tuple[int, dict[str, Any]]:
    """One HTTP/1.1 request; (status, JSON body)."""
    with socket.create_connection(addr, timeout=10, source_address=(source, 0) if source else None) as s:
        head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {len(body)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        s.sendall(head.encode() + b"\r\n" + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    payload = rest.partition(b"\r\n\r\n")[2]
    try:
        decoded = json.loads(payload) if payload else {}
    except ValueError:
        decoded = {"raw": payload.decode(errors="replace")}
    return int(status_line.split()[1]), decoded


RESET = -1  # the daemon answered and closed while the body was still coming: its answer was lost


def stream(addr: tuple[str, int], path: str, total: int, declare: bool) -> int:
    """POST ``total`` bytes (declared, or chunked and undeclared), reading the answer as
    soon as there is one; the status answered (0: none; ``RESET``: the daemon cut the
    connection before the body was all sent, which discards its answer in flight)."""
    block = b"x" * (1 << 20)
    with socket.create_connection(addr, timeout=20) as s:
        length = f"Content-Length: {total}\r\n" if declare else "Transfer-Encoding: chunked\r\n"
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{length}\r\n".encode())
        sent = 0
        try:
            while sent < total:
                if select.select([s], [], [], 0.01)[0]:
                    break  # the daemon has answered: it stopped reading, as it should
                s.sendall(block if declare else b"%x\r\n%s\r\n" % (len(block), block))
                sent += len(block)
            data = s.recv(65536)
        except OSError:
            # A reset while sending: the daemon closed on an unread body (the kernel then
            # drops what it had answered). Its answer may still be readable.
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if not data:
                assert sent < total, "the daemon read the whole body"
                return RESET
    assert sent < total, "the daemon read the whole body"
    return int(data.split(b"\r\n", 1)[0].split()[1]) if data else 0


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def ctld_addr(world: Harness) -> tuple[str, int]:
    cfg = world.cluster.config()
    return cfg.ctld_addr, cfg.ctld_port


def node_addr(world: Harness, name: str) -> tuple[str, int]:
    node = next(n for n in world.cluster.config().nodes if n.name == name)
    return node.addr, node.port


def key(world: Harness) -> bytes:
    return load_key(world.cluster.config().auth_key_file)


def captured(world: Harness, method: str, path: str, body: bytes, sender: str, receiver: str) -> dict[str, str]:
    headers = sign_request(key(world), method, path, body, time.time(), sender=sender, receiver=receiver)
    headers["Content-Type"] = "application/json"
    return headers


def restart(world: Harness, name: str) -> None:
    pid = world.cluster._alive(name)
    assert pid is not None
    os.kill(pid, 15)
    wait_for(lambda: world.cluster._alive(name) is None, 15, what=f"{name} to stop")
    world.cluster.start()
    world.cluster.wait_ready(30)
    if name != "musterctld":  # the controller may still list the node: wait for its port

        def listening() -> bool:
            try:
                socket.create_connection(node_addr(world, name), timeout=1).close()
                return True
            except OSError:
                return False

        wait_for(listening, 30, what=f"{name} to come back")


def log_of(world: Harness, name: str) -> str:
    with open(os.path.join(world.cluster.state_dir, "log", f"{name}.log")) as f:
        return f.read()


def held_job(world: Harness, uid: int) -> int:
    return world.sbatch("--hold", "-o", "/dev/null", "--wrap", "true", uid=uid)


# --- who may act on what -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "scancel {id}",
        "scancel --signal=USR1 {id}",
        "scontrol hold {id}",
        "scontrol release {id}",
        "scontrol requeue {id}",
        "scontrol update JobId={id} TimeLimit=5",
        "scontrol update JobId={id} Name=pwned",
        "scontrol update NodeName=node1 State=DRAIN Reason=x",
    ],
)
def test_every_cross_user_command_is_refused(world: Harness, users: Any, command: str) -> None:
    job_id = held_job(world, users.bob)
    try:
        before = world.job(job_id)
        out = world.run(command.format(id=job_id).split(), uid=users.alice)
        assert out.returncode != 0, out.stdout
        assert out.stderr.strip() and "Traceback" not in out.stderr
        assert world.job(job_id) == before
        assert all("DRAIN" not in n["state"] for n in world.cluster.api("GET", "/v1/nodes")["nodes"])
    finally:
        world.run(["scancel", str(job_id)])


def test_private_data_hides_other_users_jobs_but_not_from_root(world: Harness, users: Any) -> None:
    bobs = held_job(world, users.bob)
    alices = held_job(world, users.alice)
    seen = world.run(["squeue", "-h", "-o", "%i"], uid=users.alice).stdout.split()
    assert str(alices) in seen and str(bobs) not in seen
    out = world.run(["scontrol", "show", "job", str(bobs)], uid=users.alice)
    assert out.returncode != 0 and "Invalid job id specified" in out.stderr
    assert str(bobs) in world.run(["squeue", "-h", "-o", "%i"]).stdout.split()
    assert world.run(["scontrol", "show", "job", str(bobs)]).returncode == 0
    world.run(["scancel", str(bobs), str(alices)])


def test_the_submitters_umask_applies_to_the_jobs_output(world: Harness, users: Any) -> None:
    old = os.umask(0o077)  # bob's shell: sbatch inherits it (through setpriv)
    try:
        out = world.run(["sbatch", "--parsable", "-o", "bob-%j.out", "--wrap", "echo secret"], uid=users.bob)
    finally:
        os.umask(old)
    assert out.returncode == 0, out.stderr
    job_id = int(out.stdout.strip())
    assert world.wait_job(job_id)["state"] == "COMPLETED"
    path = os.path.join(world.workdir, f"bob-{job_id}.out")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    peek = world.run(["cat", path], uid=users.alice)
    assert peek.returncode != 0 and "secret" not in peek.stdout


# --- nothing over TCP without proof --------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/nodes", "/v1/partitions", "/v1/config", "/v1/steps", "/v1/ping"])
def test_the_controller_serves_nothing_over_tcp_without_a_credential(world: Harness, path: str) -> None:
    status, body = raw(ctld_addr(world), "GET", path)
    assert status == 401 and body["code"] == "auth"
    forged = {"X-Muster-Credential": f"0:0:{time.time():.3f}:{'ab' * 16}:node1:{'cd' * 32}"}
    status, _ = raw(ctld_addr(world), "GET", path, headers=forged)
    assert status == 401


def test_an_agent_serves_nothing_unsigned(world: Harness) -> None:
    for method, path in [("GET", "/v1/status"), ("POST", "/v1/signal"), ("POST", "/v1/launch")]:
        status, body = raw(node_addr(world, "node1"), method, path, b"{}")
        assert status == 401 and body["code"] == "auth"


# --- captured messages: elsewhere, again, after restarts ----------------------------------------


def test_a_message_for_node1_is_refused_by_node2(world: Harness) -> None:
    headers = captured(world, "GET", "/v1/status", b"", "ctld", "node1")
    status, body = raw(node_addr(world, "node2"), "GET", "/v1/status", headers=headers)
    assert status == 401 and "addressed to node1, not to node2" in body["error"]
    assert "sender ctld, receiver node1" in log_of(world, "node2")
    assert raw(node_addr(world, "node1"), "GET", "/v1/status", headers=headers)[0] == 200


def test_a_message_signed_by_a_node_is_no_order_for_another_node(world: Harness) -> None:
    headers = captured(world, "GET", "/v1/status", b"", "node1", "node2")
    status, body = raw(node_addr(world, "node2"), "GET", "/v1/status", headers=headers)
    assert status == 401 and "from ctld only" in body["error"]


def test_a_captured_order_is_refused_again_and_after_the_agent_restarts(world: Harness) -> None:
    headers = captured(world, "GET", "/v1/status", b"", "ctld", "node1")
    assert raw(node_addr(world, "node1"), "GET", "/v1/status", headers=headers)[0] == 200
    status, body = raw(node_addr(world, "node1"), "GET", "/v1/status", headers=headers)
    assert status == 401 and "replayed" in body["error"]
    restart(world, "node1")
    status, body = raw(node_addr(world, "node1"), "GET", "/v1/status", headers=headers)
    assert status == 401 and body["code"] == "stale"
    # and the controller still commands the restarted agent
    job_id = world.sbatch("-w", "node1", "-o", "/dev/null", "--wrap", "true")
    assert world.wait_job(job_id)["state"] == "COMPLETED"


def test_a_captured_report_is_refused_again_and_after_the_controller_restarts(world: Harness) -> None:
    body = json.dumps({"node": "node2", "running": []}).encode()
    headers = captured(world, "POST", "/v1/agent/heartbeat", body, "node2", "ctld")
    assert raw(ctld_addr(world), "POST", "/v1/agent/heartbeat", body, headers)[0] == 200
    status, answer = raw(ctld_addr(world), "POST", "/v1/agent/heartbeat", body, headers)
    assert status == 401 and "replayed" in answer["error"]
    restart(world, "musterctld")
    status, answer = raw(ctld_addr(world), "POST", "/v1/agent/heartbeat", body, headers)
    assert status == 401 and answer["code"] == "stale"
    assert "replay floor" in log_of(world, "musterctld")


def test_a_node_cannot_speak_for_another_node(world: Harness) -> None:
    body = json.dumps({"node": "node2", "running": []}).encode()
    headers = captured(world, "POST", "/v1/agent/heartbeat", body, "node1", "ctld")
    status, answer = raw(ctld_addr(world), "POST", "/v1/agent/heartbeat", body, headers)
    assert status == 401 and "speaks for node node2" in answer["error"]


def test_a_batch_of_heartbeats_speaks_only_for_the_nodes_its_sender_names(world: Harness) -> None:
    """The route co-hosted nodes share (``agent.host``): its sender is their hostlist."""
    body = json.dumps({"heartbeats": [{"node": "node1", "running": []}, {"node": "node2", "running": []}]}).encode()
    headers = captured(world, "POST", "/v1/agent/heartbeats", body, "node1", "ctld")
    status, answer = raw(ctld_addr(world), "POST", "/v1/agent/heartbeats", body, headers)
    assert status == 401 and "speaks for node node2" in answer["error"]
    headers = captured(world, "POST", "/v1/agent/heartbeats", body, "node[1-2]", "ctld")
    status, answer = raw(ctld_addr(world), "POST", "/v1/agent/heartbeats", body, headers)
    assert status == 200 and [a["ok"] for a in answer["answers"]] == [True, True]


# --- bounded requests ----------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["musterctld", "node1"])
def test_a_64_mb_body_gets_413_and_memory_stays_bounded(world: Harness, target: str) -> None:
    addr = ctld_addr(world) if target == "musterctld" else node_addr(world, target)
    pid = world.cluster._alive(target)
    assert pid is not None
    before = rss_kib(pid)
    # 413, or a reset that cut the body short (and with it the 413 on its way): refused either way
    assert stream(addr, "/v1/jobs" if target == "musterctld" else "/v1/launch", 64 << 20, declare=True) in (413, RESET)
    assert stream(addr, "/v1/jobs" if target == "musterctld" else "/v1/launch", 64 << 20, declare=False) in (413, RESET)
    assert rss_kib(pid) - before < 48 * 1024  # the limit is 16 MB: never the 64 MB sent
    assert world.run(["squeue", "-h"]).returncode == 0  # and it still serves


@pytest.mark.parametrize(
    "body",
    [b"{not json", b"[" * 100_000 + b"]" * 100_000, b'"a string"', b"\xff\xfe\x00", b'{"spec": {"workdir": 7}}'],
)
def test_malformed_bodies_get_400(world: Harness, body: bytes) -> None:
    from muster.protocol import client

    with pytest.raises(client.ApiError) as err:
        _unix_post(world, "/v1/jobs", body)
    assert err.value.status == 400


def _unix_post(world: Harness, path: str, body: bytes) -> None:
    from muster.protocol import client

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(world.cluster.config().ctld_socket)
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    )
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    status, payload = client._parse_response(data)
    if status >= 400:
        decoded = json.loads(payload)
        raise client.ApiError(status, decoded.get("error"), decoded.get("code"))


def test_a_script_over_max_script_size_is_refused(world: Harness, users: Any) -> None:
    out = world.run(["sbatch", "--wrap", "echo " + "x" * 5000], uid=users.alice)
    assert out.returncode == 1
    assert "Batch job submission failed: Pathname of a file, directory or other parameter too long" in out.stderr


def test_an_array_over_max_array_size_is_refused(world: Harness, users: Any) -> None:
    out = world.run(["sbatch", "--array=0-40", "--wrap", "true"], uid=users.alice)
    assert out.returncode != 0 and "Invalid job array specification" in out.stderr


def test_one_user_cannot_fill_the_queue(world: Harness, users: Any) -> None:
    results = [world.run(["sbatch", "--hold", "-o", "/dev/null", "--wrap", "true"], uid=users.bob) for _ in range(7)]
    refused = [r for r in results if r.returncode != 0]
    assert refused, "the per-user cap let bob queue more than 5 jobs"
    assert "Resource temporarily unavailable" in refused[-1].stderr
    assert held_job(world, users.alice)  # another user is not slowed by bob
    world.run(["scancel", "-u", "mustersec-bob"])
    world.run(["scancel", "-u", "mustersec-alice"])


def test_max_job_count_caps_the_cluster(world: Harness) -> None:
    outs = []
    for _ in range(4):  # MaxJobCount=80: at most two arrays of 40 fit, fewer with earlier jobs
        outs.append(world.run(["sbatch", "--hold", "--array=0-39", "-o", "/dev/null", "--wrap", "true"]))
        if outs[-1].returncode:
            break
    assert outs[0].returncode == 0 and outs[-1].returncode == 1
    assert outs[-1].stderr == "sbatch: error: Batch job submission failed: Resource temporarily unavailable\n"
    assert world.run(["scancel", "-u", "root"]).returncode == 0


def test_a_flood_of_failed_authentications_is_throttled_and_others_are_served(world: Harness) -> None:
    addr = ctld_addr(world)
    statuses = [raw(addr, "GET", "/v1/jobs", source="127.0.0.9")[0]]
    while statuses[-1] != 429 and len(statuses) < 400:
        statuses.append(raw(addr, "GET", "/v1/jobs", source="127.0.0.9")[0])
    assert statuses[0] == 401 and statuses[-1] == 429
    assert "too many failed authentications" in log_of(world, "musterctld")
    # the flooder's address is throttled; the agents (other addresses) and the commands are not
    job_id = world.sbatch("-o", "/dev/null", "--wrap", "true")
    assert world.wait_job(job_id)["state"] == "COMPLETED"
