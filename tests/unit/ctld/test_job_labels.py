"""A job's name and comment and a step's name with a control character are refused by the
controller (submission, update, step creation), and nothing is recorded (core.labels)."""

from __future__ import annotations

import pytest

from muster.core.errors import InvalidRequest
from muster.core.job import JobSpec
from muster.core.steps import StepRequest

from .test_steps import ALICE, db, make, running_job

__all__ = ["db"]

FORGED = "mine\n9999 alice COMPLETED"


@pytest.mark.parametrize(("field", "what"), [("name", "job name"), ("comment", "comment")], ids=["name", "comment"])
def test_a_submission_with_a_control_character_is_refused(db: str, field: str, what: str) -> None:
    ctl, _book = make(db)
    with pytest.raises(InvalidRequest, match=rf"^Invalid {what}: control character '\\n' at position 5$"):
        ctl.queue.submit(JobSpec(script="#!/bin/sh\n", **{field: FORGED}), ALICE)  # type: ignore[arg-type]
    assert not ctl.jobs and ctl.next_job_id == 1
    job = ctl.queue.submit(JobSpec(script="#!/bin/sh\n", name="a|b c", comment="ünï|code"), ALICE)
    assert (job.spec.name, job.spec.comment) == ("a|b c", "ünï|code")


def test_an_update_with_a_control_character_is_refused_and_changes_nothing(db: str) -> None:
    ctl, _book = make(db)
    job = ctl.queue.submit(JobSpec(script="#!/bin/sh\n", name="kept", comment="kept too"), ALICE)
    for changes in ({"name": "x\ry"}, {"comment": "\x1b[2J"}, {"name": "fine", "comment": "bad\n"}):
        with pytest.raises(InvalidRequest, match="^Invalid (job name|comment): control character"):
            ctl.queue.update(job, ALICE, changes)
        stored = ctl.store.get_job(job.job_id)
        assert stored is not None
        assert (ctl.jobs[job.job_id].spec.name, ctl.jobs[job.job_id].spec.comment) == ("kept", "kept too")
        assert (stored.spec.name, stored.spec.comment) == ("kept", "kept too")


def test_a_step_named_with_a_control_character_is_refused(db: str) -> None:
    ctl, book = make(db)
    job_id = running_job(ctl, JobSpec(script="#!/bin/sh\n"), ["node1"])
    job = ctl.jobs[job_id]
    with pytest.raises(InvalidRequest, match="^Invalid step name: control character"):
        book.create(job, ALICE, StepRequest(ntasks=1), name="s\nforged")
    with pytest.raises(InvalidRequest, match="^Invalid step name: control character"):
        book.create(job, ALICE, StepRequest(ntasks=1), argv=["/bin/odd\u2028name"])
    step = book.create(job, ALICE, StepRequest(ntasks=1), argv=["/usr/bin/python3", "x"])
    assert step.step_id == 0 and step.name == "python3"  # type: ignore[union-attr]
