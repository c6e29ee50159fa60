"""A REST job description becomes the JobSpec request sbatch would build from the same
options (one table of rules), or a clear error naming the field."""

from __future__ import annotations

import pytest

from muster.rest.jobdesc import JobDescError, job_request

SCRIPT = "#!/bin/sh\ntrue\n"


def _req(**job: object) -> dict[str, object]:
    spec, _ = job_request({"script": SCRIPT, "current_working_directory": "/tmp", **job}, None, "root")
    return spec


def test_fields_map_to_sbatch_options() -> None:
    spec = _req(
        nodes="2-4",
        tres_per_node="gres/gpu:a100:2",
        time_limit={"set": True, "infinite": False, "number": 90},
        memory_per_node={"set": True, "number": 4096},
        tasks=8,
        partition="gpu",
        exclusive=["true"],
        required_nodes=["node[1-2]"],
        kill_warning_signal="USR1",
        kill_warning_delay={"set": True, "number": 60},
        environment=["A=1", "B=x=y"],
        requeue=False,
    )
    assert spec["min_nodes"] == 2 and spec["max_nodes"] == 4
    assert spec["gpus_per_node"] == 2 and spec["gpu_type"] == "a100"
    assert spec["time_limit"] == 90 * 60 and spec["mem_per_node"] == 4096 and spec["ntasks"] == 8
    assert spec["partitions"] == ["gpu"] and spec["exclusive"] is True
    assert spec["nodelist"] == ["node1", "node2"] and spec["signal"] == "USR1@60"
    assert spec["environment"]["A"] == "1" and spec["environment"]["B"] == "x=y"
    assert spec["requeue"] is False and spec["workdir"] == "/tmp" and spec["script"] == SCRIPT


def test_a_bare_node_count_is_accepted() -> None:
    assert _req(nodes=3)["min_nodes"] == 3


def test_infinite_time_limit_is_unlimited() -> None:
    assert _req(time_limit={"set": True, "infinite": True, "number": 0}).get("time_limit") is None


@pytest.mark.parametrize(
    ("job", "words"),
    [
        ({"nodes": "two"}, "not a valid node count"),
        ({"tasks": 0}, "Invalid numeric value"),
        ({"tres_per_node": "gres/fpga:1"}, "only gres/gpu"),
        ({"licenses": "x"}, "licenses: not supported"),
        ({"bogus": 1}, "bogus: not supported"),
        ({"time_limit": "1:00"}, "time_limit: expected a number"),
        ({"current_working_directory": "relative"}, "absolute"),
        ({"environment": ["NOEQUALS"]}, "NAME=value"),
        ({"user_id": "12345"}, "not the caller"),
        ({"script": "echo no shebang"}, "#!"),
    ],
)
def test_bad_fields_are_named(job: dict[str, object], words: str) -> None:
    with pytest.raises(JobDescError, match=words):
        _req(**job)


def test_ignored_fields_come_back_as_warnings() -> None:
    _, warnings = job_request({"script": SCRIPT, "wckey": "x"}, None, "root")
    assert warnings == ["wckey: not used by muster; ignored"]


def test_mail_type_and_mail_user_reach_the_spec() -> None:
    spec, warnings = job_request(
        {"script": SCRIPT, "mail_type": ["BEGIN", "TIME=50%", "INVALID_DEPENDENCY"], "mail_user": "a@b.c"}, None, "root"
    )
    assert spec["mail_type"] == ["BEGIN", "INVALID_DEPEND", "TIME_LIMIT_50"] and spec["mail_user"] == "a@b.c"
    assert warnings == []
    with pytest.raises(JobDescError, match="mail-type"):
        job_request({"script": SCRIPT, "mail_type": ["SOMETIMES"]}, None, "root")


def test_a_missing_script_is_refused() -> None:
    with pytest.raises(JobDescError, match="script"):
        job_request({"name": "x"}, None, "root")
