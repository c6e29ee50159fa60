"""Every newer slurmrestd version musterrestd serves (v0.0.41 to v0.0.45), against the REST
suite's real cluster: ping, diag, jobs, job, submit, cancel (DELETE), requeue (v0.0.45's
endpoints), nodes and partitions, each answer validated (jsonschema) against that version's
schema in the served ``/openapi/v3``; and slurmrestpy's generated v0.0.41 and v0.0.42
clients submit, read and cancel through it."""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema_rs
import pytest

from restworld import ALICE, Rest
from waiting import wait_for

pytestmark = pytest.mark.integration

NEW = ["v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"]


@pytest.fixture(scope="module")
def document(rest: Rest) -> dict[str, Any]:
    r = httpx.get(f"{rest.url}/openapi/v3", headers=rest.headers(ALICE), timeout=30)
    assert r.status_code == 200
    return r.json()  # type: ignore[no-any-return]


def _check(document: dict[str, Any], r: httpx.Response, method: str, path: str) -> dict[str, Any]:
    """The answer is a 200 of the schema ``path``'s ``method`` documents for it."""
    assert r.status_code == 200, r.text
    op = document["paths"][path][method]
    ref = op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    root = {"$ref": ref, "components": document["components"]}
    body = r.json()
    errors = [f"{e.instance_path}: {e.message}" for e in jsonschema_rs.Draft4Validator(root).iter_errors(body)]
    assert not errors, (path, errors[:5])
    assert body["errors"] == [], body["errors"]
    return body  # type: ignore[no-any-return]


def _wait(c: httpx.Client, v: str, job_id: int, ok: Any, what: str) -> dict[str, Any]:
    def job() -> dict[str, Any] | None:
        got: dict[str, Any] = c.get(f"/slurm/{v}/job/{job_id}").json()["jobs"][0]
        return got if ok(got) else None

    return wait_for(job, 60, interval=0.2, what=f"job {job_id} {what}")


def _api_job(api: Any, job_id: int, state: str) -> Any:
    """The job as a generated client reads it, once in ``state``."""

    def seen() -> Any:
        info = api("get_job")(str(job_id)).jobs[0]
        return info if state in info.job_state else None

    return wait_for(seen, 60, interval=0.2, what=f"job {job_id} {state}")


@pytest.mark.parametrize("v", NEW)
def test_each_version_serves_its_endpoints_in_its_own_shape(rest: Rest, document: dict[str, Any], v: str) -> None:
    s = f"/slurm/{v}"
    with rest.client(ALICE) as c:
        ping = _check(document, c.get(f"{s}/ping"), "get", f"{s}/ping")
        assert ping["meta"]["plugin"]["data_parser"] == f"data_parser/{v}"
        if v >= "v0.0.42":
            assert ping["pings"][0]["responding"] is True and ping["pings"][0]["primary"] is True
        _check(document, c.get(f"{s}/diag"), "get", f"{s}/diag")
        nodes = _check(document, c.get(f"{s}/nodes"), "get", f"{s}/nodes")
        assert {n["name"] for n in nodes["nodes"]} == {"node1", "node2"}
        parts = _check(document, c.get(f"{s}/partitions"), "get", f"{s}/partitions")
        assert [p["name"] for p in parts["partitions"]] == ["gpu"]

        job: dict[str, Any] = {
            "name": f"rest-{v}",
            "current_working_directory": rest.h.workdir,
            "environment": ["PATH=/usr/bin:/bin"],
            "script": "#!/bin/sh\nsleep 300\n",
            "tres_per_node": "gres/gpu:1",
        }
        if v >= "v0.0.42":  # no longer a field of job_desc_msg: refused, nothing submitted
            r = c.post(f"{s}/job/submit", json={"job": {**job, "exclusive": "user"}})
            assert r.status_code == 400 and "exclusive: not a field" in r.json()["errors"][0]["description"]
        sub = _check(document, c.post(f"{s}/job/submit", json={"job": job}), "post", f"{s}/job/submit")
        job_id = sub["job_id"]
        assert ("result" in sub) == (v == "v0.0.41")

        running = _wait(c, v, job_id, lambda j: "RUNNING" in j["job_state"], "ran")
        one = _check(document, c.get(f"{s}/job/{job_id}"), "get", f"{s}/job/{{job_id}}")
        assert one["jobs"][0]["job_id"] == job_id and one["jobs"][0]["job_resources"]["nodes"]["count"] == 1
        listed = _check(document, c.get(f"{s}/jobs"), "get", f"{s}/jobs")
        upd = _check(document, c.post(f"{s}/job/{job_id}", json={"comment": v}), "post", f"{s}/job/{{job_id}}")
        assert upd["results"][0]["job_id"] == job_id and ("job_id" in upd) == (v == "v0.0.41")
        assert job_id in [j["job_id"] for j in listed["jobs"]]
        if v >= "v0.0.44":
            sluid = running["step_id"]["sluid"]
            assert sluid.startswith("s") and len(sluid) == 14

        if v >= "v0.0.45":  # requeue: the same job id back to the queue, a new SLUID
            r = c.get(f"{s}/job/{job_id}/requeue")
            body = _check(document, r, "get", f"{s}/job/{{job_id}}/requeue")
            assert body["status"][0]["error_code"] == 0
            again = _wait(c, v, job_id, lambda j: j["restart_cnt"] == 1, "requeued")
            assert again["step_id"]["sluid"] != sluid
            r = c.post(f"{s}/jobs/requeue", json={"jobs": [str(job_id), "999999"], "flags": ["Hold"]})
            body = _check(document, r, "post", f"{s}/jobs/requeue")
            assert [e[0]["job_id"] for e in body["status"]] == [job_id, 999999]
            assert body["status"][1][0]["error_code"] != 0  # the unknown job, on its own
            r = c.get(f"{s}/job/{job_id}/requeue", params={"flags": "SpecialExit"})
            assert r.status_code == 400 and "SpecialExit" in r.json()["errors"][0]["description"]
        else:
            assert c.get(f"{s}/job/{job_id}/requeue").status_code == 404

        gone = _check(document, c.delete(f"{s}/job/{job_id}"), "delete", f"{s}/job/{{job_id}}")
        if v >= "v0.0.42":
            assert gone["status"][0]["job_id"]["number"] == job_id and gone["status"][0]["error"]["code"] == 0
        _wait(c, v, job_id, lambda j: "CANCELLED" in j["job_state"], "cancelled")
        if v >= "v0.0.45":  # a finished job: Incomplete leaves it, a plain requeue runs it again
            quick = c.post(f"{s}/job/submit", json={"job": {**job, "script": "#!/bin/sh\ntrue\n"}}).json()["job_id"]
            _wait(c, v, quick, lambda j: "COMPLETED" in j["job_state"], "completed")
            r = c.get(f"{s}/job/{quick}/requeue", params={"flags": "Incomplete"})
            assert r.status_code == 400 and "already completing or completed" in r.text
            assert c.get(f"{s}/job/{quick}").json()["jobs"][0]["restart_cnt"] == 0
            _check(document, c.get(f"{s}/job/{quick}/requeue"), "get", f"{s}/job/{{job_id}}/requeue")
            _wait(c, v, quick, lambda j: j["restart_cnt"] == 1 and "COMPLETED" in j["job_state"], "ran again")
        if v >= "v0.0.45":  # accounting: this run's SLUID and the first run's

            def cancelled() -> list[dict[str, Any]] | None:
                recs: list[dict[str, Any]] = c.get(f"/slurmdb/{v}/job/{job_id}").json()["jobs"]
                return recs if recs and recs[0]["state"]["current"] == ["CANCELLED"] else None

            recs = wait_for(cancelled, 30, interval=0.3, what=f"job {job_id} CANCELLED in accounting")
            assert recs[0]["original_sluid"] != recs[0]["sluid"] and recs[0]["sluid"].startswith("s")


def test_slurmrestpy_v0041_and_v0042_clients_submit_read_and_cancel(rest: Rest) -> None:
    slurmrestpy = pytest.importorskip("slurmrestpy")
    from slurmrestpy.models import V0041JobSubmitReq, V0042JobDescMsg, V0042JobSubmitReq

    cfg = slurmrestpy.Configuration(host=rest.url)
    cfg.api_key = {"user": ALICE, "token": rest.tokens[ALICE]}
    slurm = slurmrestpy.SlurmApi(slurmrestpy.ApiClient(cfg))
    common = {
        "script": "#!/bin/sh\nsleep 300\n",
        "current_working_directory": rest.h.workdir,
        "environment": ["PATH=/usr/bin:/bin"],
    }
    for prefix, req in (
        ("v0041", V0041JobSubmitReq.from_dict({"job": {"name": "gen-41", **common}})),
        ("v0042", V0042JobSubmitReq(job=V0042JobDescMsg(name="gen-42", **common))),
    ):
        api = lambda name, p=prefix: getattr(slurm, f"slurm_{p}_{name}")  # noqa: E731
        assert api("get_ping")().pings[0].hostname
        job_id = api("post_job_submit")(req).job_id
        assert job_id
        info = _api_job(api, job_id, "RUNNING")
        assert info.user_name == ALICE
        assert job_id in [j.job_id for j in api("get_jobs")().jobs]
        assert {n.name for n in api("get_nodes")().nodes} == {"node1", "node2"}
        assert api("get_partitions")().partitions[0].name == "gpu"
        api("get_diag")()
        api("delete_job")(str(job_id))
        _api_job(api, job_id, "CANCELLED")


@pytest.mark.filterwarnings("ignore:.*is deprecated:DeprecationWarning")  # v0.0.41, as Slurm 25.11 marks it
@pytest.mark.parametrize("prefix", ["v0041", "v0042", "v0043", "v0044"])
def test_slurm_25_11s_generated_client_runs_each_version(rest: Rest, prefix: str) -> None:
    """slurmrestapi (PyPI 25.11.4.0: openapi-generator's client of Slurm 25.11.4's own
    document, pydantic models checking every answer and its enums)."""
    slurmrestapi = pytest.importorskip("slurmrestapi")
    models = pytest.importorskip("slurmrestapi.models")
    cfg = slurmrestapi.Configuration(host=rest.url)
    cfg.api_key = {"user": ALICE, "token": rest.tokens[ALICE]}
    client = slurmrestapi.ApiClient(cfg)
    slurm, slurmdb = slurmrestapi.SlurmApi(client), slurmrestapi.SlurmdbApi(client)

    def api(name: str) -> Any:
        return getattr(slurm, f"slurm_{prefix}_{name}")

    ping = api("get_ping")().pings[0]
    assert ping.hostname
    req = getattr(models, f"{prefix.capitalize()}JobSubmitReq").from_dict(
        {
            "job": {
                "name": f"gen-{prefix}",
                "script": "#!/bin/sh\nsleep 300\n",
                "current_working_directory": rest.h.workdir,
                "environment": ["PATH=/usr/bin:/bin"],
                "tres_per_node": "gres/gpu:1",
                "time_limit": {"set": True, "infinite": False, "number": 10},
            }
        }
    )
    job_id = api("post_job_submit")(req).job_id
    assert job_id
    info = _api_job(api, job_id, "RUNNING")
    assert info.user_name == ALICE and info.time_limit.number == 10
    assert info.job_resources.nodes.count == 1
    if prefix == "v0044":
        assert info.step_id.sluid.startswith("s")
    assert job_id in [j.job_id for j in api("get_jobs")().jobs]
    assert {n.name for n in api("get_nodes")().nodes} == {"node1", "node2"}
    assert api("get_partitions")().partitions[0].name == "gpu"
    api("get_diag")()
    api("delete_job")(str(job_id))
    _api_job(api, job_id, "CANCELLED")
    getattr(slurmdb, f"slurmdb_{prefix}_get_jobs")()
