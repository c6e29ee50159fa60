"""The pure parts of a step as the agent runs it (agent.localstep): which processes a task owns."""

from __future__ import annotations

from muster.agent.localstep import Task, task_members
from muster.agent.proctree import ProcInfo


def procs(*rows: tuple[int, int, int, int, int]) -> dict[int, ProcInfo]:
    """(pid, ppid, pgid, sid, start_ticks)"""
    return {r[0]: ProcInfo(r[0], r[1], r[2], r[3], 1000, r[4]) for r in rows}


def children_of(table: dict[int, ProcInfo]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for p in table.values():
        out.setdefault(p.ppid, []).append(p.pid)
    return out


def test_a_running_task_owns_its_session_its_group_and_their_descendants() -> None:
    table = procs(
        (100, 1, 100, 100, 5),  # the task
        (101, 100, 100, 100, 6),  # a child
        (102, 101, 102, 102, 7),  # a grandchild that setsid-ed away: found by descent
        (200, 1, 200, 200, 8),  # someone else
    )
    task = Task(task=0, local=0, pid=100, start_ticks=5)
    assert task_members(table, children_of(table), task) == {100, 101, 102}


def test_a_reaped_tasks_leftovers_are_found_by_session_and_a_stranger_with_its_pid_is_not() -> None:
    task = Task(task=0, local=0, pid=100, start_ticks=5, status=(0, 0))
    leftovers = procs((101, 1, 100, 100, 6), (300, 1, 300, 300, 9))
    assert task_members(leftovers, children_of(leftovers), task) == {101}
    reused = procs((100, 1, 100, 100, 50), (101, 100, 100, 100, 51))  # pid 100 given to another
    assert task_members(reused, children_of(reused), task) == set()


def test_a_steps_record_gives_back_what_a_restarted_agent_needs_and_an_old_record_its_pids() -> None:
    from muster.agent.localstep import Step, step_from_record, step_record
    from muster.agent.runstate import RunState

    step = Step(7, 1, 2, 1000, "node1", "secret", 30.0, interactive=True)
    step.tasks = [Task(task=4, local=0), Task(task=5, local=1)]
    step.stop("timeout")
    step.limit_at, step.stepd_pid, step.stepd_ticks = 1234.5, 4321, 99
    again, tasks = step_from_record(step_record(step), "node1")
    assert (again.job_id, again.attempt, again.step_id, again.uid, again.token) == (7, 1, 2, 1000, "secret")
    assert (again.kill_wait, again.interactive, again.terminated, again.limit_at) == (30.0, True, "timeout", 1234.5)
    assert (again.stepd_pid, again.stepd_ticks, again.state) == (4321, 99, RunState.TERMINATING)
    step.limit_at, step.limit_left = None, 12.5  # its job suspended: the limit's time left is kept
    again, _ = step_from_record(step_record(step), "node1")
    assert (again.limit_at, again.limit_left) == (None, 12.5)
    assert [(t.task, t.local, t.pid) for t in tasks] == [(4, 0, 0), (5, 1, 0)]  # pids: in the step's log
    old = {"job_id": 7, "attempt": 1, "step_id": 2, "tasks": [[4, 100, 5], [5, 101, None]]}
    _, tasks = step_from_record(old, "node1")
    assert [(t.task, t.pid, t.start_ticks) for t in tasks] == [(4, 100, 5), (5, 101, None)]
