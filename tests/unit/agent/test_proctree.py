"""Which processes belong to a job: sessions, groups, parent links and the job tag."""

from __future__ import annotations

import os

from muster.agent.proctree import (
    ProcInfo,
    job_members,
    parse_stat,
    process_start_ticks,
    read_proc,
    read_tag,
)

LEADER = 100


def _procs(*items: ProcInfo) -> dict[int, ProcInfo]:
    return {p.pid: p for p in items}


def test_the_session_and_group_of_the_leader_belong_to_the_job() -> None:
    procs = _procs(
        ProcInfo(LEADER, 1, LEADER, LEADER),
        ProcInfo(101, LEADER, LEADER, LEADER),
        ProcInfo(102, 101, 102, LEADER),  # setpgid: own group, same session
        ProcInfo(200, 1, 200, 200),  # someone else
    )
    assert job_members(procs, LEADER) == {100, 101, 102}


def test_a_setsid_escape_is_found_through_its_parent() -> None:
    procs = _procs(
        ProcInfo(LEADER, 1, LEADER, LEADER),
        ProcInfo(110, LEADER, 110, 110),  # setsid
        ProcInfo(111, 110, 110, 110),  # its child
    )
    assert job_members(procs, LEADER) == {100, 110, 111}


def test_an_orphaned_daemon_is_found_by_its_tag_only_for_the_jobs_user() -> None:
    procs = _procs(
        ProcInfo(LEADER, 1, LEADER, LEADER, uid=1000, job_tag="a.7.0"),
        ProcInfo(120, 1, 120, 120, uid=1000, job_tag="a.7.0"),
        ProcInfo(121, 120, 120, 120, uid=1000),
        ProcInfo(130, 1, 130, 130, uid=2000, job_tag="a.7.0"),  # another user forging the tag
        ProcInfo(140, 1, 140, 140, uid=1000, job_tag="a.8.0"),  # another job
        ProcInfo(150, 1, 150, 150, uid=1000, job_tag="a.7.1"),  # its rerun after a requeue
        ProcInfo(160, 1, 160, 160, uid=1000, job_tag="b.7.0"),  # another agent on this host
    )
    assert job_members(procs, LEADER, tag="a.7.0", uid=1000) == {100, 120, 121}


def test_the_agent_and_init_are_never_members() -> None:
    procs = _procs(
        ProcInfo(1, 0, 1, 1),
        ProcInfo(LEADER, 50, LEADER, LEADER),
        ProcInfo(50, 1, LEADER, LEADER),  # would match by group
    )
    assert job_members(procs, LEADER, exclude={50}) == {LEADER}


def test_a_dead_leader_still_names_its_session() -> None:
    procs = _procs(ProcInfo(150, 1, LEADER, LEADER))
    assert job_members(procs, LEADER) == {150}


def test_stat_lines_with_awkward_command_names_parse() -> None:
    line = "4242 (evil) name (x) S 1 4242 4242 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 987654 0 0"
    assert parse_stat(line) == (4242, "S", 1, 4242, 4242, 987654)


def test_the_live_proc_snapshot_contains_this_process() -> None:
    procs = read_proc()
    me = procs[os.getpid()]
    assert me.ppid == os.getppid() and me.pgid == os.getpgid(0) and me.sid == os.getsid(0)
    assert me.start_ticks == process_start_ticks(os.getpid())
    assert process_start_ticks(2**22 + 12345) is None


def test_tags_are_read_lazily_and_only_for_the_jobs_user() -> None:
    procs = _procs(
        ProcInfo(LEADER, 1, LEADER, LEADER, uid=1000),
        ProcInfo(101, LEADER, LEADER, LEADER, uid=1000),  # found by its group: not read
        ProcInfo(120, 1, 120, 120, uid=1000),
        ProcInfo(130, 1, 130, 130, uid=2000),
        ProcInfo(140, 2, 0, 0, uid=1000),  # a kernel thread
    )
    asked: list[int] = []

    def tag_of(pid: int) -> str | None:
        asked.append(pid)
        return "a.7.0" if pid == 120 else None

    assert job_members(procs, LEADER, tag="a.7.0", uid=1000, tag_of=tag_of) == {100, 101, 120}
    assert asked == [120]


def test_this_process_has_no_job_tag_unless_its_environment_says_so() -> None:
    expected = os.environ.get("MUSTER_JOB_TAG")
    assert read_tag(os.getpid()) == expected
    assert read_tag(2**22 + 12345) is None
