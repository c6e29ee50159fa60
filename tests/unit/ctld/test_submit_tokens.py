"""A submission retried with the client's request token (client.failover) makes no second job,
before and after a restart or takeover (the tokens are loaded from the store)."""

from __future__ import annotations

import pathlib

from muster.core.clock import ManualClock
from muster.core.config import parse_config
from muster.core.job import JobSpec
from muster.ctld.controller import Controller, Identity
from muster.ctld.store import Store

CONF = """
ClusterName=t
NodeName=node[1-2] CPUs=8 RealMemory=8000
PartitionName=p Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
ALICE = Identity(1001, 1001, "alice", "alice", "h", admin=False)
BOB = Identity(1002, 1002, "bob", "bob", "h", admin=False)


def make(db: str) -> Controller:
    ctl = Controller(parse_config(CONF, "t.conf"), Store(db), ManualClock(1000.0))
    ctl.load()
    return ctl


def spec(name: str = "a", array: str | None = None) -> JobSpec:
    return JobSpec(name=name, script="#!/bin/sh\ntrue\n", workdir="/tmp", array=array)


def test_the_same_token_gives_the_same_job_and_a_new_token_a_new_one(tmp_path: pathlib.Path) -> None:
    ctl = make(str(tmp_path / "m.db"))
    first = ctl.queue.submit(spec(), ALICE, "tok1")
    assert ctl.queue.submit(spec(), ALICE, "tok1").job_id == first.job_id
    assert ctl.queue.submit(spec(), ALICE, "tok2").job_id == first.job_id + 1
    assert ctl.queue.submit(spec(), ALICE).job_id == first.job_id + 2  # no token: always new
    assert len(ctl.jobs) == 3


def test_a_token_is_the_callers_own(tmp_path: pathlib.Path) -> None:
    ctl = make(str(tmp_path / "m.db"))
    mine = ctl.queue.submit(spec(), ALICE, "tok")
    assert ctl.queue.submit(spec(), BOB, "tok").job_id != mine.job_id


def test_tokens_survive_a_restart_and_an_array_is_not_made_twice(tmp_path: pathlib.Path) -> None:
    db = str(tmp_path / "m.db")
    ctl = make(db)
    job = ctl.queue.submit(spec(array="0-3"), ALICE, "arr")
    ctl.store.close()
    again = make(db)  # the backup's load after a takeover takes the same path
    assert again.queue.submit(spec(array="0-3"), ALICE, "arr").job_id == job.job_id
    assert len(again.jobs) == 4


def test_a_heterogeneous_job_retried_with_its_token_is_not_made_twice(tmp_path: pathlib.Path) -> None:
    ctl = make(str(tmp_path / "m.db"))
    first = ctl.hets.submit([spec("a"), spec("b")], ALICE, "het")
    again = ctl.hets.submit([spec("a"), spec("b")], ALICE, "het")
    assert [j.job_id for j in again] == [j.job_id for j in first]
    assert len(ctl.jobs) == 2
