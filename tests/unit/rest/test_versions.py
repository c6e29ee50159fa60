"""One model, a view per version: the table of rest.versions shapes the answers and the
OpenAPI document of every version served (v0.0.40 to v0.0.45), checked with the models of
slurmrestpy (generated from Slurm's own documents: v0.0.40, v0.0.41, v0.0.42) and with
jsonschema against each version's document."""

from __future__ import annotations

import json
from typing import Any

import jsonschema_rs
import pytest

from muster.client.settings import parse_client_settings
from muster.rest import layout, versions
from muster.rest.app import build_app, openapi_document

from .test_layout import NODE, PARTITION, _job

BASE = openapi_document()
NEW = [v for v in versions.VERSIONS if v != "v0.0.40"]


def _doc(**body: Any) -> dict[str, Any]:
    return layout.document(["GET", "/x"], "muster", "alice", **body)


def _rendered(version: str, path: str, schema: str | None = None, **body: Any) -> dict[str, Any]:
    return versions.render(version, path, _doc(**body), schema)


def _validate(version: str, schema: str, instance: dict[str, Any]) -> None:
    doc = versions.openapi_document(BASE, version)
    root = {"$ref": f"#/components/schemas/{version}_{schema}", "components": doc["components"]}
    errors = [f"{e.instance_path}: {e.message}" for e in jsonschema_rs.Draft4Validator(root).iter_errors(instance)]
    assert not errors, errors


def _jobs(version: str) -> dict[str, Any]:
    job = layout.job_info({**_job(), "cluster": "muster"})
    return _rendered(
        version, f"/slurm/{version}/jobs", jobs=[job], last_update=layout.epoch(200), last_backfill=layout.epoch(200)
    )


def test_v0040_is_served_and_documented_as_before() -> None:
    assert versions.openapi_document(BASE, "v0.0.40") == BASE
    job = layout.job_info({**_job(), "cluster": "muster"})
    doc = _doc(jobs=[job])
    assert versions.render("v0.0.40", "/slurm/v0.0.40/jobs", doc) == doc


@pytest.mark.parametrize("version", NEW)
def test_each_version_answers_fit_its_own_document(version: str) -> None:
    _validate(version, "openapi_job_info_resp", _jobs(version))
    pings = [{"hostname": "h", "pinged": "UP", "latency": 3, "mode": "primary"}]
    _validate(version, "openapi_ping_array_resp", _rendered(version, f"/slurm/{version}/ping", pings=pings))
    nodes = [layout.node(NODE, "muster")]
    _validate(
        version, "openapi_nodes_resp", _rendered(version, "/slurm/x/nodes", nodes=nodes, last_update=layout.epoch(1))
    )
    parts = [layout.partition(PARTITION, "muster")]
    _validate(
        version,
        "openapi_partition_resp",
        _rendered(version, "/slurm/x/partitions", partitions=parts, last_update=layout.epoch(1)),
    )
    submit = {"job_id": 7, "step_id": "batch", "job_submit_user_msg": "", "result": {"job_id": 7}}
    out = _rendered(version, f"/slurm/{version}/job/submit", "openapi_job_submit_response", **submit)
    _validate(version, "openapi_job_submit_response", out)
    assert ("result" in out) == (version == "v0.0.41")
    assert out["meta"]["plugin"]["data_parser"] == f"data_parser/{version}"
    # every reference of the document resolves, and no v0.0.40 name is left in it
    text = json.dumps(versions.openapi_document(BASE, version))
    assert "v0.0.40" not in text and "v0040" not in text


def test_the_generated_clients_of_v0041_and_v0042_read_the_answers() -> None:
    models = pytest.importorskip("slurmrestpy.models")
    for version, prefix in (("v0.0.41", "V0041"), ("v0.0.42", "V0042")):
        jobs = getattr(models, f"{prefix}OpenapiJobInfoResp").from_dict(_jobs(version)).jobs
        assert jobs[0].job_id == 1 and jobs[0].job_state == ["RUNNING"]
        pings = [{"hostname": "h", "pinged": "UP", "latency": 3, "mode": "primary"}]
        ping = getattr(models, f"{prefix}OpenapiPingArrayResp").from_dict(
            _rendered(version, f"/slurm/{version}/ping", pings=pings)
        )
        assert ping.pings[0].hostname == "h"
        nodes = [layout.node(NODE, "muster")]
        got = getattr(models, f"{prefix}OpenapiNodesResp").from_dict(
            _rendered(version, f"/slurm/{version}/nodes", nodes=nodes, last_update=layout.epoch(1))
        )
        assert got.nodes[0].name == "n1"
        submit = {"job_id": 7, "step_id": "batch", "job_submit_user_msg": "", "result": {"job_id": 7}}
        sub = getattr(models, f"{prefix}OpenapiJobSubmitResponse").from_dict(
            _rendered(version, "/slurm/x/job/submit", "openapi_job_submit_response", **submit)
        )
        assert sub.job_id == 7
    v42 = models.V0042OpenapiJobInfoResp.from_dict(_jobs("v0.0.42")).jobs[0]
    assert v42.job_resources.nodes.count == 2 and v42.job_resources.nodes.allocation[1].name == "n2"
    assert (
        models.V0042OpenapiPingArrayResp.from_dict(
            _rendered("v0.0.42", "/slurm/v0.0.42/ping", pings=[{"hostname": "h", "pinged": "UP", "mode": "primary"}])
        )
        .pings[0]
        .responding
    )


def test_sluid_is_slurms_form_new_per_attempt_and_original_kept() -> None:
    first, again = versions.sluid("muster", 42, 0), versions.sluid("muster", 42, 1)
    for s in (first, again):
        assert len(s) == 14 and s[0] == "s" and set(s[1:]) <= set("0123456789ABCDEFGHJKMNPQRSTVWXYZ")
    assert first != again != versions.sluid("other", 42, 1)
    job = _jobs("v0.0.44")["jobs"][0]
    assert job["step_id"]["sluid"] == versions.sluid("muster", 1, 0) and job["step_id"]["job_id"]["number"] == 1
    assert "step_id" not in _jobs("v0.0.43")["jobs"][0]
    rec = {"job_id": 9, "cluster": "muster", "restart_cnt": 2}
    out = versions.view("v0.0.45", "job", rec)
    assert out["sluid"] == versions.sluid("muster", 9, 2) and out["original_sluid"] == versions.sluid("muster", 9, 0)
    assert "sluid" not in versions.view("v0.0.44", "job", rec)


def test_job_desc_fields_follow_the_version() -> None:
    job = {"name": "x", "exclusive": "user"}
    assert versions.job_desc("v0.0.41", job) == (job, [])
    with pytest.raises(ValueError, match="exclusive: not a field of v0.0.42"):
        versions.job_desc("v0.0.42", job)
    out, warnings = versions.job_desc("v0.0.42", {"name": "x", "oom_kill_step": 1})
    assert out == {"name": "x"} and warnings == ["oom_kill_step: not used by muster; ignored"]
    with pytest.raises(ValueError, match="oom_kill_step"):
        versions.job_desc("v0.0.41", {"oom_kill_step": 1})


def test_the_combined_document_marks_what_slurm_25_11_deprecates() -> None:
    paths = versions.combined_document(BASE)["paths"]
    assert paths["/slurm/v0.0.41/jobs"]["get"]["deprecated"] is True
    assert paths["/slurmdb/v0.0.40/jobs"]["get"]["deprecated"] is True
    assert "deprecated" not in paths["/slurm/v0.0.42/jobs"]["get"]


def test_requeue_is_served_and_documented_from_v0045_only() -> None:
    app = build_app(parse_client_settings("ClusterName=t\n", "/nonexistent.conf"))
    paths = {getattr(r, "path", "") for r in app.routes}
    assert "/slurm/v0.0.45/job/{job_id}/requeue" in paths and "/slurm/v0.0.45/jobs/requeue" in paths
    assert "/slurm/v0.0.44/job/{job_id}/requeue" not in paths
    assert "/slurm/v0.0.45/jobs/requeue" in versions.openapi_document(BASE, "v0.0.45")["paths"]
    assert "/slurm/v0.0.44/jobs/requeue" not in versions.openapi_document(BASE, "v0.0.44")["paths"]
