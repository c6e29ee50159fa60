"""musterrestd as a REST client sees it: tokens from ``scontrol token``, Slurm's v0.0.40
bodies, and the commands' permission rules."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from restworld import ALICE, BOB, DB, Rest, V
from waiting import wait_for

pytestmark = pytest.mark.integration


def _job(rest: Rest, script: str, **extra: object) -> dict:
    return {
        "job": {
            "name": "rest-test",
            "current_working_directory": rest.h.workdir,
            "environment": ["PATH=/usr/bin:/bin"],
            "script": script,
            **extra,
        }
    }


def test_scontrol_token_prints_slurm_jwt_and_refuses_another_user_to_a_user(rest: Rest) -> None:
    token = rest.token(ALICE, as_uid=rest.alice)
    assert token.count(".") == 2
    out = rest.h.run(["scontrol", "token", f"username={BOB}"], uid=rest.alice)
    assert out.returncode == 1
    assert "Unable to fetch JWT token" in out.stderr and "denied" in out.stderr
    out = rest.h.run(["scontrol", "token", "lifespan=abc"], uid=rest.alice)
    assert out.returncode == 1 and "Invalid lifespan" in out.stderr
    # an administrator may mint for others
    assert rest.token(BOB, as_uid=None).count(".") == 2


def test_no_token_an_expired_token_and_another_users_token_are_refused(rest: Rest) -> None:
    import httpx

    r = httpx.get(f"{rest.url}{V}/jobs")
    assert r.status_code == 401
    assert r.json()["errors"][0]["error_number"] == 1007
    short = rest.token(ALICE, as_uid=rest.alice, lifespan=1)
    time.sleep(2.1)  # sleep: the token's one-second lifespan runs out
    r = httpx.get(f"{rest.url}{V}/jobs", headers={"X-SLURM-USER-NAME": ALICE, "X-SLURM-USER-TOKEN": short})
    assert r.status_code == 401 and "expired" in r.json()["errors"][0]["description"]
    # alice's token does not make anyone bob
    r = httpx.get(f"{rest.url}{V}/jobs", headers={"X-SLURM-USER-NAME": BOB, "X-SLURM-USER-TOKEN": rest.tokens[ALICE]})
    assert r.status_code == 401
    # a token signed with another key
    import jwt

    forged = jwt.encode({"sun": BOB, "exp": int(time.time()) + 600, "iat": 0}, b"x" * 32, algorithm="HS256")
    r = httpx.get(f"{rest.url}{V}/jobs", headers={"X-SLURM-USER-NAME": BOB, "X-SLURM-USER-TOKEN": forged})
    assert r.status_code == 401
    # a token cannot mint another token (a stolen one must expire)
    from muster.protocol.client import ApiError, request

    cfg = rest.h.cluster.config()
    with pytest.raises(ApiError) as err:
        request("POST", "/v1/token", {}, address=(cfg.ctld_addr, cfg.ctld_port), headers=rest.headers(ALICE))
    assert err.value.status == 403
    with pytest.raises(ApiError) as err:  # nor a dashboard session that would outlive it
        request("POST", "/v1/dashboard/token", {}, address=(cfg.ctld_addr, cfg.ctld_port), headers=rest.headers(ALICE))
    assert err.value.status == 403
    # Authorization: Bearer works as the headers do
    r = httpx.get(f"{rest.url}{V}/ping", headers={"Authorization": f"Bearer {rest.tokens[ALICE]}"})
    assert r.status_code == 200 and r.json()["pings"][0]["pinged"] == "UP"


def test_a_two_node_gpu_job_runs_over_rest_and_shows_in_slurmdb(rest: Rest) -> None:
    script = "#!/bin/sh\necho nodes=$SLURM_JOB_NUM_NODES gpus=$CUDA_VISIBLE_DEVICES user=$(id -un)\n"
    body = _job(
        rest,
        script,
        nodes="2",
        tres_per_node="gres/gpu:1",
        time_limit={"set": True, "number": 5},
        standard_output=os.path.join(rest.h.workdir, "rest-%j.out"),
    )
    with rest.client(ALICE) as c:
        r = c.post(f"{V}/job/submit", json=body)
        assert r.status_code == 200, r.text
        job_id = r.json()["job_id"]
        assert r.json()["errors"] == []
    job = rest.wait(ALICE, job_id, {"COMPLETED", "FAILED", "CANCELLED"})
    assert job["job_state"] == ["COMPLETED"], job
    assert job["node_count"]["number"] == 2 and job["user_name"] == ALICE
    assert job["time_limit"]["number"] == 5
    text = rest.h.read(f"rest-{job_id}.out")
    assert "nodes=2" in text and f"user={ALICE}" in text
    with rest.client(ALICE) as c:

        def completed() -> Any:
            r = c.get(f"{DB}/job/{job_id}")
            return r if r.status_code == 200 and r.json()["jobs"][0]["state"]["current"] == ["COMPLETED"] else None

        r = wait_for(completed, 30, interval=0.3, what=f"job {job_id} COMPLETED in accounting")
        rec = r.json()["jobs"][0]
        assert rec["allocation_nodes"] == 2 and rec["user"] == ALICE
        assert any(t["type"] == "gres" and t["name"] == "gpu" and t["count"] == 2 for t in rec["tres"]["allocated"])
        r = c.get(f"{DB}/jobs", params={"users": ALICE})
        assert job_id in [j["job_id"] for j in r.json()["jobs"]]


def test_a_user_cannot_cancel_another_users_job(rest: Rest) -> None:
    with rest.client(ALICE) as c:
        r = c.post(f"{V}/job/submit", json=_job(rest, "#!/bin/sh\nsleep 120\n"))
        assert r.status_code == 200, r.text
        job_id = r.json()["job_id"]
    rest.wait(ALICE, job_id, {"RUNNING"})
    with rest.client(BOB) as c:
        r = c.delete(f"{V}/job/{job_id}")
        assert r.status_code == 403, r.text
        assert r.json()["errors"][0]["error"] == "Access/permission denied"
        # PrivateData=jobs, as squeue and sacct honour it
        assert c.get(f"{V}/job/{job_id}").status_code == 404
        assert job_id not in [j["job_id"] for j in c.get(f"{V}/jobs").json()["jobs"]]
        assert job_id not in [j["job_id"] for j in c.get(f"{DB}/jobs").json()["jobs"]]
    assert rest.wait(ALICE, job_id, {"RUNNING"})["job_state"] == ["RUNNING"]
    with rest.client(ALICE) as c:
        r = c.delete(f"{V}/job/{job_id}", params={"signal": "USR1"})
        assert r.status_code == 200, r.text
        r = c.delete(f"{V}/job/{job_id}")
        assert r.status_code == 200, r.text
    assert rest.wait(ALICE, job_id, {"CANCELLED"})["job_state"] == ["CANCELLED"]


def test_bad_submissions_get_errors_in_slurms_form_and_change_nothing(rest: Rest) -> None:
    with rest.client(ALICE) as c:
        before = len(c.get(f"{V}/jobs").json()["jobs"])
        for body, words in [
            (_job(rest, "#!/bin/sh\ntrue\n", nodes="two"), "not a valid node count"),
            (_job(rest, "#!/bin/sh\ntrue\n", tres_per_node="gres/fpga:1"), "only gres/gpu"),
            (_job(rest, "#!/bin/sh\ntrue\n", licenses="x"), "licenses: not supported"),
            (_job(rest, "no shebang"), "#!"),
            ({"job": {"partition": "nope", "script": "#!/bin/sh\n", "current_working_directory": "/tmp"}}, "partition"),
            ({}, "job: missing"),
        ]:
            r = c.post(f"{V}/job/submit", json=body)
            assert r.status_code == 400, (body, r.text)
            err = r.json()["errors"][0]
            assert words in err["description"], err
        assert len(c.get(f"{V}/jobs").json()["jobs"]) == before
        r = c.get(f"{V}/job/999999")
        assert r.status_code == 404 and r.json()["errors"][0]["error_number"] == 2017


def _slurm_error(r: object, status: int) -> dict:
    """The one entry of a Slurm ``errors[]`` answer with this status (meta included)."""
    assert r.status_code == status, r.text  # type: ignore[attr-defined]
    body = r.json()  # type: ignore[attr-defined]
    assert set(body) >= {"meta", "errors", "warnings"} and len(body["errors"]) == 1, body
    return body["errors"][0]  # type: ignore[no-any-return]


def test_unknown_versions_urls_and_methods_are_answered_in_slurms_error_form(rest: Rest) -> None:
    with rest.client(ALICE) as c:
        err = _slurm_error(c.get("/slurm/v0.0.39/jobs"), 404)
        assert err["description"].startswith(
            "Unsupported API version 'v0.0.39' in /slurm/v0.0.39/jobs: this server speaks v0.0.40"
        )
        assert {"error", "error_number", "source"} <= set(err)
        err = _slurm_error(c.get("/slurmdb/v0.0.99/jobs"), 404)
        assert "Unsupported API version 'v0.0.99'" in err["description"] and "v0.0.40" in err["description"]
        err = _slurm_error(c.get(f"{V}/no-such-thing"), 404)
        assert err["description"] == f"Unable to find requested URL: {V}/no-such-thing"
        err = _slurm_error(c.put(f"{V}/jobs"), 405)
        assert err["description"] == f"Method PUT not allowed for {V}/jobs"


def test_an_oversized_body_is_answered_in_slurms_error_form(rest: Rest) -> None:
    with rest.client(ALICE) as c:
        before = len(c.get(f"{V}/jobs").json()["jobs"])
        body = _job(rest, "#!/bin/sh\n" + "#" * (17 << 20))  # over musterrestd's 16 MB bodies
        err = _slurm_error(c.post(f"{V}/job/submit", json=body), 413)
        assert err["description"].startswith("Request body too large (limit ")
        assert err["source"] == "musterrestd"
        assert len(c.get(f"{V}/jobs").json()["jobs"]) == before  # and the server still answers


def test_nodes_partitions_and_admin_only_node_update(rest: Rest) -> None:
    with rest.client(ALICE) as c:
        nodes = c.get(f"{V}/nodes").json()["nodes"]
        assert sorted(n["name"] for n in nodes) == ["node1", "node2"]
        assert nodes[0]["gres"] == "gpu:2"
        assert c.get(f"{V}/node/node1").json()["nodes"][0]["name"] == "node1"
        assert c.get(f"{V}/node/node1").json()["nodes"][0]["failures"] == []  # muster's: the failure ledger
        assert c.get(f"{V}/node/nope").status_code == 404
        parts = c.get(f"{V}/partitions").json()["partitions"]
        assert parts[0]["name"] == "gpu" and parts[0]["nodes"]["total"] == 2
        assert c.get(f"{V}/partition/gpu").status_code == 200
        assert c.get(f"{V}/partition/nope").status_code == 404
        r = c.post(f"{V}/node/node2", json={"state": ["DRAIN"], "reason": "alice tries"})
        assert r.status_code == 403
    with rest.client("root") as c:
        r = c.post(f"{V}/node/node2", json={"state": ["DRAIN"], "reason": "maintenance"})
        assert r.status_code == 200, r.text
        n = c.get(f"{V}/node/node2").json()["nodes"][0]
        assert "DRAIN" in n["state"] and n["reason"] == "maintenance"
        assert c.post(f"{V}/node/node2", json={"state": ["RESUME"]}).status_code == 200
        assert "DRAIN" not in c.get(f"{V}/node/node2").json()["nodes"][0]["state"]


def test_update_hold_and_release_a_job(rest: Rest) -> None:
    with rest.client(ALICE) as c:
        r = c.post(f"{V}/job/submit", json=_job(rest, "#!/bin/sh\ntrue\n", hold=True))
        job_id = r.json()["job_id"]
        r = c.post(f"{V}/job/{job_id}", json={"time_limit": {"set": True, "number": 7}, "comment": "via rest"})
        assert r.status_code == 200, r.text
        job = c.get(f"{V}/job/{job_id}").json()["jobs"][0]
        assert job["time_limit"]["number"] == 7 and job["comment"] == "via rest"
        assert job["job_state"] == ["PENDING"]
        assert c.post(f"{V}/job/{job_id}", json={"hold": False}).status_code == 200
    assert rest.wait(ALICE, job_id, {"COMPLETED"})["job_state"] == ["COMPLETED"]


def test_diag_reservations_shares_and_the_accounting_objects(rest: Rest) -> None:
    with rest.client("root") as c:
        assert c.get(f"{V}/diag").json()["statistics"]["jobs_submitted"] >= 0
        assert c.get(f"{V}/reservations").json()["reservations"] == []
        r = c.get(f"{V}/shares")
        assert "shares" in r.json().get("shares", {}), r.text
        for path, key in [
            ("accounts", "accounts"),
            ("users", "users"),
            ("associations", "associations"),
            ("qos", "qos"),
        ]:
            r = c.get(f"{DB}/{path}")
            assert r.status_code == 200 and isinstance(r.json()[key], list), r.text
        doc = c.get("/openapi/v3").json()
        assert f"{V}/job/submit" in doc["paths"]


def test_a_bearer_token_alone_submits_as_its_user_with_their_home_as_default_directory(rest: Rest) -> None:
    import pwd

    import httpx

    headers = {"Authorization": f"Bearer {rest.tokens[ALICE]}"}
    body = {"job": {"script": "#!/bin/sh\ntrue\n", "hold": True, "environment": ["A=1"]}}
    with httpx.Client(base_url=rest.url, headers=headers, timeout=30) as c:
        r = c.post(f"{V}/job/submit", json=body)
        assert r.status_code == 200, r.text
        job = c.get(f"{V}/job/{r.json()['job_id']}").json()["jobs"][0]
        assert job["user_name"] == ALICE
        assert job["current_working_directory"] == pwd.getpwnam(ALICE).pw_dir
        assert c.delete(f"{V}/job/{job['job_id']}").status_code == 200
