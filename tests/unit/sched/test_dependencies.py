"""--dependency: met, wait, or never."""

from __future__ import annotations

import pytest

from muster.core.states import Reason
from muster.sched.testing import SchedHarness, job


def cluster() -> SchedHarness:
    return SchedHarness().gpu_nodes(2, gpus=8)


def test_afterok_waits_for_success_and_starts_after_it() -> None:
    h = cluster()
    a = h.run_job(job().time("10:00"))
    b = h.submit(job().depends(f"afterok:{a}"), at=1)
    assert h.schedule(at=2).reasons[b] is Reason.DEPENDENCY
    h.finish(a, "COMPLETED")
    assert h.started(h.schedule(at=3)) == [b]


def test_afterok_on_a_failed_job_is_never_satisfied() -> None:
    h = cluster()
    a = h.run_job(job().time("10:00"))
    b = h.submit(job().depends(f"afterok:{a}"), at=1)
    h.finish(a, "FAILED")
    d = h.schedule(at=3)
    assert d.reasons[b] is Reason.DEPENDENCY_NEVER and b in d.never


@pytest.mark.parametrize(
    "kind, state, started",
    [
        ("afterany", "FAILED", True),
        ("afternotok", "FAILED", True),
        ("afternotok", "COMPLETED", False),
        ("afterany", "CANCELLED", True),
    ],
)
def test_finished_dependencies(kind: str, state: str, started: bool) -> None:
    h = cluster()
    a = h.run_job(job().time("10:00"))
    b = h.submit(job().depends(f"{kind}:{a}"), at=1)
    h.finish(a, state)
    assert (b in h.started(h.schedule(at=2))) is started


def test_after_waits_for_the_start_plus_the_delay() -> None:
    h = cluster()
    blocker = h.run_job(job().gpus(8).nodes(2).time("10:00"))
    a = h.submit(job().gpus(8).nodes(2), at=1)
    b = h.submit(job().depends(f"after:{a}+1"), at=1)
    assert h.schedule(at=2).reasons[b] is Reason.DEPENDENCY  # a not started
    h.finish(blocker)
    assert h.started(h.schedule(at=100)) == [a]
    assert h.schedule(at=120).reasons[b] is Reason.DEPENDENCY
    assert h.started(h.schedule(at=160)) == [b]


def test_any_of_with_question_mark() -> None:
    h = cluster()
    a = h.run_job(job().time("10:00"))
    c = h.run_job(job().time("10:00"))
    b = h.submit(job().depends(f"afterok:{a}?afterok:{c}"), at=1)
    h.finish(a, "FAILED")
    assert h.schedule(at=2).reasons[b] is Reason.DEPENDENCY
    h.finish(c, "COMPLETED")
    assert h.started(h.schedule(at=3)) == [b]


def test_singleton_runs_one_job_of_a_name_and_user_at_a_time() -> None:
    h = cluster()
    a = h.submit(job().named("train").depends("singleton"))
    b = h.submit(job().named("train").depends("singleton"))
    other = h.submit(job().named("train").depends("singleton").user("bob"))
    d = h.schedule(at=0)
    assert h.started(d) == [a, other]
    assert d.reasons[b] is Reason.DEPENDENCY
    assert h.schedule(at=1).reasons[b] is Reason.DEPENDENCY
    h.finish(a)
    assert h.started(h.schedule(at=2)) == [b]


def test_malformed_dependencies_are_never_satisfied() -> None:
    h = cluster()
    j = h.submit(job().depends("afterwards:1"))
    assert h.schedule(at=0).reasons[j] is Reason.DEPENDENCY_NEVER


def test_a_dependency_on_a_job_that_left_memory_is_met() -> None:
    h = cluster()
    j = h.submit(job().depends("afterok:999"))
    assert h.started(h.schedule(at=0)) == [j]


# --- job arrays and unknown ids -------------------------------------------------------------


def test_afterok_on_an_array_waits_for_every_task() -> None:
    h = cluster()
    tasks = h.submit_array(job().time("10:00"), range(3))
    h.schedule(at=0)
    b = h.submit(job().depends(f"afterok:{tasks[0]}"), at=1)
    h.finish(tasks[0])
    h.finish(tasks[1])
    assert h.schedule(at=2).reasons[b] is Reason.DEPENDENCY
    h.finish(tasks[2])
    assert h.started(h.schedule(at=3)) == [b]


def test_afterok_on_one_array_task() -> None:
    h = cluster()
    tasks = h.submit_array(job().time("10:00"), [4, 7])
    h.schedule(at=0)
    b = h.submit(job().depends(f"afterok:{tasks[0]}_7"), at=1)
    h.finish(tasks[1])
    assert h.started(h.schedule(at=2)) == [b]


def test_afterok_on_an_array_with_a_failed_task_is_never_satisfied() -> None:
    h = cluster()
    tasks = h.submit_array(job().time("10:00"), range(2))
    h.schedule(at=0)
    b = h.submit(job().depends(f"afterok:{tasks[0]}"), at=1)
    h.finish(tasks[1], "FAILED")
    assert h.schedule(at=2).reasons[b] is Reason.DEPENDENCY_NEVER


def test_afternotok_on_an_array_waits_for_all_then_needs_one_failure() -> None:
    h = cluster()
    tasks = h.submit_array(job().time("10:00"), range(2))
    h.schedule(at=0)
    b = h.submit(job().depends(f"afternotok:{tasks[0]}"), at=1)
    h.finish(tasks[0], "FAILED")
    assert h.schedule(at=2).reasons[b] is Reason.DEPENDENCY
    h.finish(tasks[1], "COMPLETED")
    assert h.started(h.schedule(at=3)) == [b]


def test_aftercorr_pairs_tasks_of_two_arrays() -> None:
    h = cluster()
    first = h.submit_array(job().time("10:00"), range(3))
    h.schedule(at=0)
    second = h.submit_array(job().depends(f"aftercorr:{first[0]}"), range(3), at=1)
    h.finish(first[1])
    d = h.schedule(at=2)
    assert h.started(d) == [second[1]]
    assert d.reasons[second[0]] is Reason.DEPENDENCY
    h.finish(first[0], "FAILED")
    assert h.schedule(at=3).reasons[second[0]] is Reason.DEPENDENCY_NEVER


def test_a_dependency_on_an_id_unknown_at_submission_is_never_satisfied() -> None:
    h = cluster()
    b = h.submit(job().depends("afterok:999999"))
    h.pending[b].unknown_deps = [999999]
    d = h.schedule(at=0)
    assert d.reasons[b] is Reason.DEPENDENCY_NEVER and b in d.never


def test_a_purged_job_counts_as_met() -> None:
    h = cluster()
    b = h.submit(job().depends("afterok:5"))
    assert h.started(h.schedule(at=0)) == [b]


def test_malformed_dependencies_are_rejected_by_the_parser() -> None:
    from muster.sched.dependencies import parse_dependency

    for text in ("afterok", "afterok:", "after:1?afterok:2,afterany:3", "bogus:1", "afterok:1+5"):
        with pytest.raises(ValueError):
            parse_dependency(text)
    assert parse_dependency("aftercorr:12").terms[0].kind == "aftercorr"
    assert parse_dependency("afterok:12_3:14").terms[0].job_ids == ((12, 3, 0), (14, None, 0))


# --- array throttle (%N) ------------------------------------------------------------------


def test_an_array_throttle_caps_running_tasks() -> None:
    h = cluster()
    tasks = h.submit_array(job().time("10:00"), range(6), throttle=2)
    d = h.schedule(at=0)
    assert h.started(d) == tasks[:2]
    assert all(d.reasons[t] is Reason.JOB_ARRAY_TASK_LIMIT for t in tasks[2:])
    assert h.started(h.schedule(at=1)) == []
    h.finish(tasks[0])
    assert h.started(h.schedule(at=2)) == [tasks[2]]


def test_tasks_of_an_unthrottled_array_all_start() -> None:
    h = cluster()
    tasks = h.submit_array(job().time("10:00"), range(5))
    assert h.started(h.schedule(at=0)) == tasks
