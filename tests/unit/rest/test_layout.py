"""The REST answers have Slurm's v0.0.40 shape: checked with the models of a published
client generated from Slurm's OpenAPI document (slurmrestpy), and against our own document."""

from __future__ import annotations

from typing import Any

import pytest

from muster.client.settings import parse_client_settings
from muster.core.job import Job, JobSpec, NodeAlloc, Shape
from muster.core.states import JobState
from muster.ctld.wire import job_wire
from muster.rest import layout, versions
from muster.rest.app import build_app, openapi_document

models = pytest.importorskip("slurmrestpy.models")


def _job(state: JobState = JobState.RUNNING) -> dict[str, Any]:
    spec = JobSpec(name="train", workdir="/tmp", gpus_per_node=2, gpu_type="a100", time_limit=3600, min_nodes=2)
    job = Job(1, spec, Shape(nodes=2, gpus_per_node=2), "alice", 1000, "alice", 1000, 100.0, state=state)
    job.start_time, job.time_limit = 110.0, 3600
    job.alloc = [NodeAlloc("n1", 4, 1000, [0, 1]), NodeAlloc("n2", 4, 1000, [0, 1])]
    return job_wire(job, 200.0)


NODE = {
    "name": "n1",
    "addr": "127.0.0.2",
    "hostname": "n1",
    "port": 6818,
    "state": "MIXED",
    "drain": True,
    "responding": False,
    "reason": "fix",
    "reason_time": 150.0,
    "reason_user": "root",
    "cpus": 8,
    "cpus_alloc": 4,
    "real_memory": 8000,
    "mem_alloc": 1000,
    "gpus": 2,
    "gpu_type": "a100",
    "gpus_alloc": 2,
    "features": ["ib"],
    "partitions": ["gpu"],
    "boot_time": 1.0,
    "last_seen": 2.0,
    "agent_start_time": 1.5,
    "weight": 1,
    "version": "0.1.0",
}
PARTITION = {
    "name": "gpu",
    "nodelist": "n[1-2]",
    "default": True,
    "state": "UP",
    "max_time": None,
    "default_time": 3600,
    "max_nodes": None,
    "min_nodes": 1,
    "priority_tier": 1,
    "priority_job_factor": 1,
    "allow_accounts": None,
    "allow_groups": None,
    "deny_accounts": None,
    "total_cpus": 16,
    "total_nodes": 2,
    "total_gpus": 4,
    "total_mem": 16000,
}


def _doc(**body: Any) -> dict[str, Any]:
    return layout.document(["GET", "/x"], "muster", "alice", **body)


def test_jobs_nodes_and_partitions_parse_with_the_generated_client() -> None:
    doc = _doc(jobs=[layout.job_info(_job())], last_backfill=layout.epoch(200), last_update=layout.epoch(200))
    jobs = models.V0040OpenapiJobInfoResp.from_dict(doc).jobs
    assert jobs[0].job_state == ["RUNNING"] and jobs[0].node_count.number == 2
    assert jobs[0].tres_per_node == "gres/gpu:a100:2" and jobs[0].time_limit.number == 60
    nodes = models.V0040OpenapiNodesResp.from_dict(
        _doc(nodes=[layout.node(NODE, "muster")], last_update=layout.epoch(1))
    )
    assert nodes.nodes[0].state == ["MIXED", "DRAIN", "NOT_RESPONDING"] and nodes.nodes[0].gres == "gpu:a100:2"
    parts = models.V0040OpenapiPartitionResp.from_dict(
        _doc(partitions=[layout.partition(PARTITION, "muster")], last_update=layout.epoch(1))
    )
    assert parts.partitions[0].maximums.time.infinite and parts.partitions[0].defaults.time.number == 60


def test_accounting_and_the_rest_parse_with_the_generated_client() -> None:
    record = {
        "job_id": 7,
        "name": "x",
        "user": "alice",
        "state": "COMPLETED",
        "exit_code": "0:0",
        "nnodes": 2,
        "alloc_tres": "cpu=8,mem=2000M,node=2,gres/gpu=4",
        "time_limit": 3600,
        "steps": [{"job_id_raw": "7.batch", "state": "COMPLETED", "exit_code": "0:0", "start": 1, "end": 2}],
    }
    recs = models.V0040OpenapiSlurmdbdJobsResp.from_dict(_doc(jobs=[layout.sacct_record(record)]))
    assert recs.jobs[0].state.current == ["COMPLETED"] and recs.jobs[0].steps[0].time.end.number == 2
    rows = [
        {"account": "root", "user": "", "raw_shares": None, "norm_shares": 0.0, "effective_usage": 1.0},
        {"account": "ml", "user": "alice", "raw_shares": 1, "norm_shares": 1.0, "level_fs": float("inf")},
    ]
    shares = models.V0040OpenapiSharesResp.from_dict(_doc(shares=layout.shares(rows, "muster")))
    assert [s.type for s in shares.shares.shares] == [["ASSOCIATION"], ["USER"]]
    assoc = {"account": "ml", "user": "alice", "parent": None, "shares": 1, "limits": {"max_jobs": 4}, "qos": []}
    models.V0040OpenapiAccountsResp.from_dict(
        _doc(accounts=[layout.account({"name": "ml", "description": "d", "organization": "o"}, [assoc], "muster")])
    )
    models.V0040OpenapiUsersResp.from_dict(
        _doc(users=[layout.user({"name": "alice", "default_account": "ml", "admin_level": "None"}, [assoc], "m")])
    )
    models.V0040OpenapiAssocsResp.from_dict(_doc(associations=[layout.assoc(assoc, "muster")]))
    models.V0040OpenapiSlurmdbdQosResp.from_dict(_doc(qos=[layout.qos({"name": "normal", "max_wall": 600})]))
    models.V0040OpenapiDiagResp.from_dict(_doc(statistics=layout.diag([_job()], 200.0, 100.0)))
    resv = {"name": "r", "nodelist": "n1", "node_cnt": 1, "core_cnt": 8, "start": 1, "end": 2, "flags": ["MAINT"]}
    models.V0040OpenapiReservationResp.from_dict(
        _doc(reservations=[layout.reservation(resv)], last_update=layout.epoch(1))
    )
    err = layout.error_document(["GET", "/x"], "no", "Invalid job id specified", 2017, "job")
    assert models.V0040OpenapiResp.from_dict(err).errors[0].error_number == 2017


def test_the_openapi_document_covers_exactly_what_is_served() -> None:
    doc = versions.combined_document(openapi_document())  # every version, as /openapi/v3
    settings = parse_client_settings("ClusterName=t\n", "/nonexistent.conf")
    app = build_app(settings)
    served: set[tuple[str, str]] = set()
    for route in app.routes:
        path = getattr(route, "path", "")
        if path.startswith("/openapi"):
            continue
        for method in getattr(route, "methods", None) or []:
            if method != "HEAD":
                served.add((method.lower(), path))
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert served == documented
    # every reference resolves
    schemas = doc["components"]["schemas"]

    def refs(node: Any) -> list[str]:
        if isinstance(node, dict):
            out = [node["$ref"]] if "$ref" in node else []
            return out + [r for v in node.values() for r in refs(v)]
        if isinstance(node, list):
            return [r for v in node for r in refs(v)]
        return []

    missing = {r for r in refs(doc) if r.rsplit("/", 1)[1] not in schemas}
    assert not missing
