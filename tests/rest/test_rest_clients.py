"""A published slurmrestd client, slurmrestpy (generated from Slurm's OpenAPI document; its
v0.0.40 models validate every answer strictly), submits, lists, watches, cancels and reads
accounting through musterrestd; and schemathesis checks the served OpenAPI document against
what is served (no 5xx, every answer of the documented shape)."""

from __future__ import annotations

from typing import Any

import pytest

from restworld import ALICE, Rest
from waiting import wait_for

pytestmark = pytest.mark.integration

slurmrestpy = pytest.importorskip("slurmrestpy")


def _api(rest: Rest, user: str):  # type: ignore[no-untyped-def]
    cfg = slurmrestpy.Configuration(host=rest.url)
    cfg.api_key = {"user": user, "token": rest.tokens[user]}
    client = slurmrestpy.ApiClient(cfg)
    return slurmrestpy.SlurmApi(client), slurmrestpy.SlurmdbApi(client)


def test_slurmrestpy_submits_lists_cancels_and_reads_accounting(rest: Rest) -> None:
    from slurmrestpy.models import V0040JobDescMsg, V0040JobSubmitReq, V0040Uint32NoVal

    slurm, slurmdb = _api(rest, ALICE)
    assert slurm.slurm_v0040_get_ping().pings[0].pinged == "UP"
    desc = V0040JobDescMsg(
        name="generated-client",
        script="#!/bin/sh\nsleep 120\n",
        current_working_directory=rest.h.workdir,
        environment=["PATH=/usr/bin:/bin"],
        nodes="2",
        tres_per_node="gres/gpu:1",
        time_limit=V0040Uint32NoVal(set=True, infinite=False, number=10),
    )
    sub = slurm.slurm_v0040_post_job_submit(V0040JobSubmitReq(job=desc))
    job_id = sub.job_id
    assert job_id and not sub.errors

    def running() -> Any:
        info = slurm.slurm_v0040_get_job(str(job_id)).jobs[0]
        return info if "RUNNING" in info.job_state else None

    info = wait_for(running, 60, interval=0.2, what=f"job {job_id} RUNNING")
    assert info.node_count.number == 2 and info.user_name == ALICE
    assert job_id in [j.job_id for j in slurm.slurm_v0040_get_jobs().jobs]
    assert {n.name for n in slurm.slurm_v0040_get_nodes().nodes} == {"node1", "node2"}
    assert slurm.slurm_v0040_get_partitions().partitions[0].name == "gpu"
    slurm.slurm_v0040_get_diag()
    slurm.slurm_v0040_delete_job(str(job_id))
    wait_for(
        lambda: "CANCELLED" in slurm.slurm_v0040_get_job(str(job_id)).jobs[0].job_state,
        60,
        interval=0.2,
        what=f"job {job_id} CANCELLED",
    )

    def recorded() -> Any:
        recs = slurmdb.slurmdb_v0040_get_job(str(job_id)).jobs
        return recs if recs and recs[0].state.current == ["CANCELLED"] else None

    recs = wait_for(recorded, 30, interval=0.3, what=f"job {job_id} CANCELLED in accounting")
    assert recs[0].allocation_nodes == 2
    slurmdb.slurmdb_v0040_get_jobs()
    slurmdb.slurmdb_v0040_get_accounts()
    slurmdb.slurmdb_v0040_get_users()
    slurmdb.slurmdb_v0040_get_associations()
    slurmdb.slurmdb_v0040_get_qos()
    slurm.slurm_v0040_get_shares()
    slurm.slurm_v0040_get_reservations()


def test_the_served_openapi_document_matches_what_is_served(rest: Rest) -> None:
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from schemathesis.checks import not_a_server_error
    from schemathesis.generation import GenerationMode
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    # Data that fits the document and data that does not. What the document promises: no
    # server error, and every answer (2xx or errors[]) of the documented status and shape. Whether generated data is accepted is not among them: a
    # schema cannot say which partitions exist or which scripts are well formed.
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]

    schema = schemathesis.openapi.from_url(f"{rest.url}/openapi/v3", headers=rest.headers(ALICE))
    # v0.0.41-v0.0.44 are views of the same handlers between these two (rest.versions; each
    # is validated against its document in test_rest_versions.py): fuzz the oldest and newest
    schema = schema.include(path_regex=r"^/slurm(db)?/v0\.0\.4[05]/")
    failures: list[str] = []
    for result in schema.get_all_operations():
        op = result.ok()

        @settings(
            max_examples=5,
            deadline=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=op.as_strategy() | op.as_strategy(GenerationMode.NEGATIVE))
        def check(case) -> None:  # type: ignore[no-untyped-def]
            case.call_and_validate(base_url=rest.url, headers=rest.headers(ALICE), checks=checks)

        try:
            check()
        except Exception as e:  # collect every operation's failure, then report them all
            failures.append(f"{op.method.upper()} {op.path}: {e}")
    assert not failures, "\n\n".join(failures)
