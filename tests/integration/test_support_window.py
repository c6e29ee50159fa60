"""The support window (docs/upgrade.md): this release's daemons and muster 0.2.0's (release
N-1, tag v0.2.0 on commit 22f68a7) in one cluster, either side first.

The old release is its wheel, built from git and installed into a temporary directory
(``oldrelease``); its daemons and commands run with this venv's Python and ``PYTHONPATH``
on that directory (its dependencies are the same). (a) today's controller with a 0.2.0 agent, (c) with 0.2.0's
sbatch, squeue and scancel: jobs run to COMPLETED, a running one is listed and cancelled;
(b) a 0.2.0 controller with today's agent (which registers again in protocol 2 when the
old controller refuses protocol 3's fields): a job runs to COMPLETED. A peer outside the
window (protocol 99, in a request signed with the cluster key) is refused with the line
that says so.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

import oldrelease
from harness import Harness
from muster.cluster.local import ClusterShape
from muster.protocol import versions
from muster.protocol.signing import CTLD, load_key, sign_request

pytestmark = pytest.mark.integration

SHAPE = ClusterShape(nodes=1, gpus_per_node=0, cpus_per_node=4, mem_per_node=4000)


@pytest.fixture(scope="module")
def old_src() -> Iterator[str]:
    """muster 0.2.0 as its wheel installs it, built from git for this module's tests."""
    yield from oldrelease.unpack_old_src()


def _start(h: Harness, ctld_from: str | None, agent_from: str | None) -> None:
    h.cluster.create(h.shape, h.settings)
    oldrelease.spawn_ctld(h, ctld_from)
    oldrelease.spawn_agent(h, "node1", agent_from)


_log = oldrelease.log
_wait = oldrelease.wait
_old_command = oldrelease.old_command


def _node(h: Harness) -> dict[str, Any]:
    nodes: list[dict[str, Any]] = h.cluster.api("GET", "/v1/nodes")["nodes"]
    return next(n for n in nodes if n["name"] == "node1")


def _idle(h: Harness) -> dict[str, Any]:
    return _wait(lambda: (n := _node(h))["state"] == "IDLE" and n, "node1 never became IDLE", h)


def _completed(h: Harness, job_id: int) -> dict[str, Any]:
    job = _wait(
        lambda: (j := h.job(job_id))["state"] not in ("PENDING", "RUNNING") and not j["completing"] and j,
        f"job {job_id} never ended",
        h,
    )
    assert job["state"] == "COMPLETED", job
    return job


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = Harness(SHAPE, tls=False)
    try:
        yield h
    finally:
        h.down()


def test_todays_controller_runs_a_v020_agent_and_v020_commands(harness: Harness, old_src: str) -> None:
    h = harness
    _start(h, ctld_from=None, agent_from=old_src)
    node = _idle(h)
    assert node["version"] == "0.1.0"  # what 0.2.0's agents say of themselves (its __init__)
    # (a) a job submitted with today's sbatch runs on the old agent
    job_id = h.sbatch("-o", "today-%j.out", "--wrap", "echo ran $SLURM_JOB_ID")
    _completed(h, job_id)
    assert h.read(f"today-{job_id}.out") == f"ran {job_id}\n"
    # (c) 0.2.0's sbatch, squeue and scancel against today's controller
    out = _old_command(h, old_src, "sbatch", "--parsable", "-o", "old-%j.out", "--wrap", "echo old $SLURM_JOB_ID")
    assert out.returncode == 0, out.stderr
    old_job = int(out.stdout.strip().split(";")[0])
    _completed(h, old_job)
    assert h.read(f"old-{old_job}.out") == f"old {old_job}\n"
    out = _old_command(h, old_src, "sbatch", "--parsable", "--wrap", "sleep 300")
    assert out.returncode == 0, out.stderr
    sleeper = int(out.stdout.strip().split(";")[0])
    _wait(lambda: h.job(sleeper)["state"] == "RUNNING", "the sleeper never ran", h)
    listed = _old_command(h, old_src, "squeue", "-h", "-o", "%i %T")
    assert listed.returncode == 0, listed.stderr
    assert f"{sleeper} RUNNING" in listed.stdout.splitlines()
    out = _old_command(h, old_src, "scancel", str(sleeper))
    assert out.returncode == 0, out.stderr
    _wait(lambda: h.job(sleeper)["state"] == "CANCELLED", "the sleeper was not cancelled", h)


def test_a_v020_controller_runs_todays_agent(harness: Harness, old_src: str) -> None:
    h = harness
    _start(h, ctld_from=old_src, agent_from=None)
    _idle(h)
    assert "registering in protocol 2" in _log(h, "node1")
    out = _old_command(h, old_src, "sbatch", "--parsable", "-o", "b-%j.out", "--wrap", "echo b $SLURM_JOB_ID")
    assert out.returncode == 0, out.stderr
    job_id = int(out.stdout.strip().split(";")[0])
    _completed(h, job_id)
    assert h.read(f"b-{job_id}.out") == f"b {job_id}\n"


def _refusal(url: str, path: str, sender: str, receiver: str, key: bytes) -> dict[str, Any]:
    """The answer to a request of protocol 99 (muster 9.0.0) signed with the cluster key."""
    body = json.dumps({"node": sender, "version": "9.0.0"}).encode()
    head = sign_request(key, "POST", path, body, time.time(), sender=sender, receiver=receiver)
    head[versions.PROTOCOL_HEADER], head[versions.VERSION_HEADER] = "99", "9.0.0"
    request = urllib.request.Request(url + path, body, {**head, "content-type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=10)  # noqa: S310 - loopback, http
    assert info.value.code == 426
    answer: dict[str, Any] = json.loads(info.value.read())
    return answer


def _command_refusal(socket_path: str) -> str:
    """What the controller answers a command of protocol 99 (a raw request on its socket)."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(socket_path)
        sock.sendall(b"GET /v1/jobs HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nX-Muster-Protocol: 99\r\n\r\n")
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode()


def test_a_peer_outside_the_window_is_refused_saying_so(harness: Harness) -> None:
    h = harness
    _start(h, ctld_from=None, agent_from=None)
    _idle(h)
    cfg = h.cluster.config()
    key = load_key(cfg.auth_key_file)
    # an agent of protocol 99, as today's controller sees it
    answer = _refusal(f"http://{cfg.ctld_addrs[0][1]}:{cfg.ctld_port}", "/v1/agent/register", "node1", CTLD, key)
    assert answer == {
        "code": "protocol",
        "error": f"agent node1 speaks protocol 99 (muster 9.0.0), this controller {versions.MIN_PROTOCOL}.."
        f"{versions.MAX_PROTOCOL} (muster {versions.build()}): upgrade this controller",
    }
    assert "speaks protocol 99" in _log(h, "musterctld")
    assert _node(h)["state"] == "IDLE"  # nothing changed for the node
    # a controller of protocol 99, as today's agent sees it
    node = cfg.node("node1")
    assert node is not None
    answer = _refusal(f"http://{node.addr}:{node.port}", "/v1/terminate", CTLD, "node1", key)
    assert answer["code"] == "protocol"
    assert answer["error"].startswith("controller speaks protocol 99 (muster 9.0.0), this agent ")
    assert answer["error"].endswith(": upgrade this agent")
    # a command of protocol 99
    reply = _command_refusal(cfg.ctld_socket)
    assert reply.startswith("HTTP/1.1 426"), reply
    assert "client speaks protocol 99 (muster unknown), this controller" in reply
