"""agent.zygote and agent.monitor: batch scripts started through the spawner process, for
real (a spawner, its monitors and their scripts are real processes)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from muster.agent import launcher
from muster.agent.zygote import MAX_FAILURES, Zygote


@pytest.fixture
def spawner() -> Iterator[Zygote]:
    z = Zygote()
    z.start()
    yield z
    if z.pid:
        os.kill(z.pid, signal.SIGKILL)
        os.waitpid(z.pid, 0)


def _plan(tmp_path: Path, script: str) -> launcher.LaunchPlan:
    path = tmp_path / "job.sh"
    path.write_text(script)
    path.chmod(0o755)
    out = str(tmp_path / "out.txt")
    return launcher.LaunchPlan(
        job_id=1,
        uid=os.geteuid(),
        gid=os.getegid(),
        groups=None,
        exe=str(path),
        argv=[str(path)],
        env={"PATH": "/usr/bin:/bin"},
        workdir=str(tmp_path),
        stdin=os.devnull,
        stdout=out,
        stderr=out,
        append=False,
        exit_path=str(tmp_path / "exit"),
    )


async def _run(plan: launcher.LaunchPlan, z: Zygote | None) -> tuple[launcher.Started, int | None, bool]:
    started = await launcher.start(plan, z)
    status = await started.status()
    alone = started.alone()
    if not alone:  # sweep what it left, as the supervisor would
        with open(f"/proc/{started.monitor}/task/{started.monitor}/children") as f:
            for pid in {int(p) for p in f.read().split()} - {started.pid}:
                os.kill(pid, signal.SIGKILL)
    await started.release()
    return started, status, alone


def test_the_spawner_forks_the_monitor_which_runs_the_script(tmp_path: Path, spawner: Zygote) -> None:
    started, status, alone = asyncio.run(_run(_plan(tmp_path, "#!/bin/sh\necho hello\nexit 3\n"), spawner))
    assert status is not None and os.waitstatus_to_exitcode(status) == 3
    assert alone and started.subreaper
    assert (tmp_path / "out.txt").read_text() == "hello\n"
    assert (tmp_path / "exit").read_text() == f"{status}\n"
    assert started.usage is not None
    with pytest.raises(ChildProcessError):  # the spawner's child, not ours
        os.waitpid(started.monitor, os.WNOHANG)


def test_a_script_that_leaves_a_process_behind_is_not_alone(tmp_path: Path, spawner: Zygote) -> None:
    script = "#!/bin/sh\nsetsid sh -c 'sleep 30 & echo $! > daemon.pid' &\nsleep 0.3\n"
    _, status, alone = asyncio.run(_run(_plan(tmp_path, script), spawner))
    assert status == 0 and not alone


def test_a_spawner_that_died_is_replaced_and_the_launch_forks_its_monitor_here(tmp_path: Path, spawner: Zygote) -> None:
    first = spawner.pid
    os.kill(first, signal.SIGKILL)
    os.waitpid(first, 0)
    _, status, _ = asyncio.run(_run(_plan(tmp_path, "#!/bin/sh\nexit 0\n"), spawner))
    assert status == 0 and spawner.failures == 1
    _, status, _ = asyncio.run(_run(_plan(tmp_path, "#!/bin/sh\nexit 0\n"), spawner))
    assert status == 0 and spawner.pid not in (0, first)  # a new spawner took this one


def test_without_a_working_spawner_monitors_are_forked_by_the_agent(tmp_path: Path) -> None:
    z = Zygote()
    z.failures = MAX_FAILURES
    started, status, alone = asyncio.run(_run(_plan(tmp_path, "#!/bin/sh\nexit 0\n"), z))
    assert status == 0 and alone and z.pid == 0
