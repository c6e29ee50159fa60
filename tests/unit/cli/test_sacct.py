"""sacct's rows against Slurm 22.05's captures: jobs built with the real lifecycle, turned
into records by ``ctld.records`` (as the controller does) and printed by ``cli.sacct``."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from muster.cli import sacct
from muster.cli.common import CommandError
from muster.core import lifecycle
from muster.core.job import Job, JobSpec, NodeAlloc, Shape
from muster.core.lifecycle import JobEvent
from muster.ctld.records import record_wire

REF = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "slurm-22.05"
T0 = 1796227640.0


def _job(job_id: int, name: str, nodes: int = 1, gpus: int = 0, **kw: Any) -> Job:
    return Job(
        job_id=job_id,
        spec=JobSpec(name=name, script="#!/bin/sh\n", account="root"),
        shape=Shape(nodes=nodes, cpus_per_node=1, mem_per_node=1000, gpus_per_node=gpus),
        user="root",
        uid=0,
        group="root",
        gid=0,
        submit_time=T0 - 1,
        partition="gpu",
        **kw,
    )


def _run(job: Job, seconds: float = 0.0) -> Job:
    n, g = job.shape.nodes, job.shape.gpus_per_node
    lifecycle.start(job, [NodeAlloc(f"node{i + 1}", 1, 1000, list(range(g))) for i in range(n)], T0)
    return job


def _records() -> list[dict[str, Any]]:
    ok = _run(_job(8641, "ok"))
    lifecycle.finish(ok, 0, 0, T0)
    fail = _run(_job(8642, "fail"))
    lifecycle.finish(fail, 3, 0, T0)
    killed = _run(_job(8643, "killed"))
    lifecycle.finish(killed, 0, 9, T0)
    cancelled = _run(_job(8646, "cancelled"))
    lifecycle.end(cancelled, JobEvent.CANCEL, T0, completing=True)
    cancelled.cancelled_by = 0
    lifecycle.cleaned(cancelled, 0, 15)
    arr = []
    for task in (1, 2, 3):
        t = _run(_job(8646 + task, "arr", array_job_id=8645, array_task_id=task))
        lifecycle.finish(t, 0, 0, T0)
        arr.append(t)
    run = _run(_job(8653, "fmt_run", nodes=2, gpus=2))
    lifecycle.end(run, JobEvent.CANCEL, T0 + 4, completing=True)
    run.cancelled_by = 0
    lifecycle.cleaned(run, 0, 15)
    big = _job(8654, "fmt_big", nodes=8)
    lifecycle.end(big, JobEvent.CANCEL, T0 + 6, completing=False)
    big.cancelled_by = 0
    held = _job(8656, "fmt_held", hold="user")
    lifecycle.end(held, JobEvent.CANCEL, T0 + 6, completing=False)
    held.cancelled_by = 0
    step0 = {
        "job_id": 8653,
        "step_id": 0,
        "attempt": 0,
        "name": "sleep",
        "state": "CANCELLED",
        "start_time": T0,
        "end_time": T0 + 4,
        "exit_code": 0,
        "signal": 15,
        "nodes": ["node1", "node2"],
        "ncpus": 2,
        "gpus": 4,
        "mem": 2000,
        "ntasks": 2,
    }
    jobs = [ok, fail, killed, cancelled, *arr, run, big, held]
    return [record_wire(j.to_dict(), T0 + 10, "anchor", None, [step0] if j is run else []) for j in jobs]


def _reference(name: str) -> list[str]:
    text = (REF / name).read_text()
    body = text.split("--- stdout ---\n", 1)[1].split("--- stderr ---", 1)[0]
    # the pending array record (8655_[0-9%2]) is one merged row in Slurm; muster has none
    return [line for line in body.splitlines() if not line.startswith("8655_")]


def _render(argv: list[str]) -> list[str]:
    req = sacct.parse_args(argv, {}, T0 + 10)
    assert not isinstance(req, str)
    return sacct.render(_records(), req)


@pytest.mark.parametrize(
    ("capture", "argv"),
    [
        ("fmt_sacct_parsable2.txt", ["--parsable2", "-o", "JobID,JobName,State,ExitCode,Elapsed,AllocTRES"]),
        ("fmt_sacct_parsable.txt", ["--parsable", "-o", "JobID,JobName,State,ExitCode,Elapsed,AllocTRES"]),
        ("fmt_sacct_parsable2_X.txt", ["-X", "--parsable2", "-o", "JobID,JobName,State,ExitCode,Elapsed,AllocTRES"]),
        ("fmt_sacct_default.txt", ["-a"]),
    ],
)
def test_rows_match_slurms_capture(capture: str, argv: list[str]) -> None:
    assert _render(argv) == _reference(capture)


def test_wide_columns_are_right_justified_and_cut_with_a_plus() -> None:
    lines = _render(["-o", "JobID%20,JobName,State,ReqTRES%40,AllocTRES%60"])
    ref = {line.split()[0]: line for line in _reference("fmt_sacct_format_wide.txt")[2:]}
    ours = {line.split()[0]: line for line in lines[2:]}
    assert lines[0].startswith("               JobID    JobName      State")
    assert ours["8653"].endswith(
        "billing=2,cpu=2,gres/gpu=4,mem=2000M,no+                  billing=2,cpu=2,gres/gpu=4,mem=2000M,node=2 "
    )
    assert ref["8653"].endswith(ours["8653"][-102:])


def test_an_unknown_field_is_refused_with_slurms_words() -> None:
    with pytest.raises(CommandError) as e:
        sacct.parse_args(["-o", "NoSuchField"], {}, T0)
    expected = (REF / "fmt_err_sacct_bad_field.txt").read_text().split("--- stderr ---\n")[1].strip()
    assert f"sacct: error: {e.value.message}" == expected


def test_default_window_is_today_and_all_time_with_jobs() -> None:
    req = sacct.parse_args([], {}, T0)
    assert not isinstance(req, str)
    assert req.params["start"] == sacct.midnight(T0) and req.params["end"] == T0
    by_id = sacct.parse_args(["-j", "12"], {}, T0)
    assert not isinstance(by_id, str)
    assert "start" not in by_id.params and "end" not in by_id.params
    states = sacct.parse_args(["-s", "CA,F"], {}, T0)
    assert not isinstance(states, str)
    assert states.params["start"] == T0 and states.params["state"] == ["CANCELLED", "FAILED"]


@pytest.mark.parametrize(
    ("text", "when"),
    [
        ("1970-01-01-00:00:01", (1970, 1, 1, 0, 0, 1)),  # what torchx sends
        ("1970-01-01T00:00:01", (1970, 1, 1, 0, 0, 1)),
        ("01/02/26-03:04", (2026, 1, 2, 3, 4, 0)),
        ("010226-03:04:05", (2026, 1, 2, 3, 4, 5)),
    ],
)
def test_start_and_end_take_slurms_date_and_time_forms(text: str, when: tuple[int, ...]) -> None:
    import time

    req = sacct.parse_args(["-S", text, "-E", text], {}, T0)
    assert not isinstance(req, str)
    expected = time.mktime((*when, 0, 0, -1))
    assert req.params["start"] == expected and req.params["end"] == expected


def test_a_bad_start_time_is_one_clear_error() -> None:
    with pytest.raises(CommandError, match="Invalid time specification: 1970-13-01"):
        sacct.parse_args(["-S", "1970-13-01"], {}, T0)


def test_a_node_failure_shows_both_attempts_with_duplicates() -> None:
    job = _run(_job(8640, "nf", nodes=2))
    first = job.to_dict()
    first.update(state="NODE_FAIL", end_time=T0 + 34, attempt=0)
    lifecycle.end(job, JobEvent.NODE_FAIL, T0 + 34, completing=False)
    lifecycle.requeue(job, T0 + 34)
    lifecycle.start(job, [NodeAlloc("node3", 1, 1000, []), NodeAlloc("node4", 1, 1000, [])], T0 + 169)
    lifecycle.end(job, JobEvent.CANCEL, T0 + 173, completing=False)
    job.cancelled_by = 0
    recs = [record_wire(first, T0 + 200, "c"), record_wire(job.to_dict(), T0 + 200, "c")]
    req = sacct.parse_args(["-D", "-P", "-o", "JobID,State,ExitCode,NodeList"], {}, T0)
    assert not isinstance(req, str)
    assert sacct.render(recs, req) == [
        "JobID|State|ExitCode|NodeList",
        "8640|NODE_FAIL|0:0|node[1-2]",
        "8640.batch|CANCELLED|0:15|node1",
        "8640|CANCELLED by 0|0:0|node[3-4]",
        "8640.batch|CANCELLED|0:15|node3",
    ]


def test_state_takes_every_slurm_code_and_name_in_any_case() -> None:
    req = sacct.parse_args(["-s", "cd,CF,requeued,Rh,oom,se"], {}, T0)
    assert not isinstance(req, str)
    assert req.params["state"] == [
        "COMPLETED",
        "CONFIGURING",
        "REQUEUED",
        "REQUEUE_HOLD",
        "OUT_OF_MEMORY",
        "SPECIAL_EXIT",
    ]
    with pytest.raises(CommandError, match="Invalid state: XX"):
        sacct.parse_args(["-s", "XX"], {}, T0)


def _json_doc(records: list[dict[str, Any]]) -> dict[str, Any]:
    import json

    from muster.slurm.slurmjson import sacct_document

    doc = json.loads(sacct_document(records, ["sacct", "--json"]))
    assert doc["meta"]["plugin"]["data_parser"] == "data_parser/v0.0.40"
    assert (doc["errors"], doc["warnings"]) == ([], [])
    return doc


def test_json_jobs_in_data_parser_v0040_layout() -> None:
    jobs = {j["job_id"]: j for j in _json_doc(_records())["jobs"]}
    ok = jobs[8641]
    assert (ok["name"], ok["user"], ok["account"], ok["partition"], ok["nodes"]) == (
        "ok",
        "root",
        "root",
        "gpu",
        "node1",
    )
    assert ok["state"] == {"current": "COMPLETED", "reason": "None"}  # torchx reads a string
    assert ok["exit_code"]["status"] == ["SUCCESS"]
    assert ok["exit_code"]["return_code"] == {"set": True, "infinite": False, "number": 0}
    assert (ok["time"]["submission"], ok["time"]["start"], ok["time"]["end"]) == (T0 - 1, T0, T0)
    assert ok["time"]["limit"] == {"set": True, "infinite": True, "number": 0}
    assert ok["restart_cnt"] == 0
    assert ok["array"]["job_id"] == 0 and ok["array"]["task_id"]["set"] is False
    batch = ok["steps"][0]
    assert batch["step"] == {"id": "8641.batch", "name": "batch"}
    assert batch["state"] == ["COMPLETED"] and batch["exit_code"]["status"] == ["SUCCESS"]
    fail = jobs[8642]
    assert fail["state"]["current"] == "FAILED"
    assert fail["exit_code"]["status"] == ["ERROR"] and fail["exit_code"]["return_code"]["number"] == 3
    killed = jobs[8643]["steps"][0]["exit_code"]
    assert killed["status"] == ["SIGNALED"]
    assert killed["signal"] == {"id": {"set": True, "infinite": False, "number": 9}, "name": "KILL"}
    task = jobs[8647]
    assert task["array"]["job_id"] == 8645
    assert task["array"]["task_id"] == {"set": True, "infinite": False, "number": 1}
    run = jobs[8653]
    assert [s["step"]["id"] for s in run["steps"]] == ["8653.batch", "8653.0"]
    assert run["steps"][1]["step"]["name"] == "sleep" and run["steps"][1]["time"]["elapsed"] == 4
    assert run["time"]["elapsed"] == 4


def test_json_time_limit_is_minutes() -> None:
    job = _run(_job(8700, "limited", time_limit=600))
    lifecycle.finish(job, 0, 0, T0 + 30)
    (rec,) = _json_doc([record_wire(job.to_dict(), T0 + 40, "anchor")])["jobs"]
    assert rec["time"]["limit"] == {"set": True, "infinite": False, "number": 10}
    assert rec["time"]["elapsed"] == 30


def test_json_option_prints_the_v0040_document(monkeypatch, capsys) -> None:
    import json

    monkeypatch.setattr(sacct, "call", lambda prog, method, path: {"jobs": _records()[:1]})
    assert sacct.main(["--json", "-j", "8641"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [j["job_id"] for j in doc["jobs"]] == [8641]
    assert doc["jobs"][0]["state"]["current"] == "COMPLETED"
