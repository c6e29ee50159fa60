"""The routes that watch the controller, through the ASGI app (no socket): /metrics is off
unless MetricsType enables it, hides per-user families under PrivateData, and the probes
say why the controller is not ready or not healthy."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
from starlette.testclient import TestClient

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.ctld.app import CtldApp
from muster.protocol.httpd import PEER_KEY

NOBODY = 65534

CONF = """
ClusterName=t
StateSaveLocation={state}
NodeName=node[1-2] CPUs=4 RealMemory=1000
PartitionName=p Nodes=ALL Default=YES State=UP
"""


def app(tmp_path: pathlib.Path, extra: str = "") -> CtldApp:
    config = parse_config(CONF.format(state=tmp_path) + extra, str(tmp_path / "muster.conf"))
    return CtldApp(config, b"k" * 32, ManualClock(1000.0), str(tmp_path / "muster.db"))


def test_metrics_are_off_unless_metricstype_is_set(tmp_path: pathlib.Path) -> None:
    client = TestClient(app(tmp_path).asgi)
    answer = client.get("/metrics")
    assert answer.status_code == 404 and "MetricsType" in answer.text


def test_metrics_are_served_by_section(tmp_path: pathlib.Path) -> None:
    client = TestClient(app(tmp_path, "MetricsType=metrics/openmetrics\n").asgi)
    everything = client.get("/metrics")
    assert everything.status_code == 200 and everything.headers["content-type"].startswith("text/plain")
    assert "slurm_nodes_unknown 2.0" in everything.text and "slurm_user_jobs" in everything.text
    nodes = client.get("/metrics/nodes").text
    assert "slurm_nodes_unknown" in nodes and "slurm_jobs_pending" not in nodes
    assert client.get("/metrics/nosuch").status_code == 404


@pytest.mark.parametrize("hidden", ["jobs", "users", "accounts", "all"])
def test_private_data_hides_the_per_user_families(tmp_path: pathlib.Path, hidden: str) -> None:
    client = TestClient(app(tmp_path, f"MetricsType=metrics/openmetrics\nPrivateData={hidden}\n").asgi)
    assert "slurm_user_jobs" not in client.get("/metrics").text
    assert "slurm_account_jobs" not in client.get("/metrics").text
    assert client.get("/metrics/jobs-users-accts").status_code == 403


def test_probes_before_and_after_the_loops_start(tmp_path: pathlib.Path) -> None:
    ctld = app(tmp_path)
    client = TestClient(ctld.asgi)
    assert client.get("/livez").status_code == 200
    not_ready = client.get("/readyz")
    assert not_ready.status_code == 503 and "loops not running" in not_ready.text
    with TestClient(ctld.asgi) as running:  # the lifespan starts the loops
        assert running.get("/readyz").text == "ok\n"
        assert running.get("/healthz").text == "ok\n"
        ctld.clock.advance(5)  # type: ignore[attr-defined] - the loop has not run for 5 s
        stalled = running.get("/healthz")
        assert stalled.status_code == 503 and "stalled" in stalled.text
        assert running.get("/livez").status_code == 200
    after = client.get("/readyz")
    assert after.status_code == 503 and "store is not open" in after.text


def test_diag_over_tcp_wants_a_credential(tmp_path: pathlib.Path) -> None:
    client = TestClient(app(tmp_path).asgi)
    assert client.get("/v1/diag").status_code == 401
    assert client.post("/v1/diag/reset").status_code == 401


def as_user(asgi: Any, uid: int) -> Any:
    """The app as reached over the Unix socket by ``uid`` (SO_PEERCRED's answer)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope = {**scope, PEER_KEY: (1, uid, uid)}
        await asgi(scope, receive, send)

    return app


def test_sdiag_rows_by_user_follow_private_data_and_only_admins_reset(tmp_path: pathlib.Path) -> None:
    ctld = app(tmp_path, "PrivateData=users\n")
    root, nobody = TestClient(as_user(ctld.asgi, 0)), TestClient(as_user(ctld.asgi, NOBODY))
    assert root.get("/v1/partitions").status_code == 200
    assert nobody.get("/v1/partitions").status_code == 200
    mine = nobody.get("/v1/diag").json()
    assert [r[1] for r in mine["rpc_users"]] == [NOBODY]
    everyone = root.get("/v1/diag").json()
    assert sorted(r[1] for r in everyone["rpc_users"]) == [0, NOBODY]
    assert ["REQUEST_PARTITION_INFO", 2009, 2] == everyone["rpc_types"][0][:3]
    refused = nobody.post("/v1/diag/reset", json={})
    assert refused.status_code == 403 and refused.json()["error"] == "Access/permission denied"
    assert root.get("/v1/diag").json()["rpc_types"] != []  # nothing was reset
    assert root.post("/v1/diag/reset", json={}).status_code == 200
    after = root.get("/v1/diag").json()
    assert after["since"] == 1000.0 and [r[0] for r in after["rpc_types"]] == ["REQUEST_STATS_INFO"]


def test_a_reconfigure_turns_the_controllers_metrics_on_at_once(tmp_path: pathlib.Path) -> None:
    from muster.ctld.reconfig_plan import InUse, plan

    ctld = app(tmp_path)
    running = ctld.controller.config
    fresh = parse_config(CONF.format(state=tmp_path) + "MetricsType=metrics/openmetrics\n", running.path)
    p = plan(running, fresh, InUse())
    assert p.ok and p.node_side == ["MetricsType"]  # agents follow when they restart
    client = TestClient(ctld.asgi)
    assert client.get("/metrics").status_code == 404
    ctld.controller.config = fresh  # what reconfigure does once the plan is accepted
    assert client.get("/metrics").status_code == 200
    log_change = parse_config(CONF.format(state=tmp_path) + "LogFormat=json\n", running.path)
    refused = plan(running, log_change, InUse())
    assert not refused.ok and "LogFormat cannot change while musterctld runs" in refused.refusals[0]


def test_unknown_paths_count_under_one_name(tmp_path: pathlib.Path) -> None:
    ctld = app(tmp_path)
    client = TestClient(as_user(ctld.asgi, 0))
    for i in range(5):
        assert client.get(f"/no/such/{i}").status_code == 404
    types = {r[0]: r[2] for r in client.get("/v1/diag").json()["rpc_types"]}
    assert types == {"GET (no route)": 5}
