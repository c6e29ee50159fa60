"""srun's words for tasks that failed and for OOM kills in its step (``cli.stepverdict``)."""

from __future__ import annotations

from muster.cli.stepverdict import failure_lines, oom_line


def test_a_task_that_was_oom_killed_is_out_of_memory() -> None:
    failed = [(0, 0, 9), (1, 0, 9), (2, 1, 0)]
    assert failure_lines("node1", failed, {0}) == [
        "error: node1: task 0: Out Of Memory",
        "error: node1: task 1: Killed",
        "error: node1: task 2: Exited with exit code 1",
    ]
    assert failure_lines("node1", failed[:2]) == ["error: node1: tasks 0-1: Killed"]


def test_slurmstepds_oom_line() -> None:
    assert oom_line(1, "12.0") == (
        "slurmstepd: error: Detected 1 oom_kill event in StepId=12.0. Some of the step tasks have been OOM Killed.\n"
    )
    assert oom_line(3, "12.4").startswith("slurmstepd: error: Detected 3 oom_kill events in StepId=12.4. ")
