"""The supervisor's decisions on a manual clock, with /proc and kill(2) replaced by fakes."""

from __future__ import annotations

import asyncio
import signal
from types import SimpleNamespace
from typing import Any

import pytest

from muster.agent import launcher, proctree
from muster.agent.env import EnvContext
from muster.agent.launcher import LaunchError
from muster.agent.proctree import ProcInfo
from muster.agent.state import StateDir
from muster.agent.supervisor import LOST_STATUS, Supervisor, Tracked
from muster.core.clock import ManualClock

LEADER, CHILD, ESCAPED, OTHER = 100, 101, 102, 500


class World:
    """Fake processes: the job's leader, a child in its group, a child that left it with
    setsid, and a stranger."""

    def __init__(self) -> None:
        self.procs = {
            LEADER: ProcInfo(LEADER, 1, LEADER, LEADER, uid=1000),
            CHILD: ProcInfo(CHILD, LEADER, LEADER, LEADER, uid=1000),
            ESCAPED: ProcInfo(ESCAPED, LEADER, ESCAPED, ESCAPED, uid=1000),  # setsid
            OTHER: ProcInfo(OTHER, 1, OTHER, OTHER, uid=1000),
        }
        self.sent: list[tuple[int, int]] = []

    def read(self) -> dict[int, ProcInfo]:
        return dict(self.procs)

    def kill(self, pid: int, sig: int) -> None:
        self.sent.append((pid, sig))

    def killpg(self, pgid: int, sig: int) -> None:
        self.sent.append((-pgid, sig))

    def take(self) -> list[tuple[int, int]]:
        sent, self.sent = self.sent, []
        return sorted(sent)


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000_000.0)


@pytest.fixture
def sup(tmp_path: Any, clock: ManualClock, world: World) -> Supervisor:
    state = StateDir(str(tmp_path))
    state.create()
    return Supervisor(
        node="node1",
        state=state,
        clock=clock,
        env_ctx=EnvContext(node="node1", cluster="c", conf_path="/c"),
        kill_wait=30,
        proc_reader=world.read,
        tag_reader=lambda pid: None,
        kill=world.kill,
        killpg=world.killpg,
    )


def _track(sup: Supervisor, clock: ManualClock, time_limit: int | None = 60, signal_spec: str | None = None) -> Tracked:
    job = {
        "job_id": 5,
        "uid": 1000,
        "start_time": clock.now(),
        "time_limit": time_limit,
        "spec": {"signal": signal_spec},
    }
    t = Tracked(job_id=5, restart_count=0, job=job, uid=1000, kill_wait=30, started_at=clock.now())
    t.begin(LEADER, None)
    sup.jobs[5] = t
    return t


def test_nothing_happens_before_the_time_limit(sup: Supervisor, clock: ManualClock, world: World) -> None:
    _track(sup, clock)
    clock.advance(59.9)
    sup.check_limits()
    assert world.take() == []


def test_at_the_limit_the_job_gets_term_then_kill_after_kill_wait(
    sup: Supervisor, clock: ManualClock, world: World
) -> None:
    t = _track(sup, clock)
    clock.advance(60)
    sup.check_limits()
    assert t.terminated_by == "timeout"
    # the group at once, then the escaped process alone
    assert world.take() == [
        (-LEADER, signal.SIGTERM),
        (-LEADER, signal.SIGCONT),
        (ESCAPED, signal.SIGTERM),
        (ESCAPED, signal.SIGCONT),
    ]
    clock.advance(29)
    sup.check_limits()
    assert world.take() == []
    clock.advance(1)
    sup.check_limits()
    assert world.take() == [(-LEADER, signal.SIGKILL), (ESCAPED, signal.SIGKILL)]
    assert sup.state.jobs()[0]["terminated_by"] == "timeout"


def test_the_first_termination_reason_wins_and_a_shorter_grace_applies(
    sup: Supervisor, clock: ManualClock, world: World
) -> None:
    t = _track(sup, clock, time_limit=None)
    assert sup.terminate(5, "cancel", kill_wait=10)
    assert sup.terminate(5, "timeout", kill_wait=2)
    assert t.terminated_by == "cancel"
    world.take()
    clock.advance(2)
    sup.check_limits()
    assert (-LEADER, signal.SIGKILL) in world.take()


def test_a_batch_warning_goes_to_the_batch_shell_only(sup: Supervisor, clock: ManualClock, world: World) -> None:
    t = _track(sup, clock, signal_spec="B:USR1@30")
    clock.advance(29)
    sup.check_limits()
    assert world.take() == []
    clock.advance(1)
    sup.check_limits()
    assert world.take() == [(LEADER, signal.SIGUSR1)]
    assert t.warned
    sup.check_limits()
    assert world.take() == []  # once


def test_a_plain_warning_goes_to_everything_but_the_batch_shell(
    sup: Supervisor, clock: ManualClock, world: World
) -> None:
    _track(sup, clock, signal_spec="USR2@10")
    clock.advance(50)
    sup.check_limits()
    assert world.take() == [(CHILD, signal.SIGUSR2), (ESCAPED, signal.SIGUSR2)]


def test_a_new_time_limit_moves_the_deadline(sup: Supervisor, clock: ManualClock, world: World) -> None:
    t = _track(sup, clock)
    assert sup.update(5, 120)
    clock.advance(60)
    sup.check_limits()
    assert t.terminated_by is None and world.take() == []
    clock.advance(60)
    sup.check_limits()
    assert t.terminated_by == "timeout"


def test_signals_reach_the_tasks_or_only_the_batch_shell(sup: Supervisor, clock: ManualClock, world: World) -> None:
    # scancel --signal spares the batch shell (bash would die of USR1); -b signals it alone
    _track(sup, clock)
    assert sup.signal(5, signal.SIGUSR1)
    assert world.take() == [(CHILD, signal.SIGUSR1), (ESCAPED, signal.SIGUSR1)]
    assert sup.signal(5, signal.SIGHUP, batch_only=True)
    assert world.take() == [(LEADER, signal.SIGHUP)]
    assert not sup.signal(6, signal.SIGHUP)


def test_terminating_a_job_that_is_not_here_reports_its_end_once(sup: Supervisor, clock: ManualClock) -> None:
    assert not sup.terminate(9, "cancel", restart_count=1)
    ((key, report),) = sup.state.reports()
    assert key == "9.1"
    assert (report["terminated_by"], report["exit_code"], report["node"]) == ("cancel", 0, "node1")
    assert not sup.terminate(9, "cancel", restart_count=1)
    assert len(sup.state.reports()) == 1


def test_cleanup_of_a_job_that_is_not_here_says_nothing(sup: Supervisor) -> None:
    assert not sup.terminate(9, "cleanup", restart_count=0)
    assert not sup.terminate(9, "cancel")  # no attempt given: cannot report the right run
    assert sup.state.reports() == []


def test_a_job_terminated_before_its_launch_arrived_is_not_started(sup: Supervisor) -> None:
    sup.terminate(9, "cancel", restart_count=0)
    with pytest.raises(LaunchError, match="terminated before it started"):
        asyncio.run(sup.launch({"job_id": 9, "restart_count": 0, "uid": 0, "spec": {}}))


def test_a_launch_of_an_attempt_whose_end_was_delivered_is_answered_as_done_and_not_run(sup: Supervisor) -> None:
    # a deposed controller that resumes and sends the launch again, after the job ran here
    sup.state.drop_report(sup.state.save_report({"job_id": 9, "restart_count": 0, "exit_code": 0}))
    asyncio.run(sup.launch({"job_id": 9, "restart_count": 0, "uid": 0, "spec": {}}))
    assert sup.jobs == {} and sup.state.jobs() == [] and sup.state.reports() == []


def test_a_restarted_agent_reports_jobs_that_vanished_as_node_failures(sup: Supervisor, clock: ManualClock) -> None:
    sup.state.save_job(
        {
            "job_id": 11,
            "restart_count": 2,
            "pid": 2**22 + 77,
            "start_ticks": 5,
            "uid": 1000,
            "started_at": 999_000.0,
            "job": {"job_id": 11},
        }
    )
    sup.state.save_job({"job_id": 12, "restart_count": 0, "pid": None, "job": {"job_id": 12}})
    sup.state.save_job({"job_id": 13, "restart_count": 0, "pid": 1, "start_ticks": 1, "job": {"job_id": 13}})
    sup.state.save_report({"job_id": 13, "restart_count": 0, "exit_code": 0})  # already ended
    sup.recover()
    reports = {key: r for key, r in sup.state.reports()}
    assert set(reports) == {"11.2", "12.0", "13.0"}
    assert reports["11.2"]["terminated_by"] == "node_fail" and reports["11.2"]["reason"] == LOST_STATUS
    assert reports["11.2"]["start_time"] == 999_000.0
    assert reports["13.0"] == {"job_id": 13, "restart_count": 0, "exit_code": 0}
    assert sup.state.jobs() == [] and sup.jobs == {}


def test_running_lists_carry_the_attempt(sup: Supervisor, clock: ManualClock) -> None:
    t = _track(sup, clock)
    t.restart_count = 3
    assert sup.running() == [5] and sup.running_attempts() == [[5, 3]]


def test_a_job_with_steps_here_has_only_their_tasks_signalled(
    sup: Supervisor, clock: ManualClock, world: World
) -> None:
    seen: list[tuple[int, int]] = []
    sup.signal_steps = lambda job_id, sig: seen.append((job_id, sig)) or True
    _track(sup, clock, signal_spec="USR2@10")
    assert sup.signal(5, signal.SIGUSR2)
    assert seen == [(5, signal.SIGUSR2)] and world.take() == []
    clock.advance(51)
    sup.check_limits()
    assert seen[-1] == (5, signal.SIGUSR2) and world.take() == []


def test_a_terminate_that_overtakes_its_launch_ends_the_job_once_it_runs(
    sup: Supervisor, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller's launch and a cancel right after it travel at once; the cancel may
    reach the agent while the launch is still starting the job. The job must not run on."""

    async def start(plan: Any, spawner: Any = None) -> Any:
        assert sup.terminate(9, "cancel", restart_count=0) is False  # arrives mid-launch
        return SimpleNamespace(pid=LEADER)

    monkeypatch.setattr(launcher, "start", start)
    monkeypatch.setattr(proctree, "process_start_ticks", lambda pid: 1)
    monkeypatch.setattr(
        sup, "_plan", lambda job, tag: SimpleNamespace(uid=1000, stderr=None, exit_path=None, env={}, workdir="/")
    )

    async def launch() -> Tracked:
        await sup.launch({"job_id": 9, "restart_count": 0, "uid": 1000, "spec": {}})
        tracked = sup.jobs[9]
        assert tracked.task is not None
        tracked.task.cancel()
        return tracked

    tracked = asyncio.run(launch())
    assert tracked.terminated_by == "cancel" and tracked.kill_at is not None
    assert (-LEADER, signal.SIGTERM) in world.take()
