"""sacct's ``-j`` with ``-s`` and with steps, as sacct(1) says: ``-j N -s CA`` looks from
Epoch 0 (its DEFAULT TIME WINDOW), so a job cancelled earlier is listed; ``-j N.S`` prints
step N.S's row alone, not the whole job; ``-s`` with ``-S`` and no ``-E`` asks for the
jobs in those states at that moment."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from muster.cli import sacct
from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.job import JobSpec
from muster.ctld.controller import Controller, Identity
from muster.ctld.records import Query, record_wire
from muster.ctld.store import Store

T0 = 1796227640.0
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
CONF = "ClusterName=t\nNodeName=n1 CPUs=4 RealMemory=1000\nPartitionName=p Nodes=ALL Default=YES\n"


def _req(argv: list[str]) -> sacct.Request:
    req = sacct.parse_args(argv, {}, T0)
    assert not isinstance(req, str)
    return req


def test_jobs_and_states_look_from_epoch_zero_to_now() -> None:
    req = _req(["-j", "12", "-s", "CA"])
    assert "start" not in req.params and req.params["end"] == T0
    assert req.params["state"] == ["CANCELLED"]


def test_states_with_a_start_and_no_end_ask_for_that_moment() -> None:
    req = _req(["-s", "R", "-S", "2026-12-01T10:00:00"])
    assert req.params["end"] == req.params["start"]


def test_a_job_cancelled_earlier_is_found_by_id_and_state(tmp_path: pathlib.Path) -> None:
    clock = ManualClock(T0)
    ctl = Controller(parse_config(CONF, "t.conf"), Store(str(tmp_path / "m.db")), clock)
    ctl.load()
    job = ctl.queue.submit(JobSpec(name="x", script="#!/bin/sh\n", min_nodes=1), ALICE)
    ctl.queue.cancel(job, ALICE)
    clock.advance(3600)
    assert ctl.accounting is not None
    req = _req(["-j", str(job.job_id), "-s", "CA"])
    query = Query(job_ids=[job.job_id], states=list(req.params["state"]), end=clock.now())  # type: ignore[call-overload]
    assert [r["job_id"] for r in ctl.accounting.jobs(query, clock.now())] == [job.job_id]
    # and not under another state
    other = Query(job_ids=[job.job_id], states=["COMPLETED"], end=clock.now())
    assert ctl.accounting.jobs(other, clock.now()) == []


def _record_with_steps() -> dict[str, Any]:
    from muster.core import lifecycle
    from muster.core.job import Job, NodeAlloc, Shape

    job = Job(
        job_id=40,
        spec=JobSpec(name="train", script="#!/bin/sh\n", account="root"),
        shape=Shape(nodes=1, cpus_per_node=1, mem_per_node=1000),
        user="root",
        uid=0,
        group="root",
        gid=0,
        submit_time=T0 - 1,
        partition="gpu",
    )
    lifecycle.start(job, [NodeAlloc("node1", 1, 1000, [])], T0)
    lifecycle.finish(job, 0, 0, T0 + 5)
    base = {"job_id": 40, "attempt": 0, "state": "COMPLETED", "start_time": T0, "end_time": T0 + 5}
    steps = [{**base, "step_id": i, "name": f"s{i}", "exit_code": 0, "signal": 0, "nodes": ["node1"]} for i in (0, 1)]
    return record_wire(job.to_dict(), T0 + 10, "t", None, steps)


@pytest.mark.parametrize(
    ("ids", "rows"),
    [
        ("40.0", ["40.0"]),
        ("40.1,40.batch", ["40.batch", "40.1"]),
        ("40,40.0", ["40", "40.batch", "40.0", "40.1"]),
        ("40", ["40", "40.batch", "40.0", "40.1"]),
    ],
)
def test_a_step_id_prints_only_that_step(monkeypatch: pytest.MonkeyPatch, ids: str, rows: list[str]) -> None:
    record = _record_with_steps()
    monkeypatch.setattr(sacct, "call", lambda *a, **k: {"jobs": [record]})
    lines = sacct.run(_req(["-j", ids, "--parsable2", "--noheader", "-o", "JobID"]))
    assert lines == rows


def test_steps_asked_ignores_a_job_also_named_whole() -> None:
    assert sacct.steps_asked(["7.0", "8", "8.1", "9.batch", "9.0"]) == {"7": {"0"}, "9": {"batch", "0"}}
