"""A REST submission's ``rlimits`` (v0.0.40 number objects, lower-case names) reach the job;
without them the job carries none: never the REST daemon's own limits."""

from __future__ import annotations

import pytest

from muster.rest.jobdesc import JobDescError, job_request

SCRIPT = "#!/bin/sh\ntrue\n"


def _spec(**job: object) -> dict[str, object]:
    spec, warnings = job_request({"script": SCRIPT, "current_working_directory": "/tmp", **job}, None, "root")
    assert warnings == []
    return spec


def test_a_rest_job_without_rlimits_carries_none() -> None:
    assert "rlimits" not in _spec()


def test_rlimits_are_read_as_number_objects() -> None:
    spec = _spec(
        rlimits={
            "nofile": {"set": True, "infinite": False, "number": 4096},
            "memlock": {"set": True, "infinite": True, "number": 0},
            "stack": 16777216,
            "core": {"set": False, "infinite": False, "number": 0},
        }
    )
    assert spec["rlimits"] == {"NOFILE": 4096, "MEMLOCK": -1, "STACK": 16777216}


@pytest.mark.parametrize(
    ("rlimits", "words"),
    [({"bogus": 1}, "Bad rlimit name: bogus"), ({"nofile": "many"}, "rlimits.nofile"), ([1], "expected an object")],
)
def test_bad_rlimits_are_named(rlimits: object, words: str) -> None:
    with pytest.raises(JobDescError, match=words):
        _spec(rlimits=rlimits)
