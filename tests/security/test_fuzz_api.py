"""Fuzzing the daemons' HTTP APIs from their own OpenAPI descriptions (schemathesis).

A live controller serves ``GET /openapi.json`` over TCP to a caller with a valid
credential; schemathesis generates requests for every operation it describes (valid
bodies and invalid ones), each sent with a fresh credential (a credential is good for one
request) over TCP, as a command on another host would send it. A 5xx answer or a daemon
that dies is a failure. The agent's description is fuzzed the same way with orders
signed as the controller signs them. ``max_examples`` stays small so that the suite runs in about a
minute; raise ``MUSTER_FUZZ_EXAMPLES`` for a longer hunt.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.core import NOT_SET
from schemathesis.generation.modes import GenerationMode

from harness import Harness
from muster.cluster.local import ClusterShape
from muster.protocol.client import request
from muster.protocol.signing import load_key, sign_request

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("MUSTER_FUZZ_EXAMPLES", "12"))


@pytest.fixture(scope="module")
def fuzz_world() -> Iterator[Harness]:
    h = Harness(ClusterShape(nodes=2, gpus_per_node=2, cpus_per_node=4, mem_per_node=8000))
    h.up()
    try:
        yield h
    finally:
        h.down()


def credential(world: Harness) -> str:
    """A one-use credential from node1's agent (root's: every admin route is reachable)."""
    sock = os.path.join(world.cluster.config().agent_socket_dir or "", "musterd-node1.sock")
    return str(request("POST", "/v1/credential", {}, unix_path=sock, timeout=10)["credential"])


def base_url(world: Harness) -> str:
    cfg = world.cluster.config()
    return f"http://{cfg.ctld_addr}:{cfg.ctld_port}"


@pytest.fixture(scope="module")
def api_schema(fuzz_world: Harness) -> Any:
    cfg = fuzz_world.cluster.config()
    doc = request(
        "GET",
        "/openapi.json",
        address=(cfg.ctld_addr, cfg.ctld_port),
        headers={"X-Muster-Credential": credential(fuzz_world)},
    )
    return schemathesis.openapi.from_dict(doc)


def test_the_description_needs_a_credential_over_tcp(fuzz_world: Harness) -> None:
    cfg = fuzz_world.cluster.config()
    with pytest.raises(Exception, match="no credential"):
        request("GET", "/openapi.json", address=(cfg.ctld_addr, cfg.ctld_port))


def test_the_description_covers_every_route(api_schema: Any, fuzz_world: Harness) -> None:
    paths = set(api_schema.raw_schema["paths"])
    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/agent/heartbeat", "/v1/accounting/jobs", "/openapi.json"} <= paths
    submit = api_schema.raw_schema["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]
    assert submit["schema"] == {"$ref": "#/components/schemas/SubmitBody"}


@pytest.mark.timeout(max(300, EXAMPLES * 20))
def test_no_request_crashes_the_controller(api_schema: Any, fuzz_world: Harness) -> None:
    """Every operation gets ``EXAMPLES`` requests that fit its description and as many that
    do not; operations on a job also get requests about a held and a running job. All the
    5xx answers are reported at once (schemathesis's pytest plugin is not used: it
    predates pytest 9). The agents' routes answer 401 to anything unsigned before reading
    it, so they are left out (their refusals are tests of their own)."""
    url = base_url(fuzz_world)
    held = fuzz_world.sbatch("--hold", "-o", "/dev/null", "--wrap", "true")
    running = fuzz_world.sbatch("-o", "/dev/null", "--wrap", "sleep 600")
    fuzz_world.wait_state(running, "RUNNING")
    failures: list[str] = []

    def send(case: Any) -> None:
        for name in list(case.headers or {}):  # a broken credential gets a 401 before anything is read
            if name.lower() == "x-muster-credential":
                del case.headers[name]
        response = case.call(base_url=url, headers={"X-Muster-Credential": credential(fuzz_world)}, timeout=30)
        assert response.status_code < 500, (
            f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}"
            f" (body {case.body!r}, query {case.query!r})"
        )

    for result in api_schema.get_all_operations():
        operation = result.ok()
        if operation.path.startswith("/v1/agent/"):
            continue
        strategies = [operation.as_strategy(), operation.as_strategy(GenerationMode.NEGATIVE)]
        if "{job_id}" in operation.path:
            strategies += [
                operation.as_strategy(path_parameters={"job_id": str(job), "step_id": "0"}) for job in (held, running)
            ]
        check = settings(
            max_examples=EXAMPLES,
            deadline=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )(given(st.one_of(strategies))(send))
        try:
            check()
        except AssertionError as e:
            failures.append(str(e).splitlines()[0])
        assert fuzz_world.cluster._alive("musterctld") is not None, f"the controller died on {operation.label}"
    assert not failures, "server errors:\n" + "\n".join(failures)


# --- the agent ---------------------------------------------------------------------------------


def signed_call(world: Harness, node: str, method: str, path: str, query: Any, body: Any) -> httpx.Response:
    """A request as the controller sends it: signed for ``node``, body as JSON bytes."""
    cfg = world.cluster.config()
    addr = next((n.addr, n.port) for n in cfg.nodes if n.name == node)
    url = httpx.URL(f"http://{addr[0]}:{addr[1]}{path}", params=query or None)
    if body is NOT_SET or method == "GET":
        payload = b""
    else:  # negative cases may be raw bytes, not JSON
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    target = url.raw_path.decode()
    headers = sign_request(
        load_key(cfg.auth_key_file), method, target, payload, time.time(), sender="ctld", receiver=node
    )
    headers["content-type"] = "application/json"
    with httpx.Client(timeout=30) as client:
        return client.request(method, url, content=payload or None, headers=headers)


def test_no_signed_order_crashes_an_agent(fuzz_world: Harness) -> None:
    """The agent's description, fuzzed with orders the controller signed (as a stolen
    controller key could send them). ``/v1/launch`` and ``/v1/launches`` are left out: they
    run the jobs they are given, and a generated job is a random program."""
    answer = signed_call(fuzz_world, "node1", "GET", "/openapi.json", None, NOT_SET)
    assert answer.status_code == 200, answer.text
    agent_schema = schemathesis.openapi.from_dict(answer.json())
    assert {"/v1/launch", "/v1/signal", "/v1/terminate", "/v1/status"} <= set(answer.json()["paths"])
    failures: list[str] = []

    def send(case: Any) -> None:
        response = signed_call(fuzz_world, "node1", case.method, case.formatted_path, case.query, case.body)
        assert response.status_code < 500, (
            f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]} (body {case.body!r})"
        )

    for result in agent_schema.get_all_operations():
        operation = result.ok()
        if operation.path in ("/v1/launch", "/v1/launches"):
            continue
        strategies = [operation.as_strategy(), operation.as_strategy(GenerationMode.NEGATIVE)]
        check = settings(
            max_examples=EXAMPLES,
            deadline=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )(given(st.one_of(strategies))(send))
        try:
            check()
        except AssertionError as e:
            failures.append(str(e).splitlines()[0])
        assert fuzz_world.cluster._alive("node1") is not None, f"node1's agent died on {operation.label}"
    assert not failures, "server errors:\n" + "\n".join(failures)
