"""agent.rlimits: the submit shell's soft limits planned within this process's hard limits,
and set by ``spawn.become`` in a real forked child."""

from __future__ import annotations

import logging
import os
import resource
from pathlib import Path

import pytest

from muster.agent import rlimits, spawn

WORDS = spawn.Wording(session="setsid", identity="uid {uid}", chdir="chdir {cwd}", stdio="dup2", exec="exec {exe}")


def _lower_nofile() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(64, soft // 2)


def test_a_submitted_soft_limit_under_the_hard_limit_is_planned() -> None:
    want = _lower_nofile()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert rlimits.plan({"NOFILE": want}) == ((resource.RLIMIT_NOFILE, want, hard),)
    assert rlimits.plan({"NOFILE": soft}) == ()  # already so
    assert rlimits.plan(None) == () and rlimits.plan({}) == ()


def test_a_limit_above_the_hard_limit_keeps_the_nodes_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no finite open-files hard limit here")
    with caplog.at_level(logging.WARNING, logger="musterd"):
        assert rlimits.plan({"NOFILE": hard + 1}, "job 7") == ()
        assert rlimits.plan({"NOFILE": -1}, "job 7") == ()
    assert f"job 7: can't propagate RLIMIT_NOFILE of '{hard + 1}' from submit host" in caplog.text
    assert "RLIMIT_NOFILE of 'unlimited'" in caplog.text


def test_the_forked_child_runs_with_the_planned_limits(tmp_path: Path) -> None:
    want = _lower_nofile()
    out = tmp_path / "out.txt"
    spec = spawn.ChildSpec(
        exe="/bin/sh",
        argv=["/bin/sh", "-c", "echo $(ulimit -Sn) $(ulimit -Hn)"],
        env={"PATH": "/usr/bin:/bin"},
        uid=os.geteuid(),
        gid=os.getegid(),
        groups=None,
        umask=None,
        cwd=str(tmp_path),
        words=WORDS,
        stdin=spawn.Stream(path=os.devnull, label="stdin"),
        stdout=spawn.Stream(path=str(out), flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC, label="out"),
        stderr=spawn.Stream(same=True),
        rlimits=rlimits.plan({"NOFILE": want}),
    )
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(err_r)
        spawn.become(spec, err_w)
    os.close(err_w)
    report = os.read(err_r, 4096)
    os.close(err_r)
    _, status = os.waitpid(pid, 0)
    assert (os.waitstatus_to_exitcode(status), report) == (0, b"")
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert out.read_text().split() == [str(want), rlimits.text(hard)]
