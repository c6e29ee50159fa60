"""Array tasks as squeue shows them: 123_4, merged pending rows 123_[5-9%2], -r, -j forms."""

from __future__ import annotations

from muster.cli import squeue
from muster.slurm.jobarrays import job_id_text, merge_array_rows


def _task(job_id: int, task: int, state: str = "PENDING", reason: str = "Resources", throttle: int = 0) -> dict:
    return {
        "job_id": job_id,
        "array_job_id": 10,
        "array_task_id": task,
        "array_throttle": throttle,
        "state": state,
        "reason": reason,
        "state_code": "PD" if state == "PENDING" else "R",
        "spec": {"name": "arr"},
        "partition": "gpu",
        "user": "alice",
    }


def test_pending_tasks_with_one_reason_merge_and_running_ones_stay_apart() -> None:
    jobs = [_task(10, 0, "RUNNING", "None", 2), _task(11, 1, throttle=2)]
    jobs += [_task(10 + i, i, reason="JobArrayTaskLimit", throttle=2) for i in range(2, 6)]
    rows = merge_array_rows(jobs)
    assert [job_id_text(r) for r in rows] == ["10_0", "10_1", "10_[2-5%2]"]


def test_a_plain_job_keeps_its_id() -> None:
    assert job_id_text({"job_id": 7}) == "7"
    assert merge_array_rows([{"job_id": 7, "state": "PENDING"}]) == [{"job_id": 7, "state": "PENDING"}]


def test_squeue_merges_unless_r_and_names_tasks_with_j() -> None:
    jobs = [_task(10 + i, i) for i in range(4)]
    req = squeue.parse_args(["-h", "-o", "%i %F %K %A"], {})
    rows = squeue.render(merge_array_rows(squeue.select(jobs, req)), req.cols, header=False)
    assert rows == ["10_[0-3] 10 0-3 10"]
    req = squeue.parse_args(["-h", "-r", "-o", "%i %F %K %A", "-j", "10_[1,3]"], {})
    assert req.expand
    rows = squeue.render(squeue.select(jobs, req), req.cols, header=False)
    assert rows == ["10_1 10 1 11", "10_3 10 3 13"]
    assert req.filters.query() == "?job_id=10_1,10_3"
