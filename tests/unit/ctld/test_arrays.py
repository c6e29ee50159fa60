"""Job arrays and dependencies in the controller: tasks, references, refusals, cancels."""

from __future__ import annotations

import pathlib

import pytest

from muster.core.arrays import parse_job_ref
from muster.core.errors import InvalidRequest
from muster.core.job import JobSpec
from muster.core.states import JobState, Reason
from muster.ctld.view import build_snapshot

from .test_controller import ALICE, BOB, Terminate, make, register_all, start


@pytest.fixture
def db(tmp_path: pathlib.Path) -> str:
    return str(tmp_path / "muster.db")


def spec(**kw: object) -> JobSpec:
    return JobSpec(name="a", script="#!/bin/sh\ntrue\n", workdir="/tmp", **kw)  # type: ignore[arg-type]


def test_an_array_is_one_job_per_task_with_consecutive_ids(db: str) -> None:
    ctl = make(db)
    first = ctl.queue.submit(spec(array="0-15:4%2"), ALICE)
    tasks = [ctl.jobs[first.job_id + k] for k in range(4)]
    assert [(t.array_job_id, t.array_task_id) for t in tasks] == [(first.job_id, i) for i in (0, 4, 8, 12)]
    assert {
        (t.array_task_count, t.array_task_min, t.array_task_max, t.array_task_step, t.array_throttle) for t in tasks
    } == {(4, 0, 12, 4, 2)}
    assert ctl.next_job_id == first.job_id + 4
    # durable: a restarted controller has every task and the array index
    again = make(db)
    assert [j.array_task_id for j in again.queue.resolve(parse_job_ref(str(first.job_id)))] == [0, 4, 8, 12]


def test_references_name_tasks_and_whole_arrays(db: str) -> None:
    ctl = make(db)
    a = ctl.queue.submit(spec(array="1-5"), ALICE).job_id
    plain = ctl.queue.submit(spec(), ALICE).job_id
    ids = lambda text: [j.job_id for j in ctl.queue.resolve(parse_job_ref(text))]  # noqa: E731
    assert ids(str(a)) == [a, a + 1, a + 2, a + 3, a + 4]
    assert ids(f"{a}_3") == [a + 2]
    assert ids(f"{a}_[1-2,5]") == [a, a + 1, a + 4]
    assert ids(f"{a}_9") == [] and ids(f"{plain}_1") == []
    assert ids(str(a + 1)) == [a + 1]  # a task's own id names the task alone
    assert ids(str(plain)) == [plain]


def test_max_array_size_and_bad_dependencies_are_refused_before_anything_is_kept(db: str) -> None:
    ctl = make(db)
    with pytest.raises(InvalidRequest, match="Invalid job array specification"):
        ctl.queue.submit(spec(array="1-5000"), ALICE)
    with pytest.raises(InvalidRequest, match="Job dependency problem"):
        ctl.queue.submit(spec(dependency="afterok"), ALICE)
    assert not ctl.jobs and ctl.next_job_id == 1


@pytest.mark.parametrize("kind", ["afterok", "afterany", "afternotok", "aftercorr", "after"])
def test_a_dependency_on_a_job_that_never_existed_is_refused(db: str, kind: str) -> None:
    ctl = make(db)
    known = ctl.queue.submit(spec(), ALICE).job_id
    for text in (f"{kind}:999999", f"{kind}:{known}:999999", f"afterany:{known}?{kind}:999999"):
        with pytest.raises(InvalidRequest, match="^Job dependency problem$"):
            ctl.queue.submit(spec(dependency=text), ALICE)
    assert sorted(ctl.jobs) == [known] and ctl.next_job_id == known + 1
    job = ctl.queue.submit(spec(dependency=f"afterok:{known}?afterany:{known}_2"), ALICE)
    assert job.unknown_deps == []


def test_cancel_of_a_whole_array_is_one_transaction_and_checks_owners(db: str) -> None:
    ctl = make(db)
    register_all(ctl)
    a = ctl.queue.submit(spec(array="0-2"), ALICE).job_id
    start(ctl, a, ["node1"])
    actions, results = ctl.queue.cancel_all(ctl.queue.resolve(parse_job_ref(str(a))), ALICE)
    assert [type(x) for x in actions] == [Terminate]
    assert [r["ok"] for r in results] == [True, True, True]
    assert [ctl.jobs[a + k].state for k in range(3)] == [JobState.CANCELLED] * 3
    b = ctl.queue.submit(spec(), ALICE).job_id
    _, results = ctl.queue.cancel_all([ctl.jobs[b]], BOB)
    assert results[0]["code"] == "permission_denied" and ctl.jobs[b].state is JobState.PENDING


def test_kill_on_invalid_dep_cancels_only_jobs_that_asked(db: str) -> None:
    ctl = make(db)
    base = ctl.queue.submit(spec(), ALICE).job_id
    killed = ctl.queue.submit(spec(dependency=f"afterok:{base}", kill_on_invalid_dep=True), ALICE).job_id
    kept = ctl.queue.submit(spec(dependency=f"afterok:{base}"), ALICE).job_id
    reasons = {killed: Reason.DEPENDENCY_NEVER, kept: Reason.DEPENDENCY_NEVER}
    assert ctl.queue.kill_invalid_dependencies(reasons) == 1
    assert ctl.jobs[killed].state is JobState.CANCELLED
    assert ctl.jobs[killed].reason is Reason.DEPENDENCY_NEVER
    assert ctl.jobs[kept].state is JobState.PENDING


def test_the_snapshot_carries_the_array_index(db: str) -> None:
    ctl = make(db)
    a = ctl.queue.submit(spec(array="3,7"), ALICE).job_id
    assert build_snapshot(ctl).arrays == {a: {3: a, 7: a + 1}}


def test_array_throttle_can_be_updated(db: str) -> None:
    ctl = make(db)
    a = ctl.queue.submit(spec(array="0-3%1"), ALICE).job_id
    for job in ctl.queue.resolve(parse_job_ref(str(a))):
        ctl.queue.update(job, ALICE, {"array_throttle": 3})
    assert {ctl.jobs[a + k].array_throttle for k in range(4)} == {3}
    plain = ctl.queue.submit(spec(), ALICE)
    with pytest.raises(InvalidRequest):
        ctl.queue.update(plain, ALICE, {"array_throttle": 3})
