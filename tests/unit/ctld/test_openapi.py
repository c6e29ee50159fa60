"""The controller's OpenAPI description: every route, each body described by the model that checks it."""

from __future__ import annotations

import pathlib

from muster.core.config import parse_config
from muster.ctld.app import CtldApp
from muster.ctld.openapi import BODIES, QUERIES, document


def routes(tmp_path: pathlib.Path) -> list:  # type: ignore[type-arg]
    text = (
        f"ClusterName=t\nStateSaveLocation={tmp_path}\nAuthKeyFile={tmp_path}/k\n"
        "NodeName=n1 CPUs=4 RealMemory=1000\nPartitionName=p Nodes=ALL Default=YES\n"
    )
    app = CtldApp(parse_config(text, str(tmp_path / "muster.conf")), b"k" * 32)
    return list(app.asgi.routes)


def test_every_route_is_described_and_every_table_entry_is_a_route(tmp_path: pathlib.Path) -> None:
    all_routes = routes(tmp_path)
    doc = document(all_routes)
    served = {(m, r.path) for r in all_routes for m in r.methods if m != "HEAD"}
    described = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert served == described
    assert set(BODIES) <= served  # no stale entry
    assert {p for p in QUERIES} <= {p for _, p in served}
    undescribed = sorted(p for m, p in served if m == "POST" and (m, p) not in BODIES)
    # routes whose body is empty or free-form (their handlers read no model)
    assert undescribed == [
        "/v1/dashboard/token",
        "/v1/diag/reset",
        "/v1/jobs/{job_id}/release",
        "/v1/jobs/{job_id}/resume",
        "/v1/jobs/{job_id}/steps/{step_id}/watch",
        "/v1/jobs/{job_id}/suspend",
        "/v1/partitions/{name}/delete",
        "/v1/reconfigure",
        "/v1/reservations/{name}/delete",
        "/v1/steps/no_allocate/{job_id}/done",
    ]


def test_a_body_is_the_model_that_checks_it(tmp_path: pathlib.Path) -> None:
    doc = document(routes(tmp_path))
    op = doc["paths"]["/v1/jobs/{job_id}/update"]["post"]
    assert op["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/UpdateBody"}
    update = doc["components"]["schemas"]["UpdateBody"]
    assert update["additionalProperties"] is False
    assert update["properties"]["time_limit"]["anyOf"][0]["minimum"] == 1
    assert [p["name"] for p in op["parameters"]] == ["job_id"]
    listing = doc["paths"]["/v1/jobs"]["get"]
    assert [p["name"] for p in listing["parameters"]] == QUERIES["/v1/jobs"]
    assert "SpecModel" in doc["components"]["schemas"]  # nested models are components too
    assert doc["components"]["securitySchemes"]["auth"]["name"] == "X-Muster-Credential"
