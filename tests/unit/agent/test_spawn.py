"""agent.spawn: the one become-the-user sequence, run in real forked children."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from muster.agent import spawn

WORDS = spawn.Wording(session="setsid", identity="uid {uid}", chdir="chdir {cwd}", stdio="dup2", exec="exec {exe}")


def _run(spec: spawn.ChildSpec) -> tuple[int, bytes]:
    """Fork, become, and return (exit code, what the child reported)."""
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(err_r)
        spawn.become(spec, err_w)
    os.close(err_w)
    chunks = []
    while data := os.read(err_r, 4096):
        chunks.append(data)
    os.close(err_r)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks)


def _spec(tmp_path: Path, **kw: object) -> spawn.ChildSpec:
    out = str(tmp_path / "out.txt")
    base: dict[str, object] = dict(
        exe="/bin/sh",
        argv=["/bin/sh", "-c", "echo pid=$SLURM_TASK_PID cwd=$(pwd) umask=$(umask)"],
        env={"PATH": "/usr/bin:/bin"},
        uid=os.geteuid(),
        gid=os.getegid(),
        groups=None,
        umask=0o027,
        cwd=str(tmp_path),
        words=WORDS,
        stdin=spawn.Stream(path=os.devnull, label="stdin"),
        stdout=spawn.Stream(path=out, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC, label="out"),
        stderr=spawn.Stream(same=True),
    )
    base.update(kw)
    return spawn.ChildSpec(**base)  # type: ignore[arg-type]


def test_the_child_execs_in_its_directory_with_its_umask_and_its_pid(tmp_path: Path) -> None:
    code, report = _run(_spec(tmp_path))
    assert (code, report) == (0, b"")
    text = (tmp_path / "out.txt").read_text()
    assert f"cwd={tmp_path}" in text and "umask=0027" in text
    assert "pid=" in text and "pid= " not in text


def test_a_missing_working_directory_is_the_jobs_fault_and_exits_127(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    code, report = _run(_spec(tmp_path, cwd=missing))
    assert code == 127
    assert spawn.failure(report) == (spawn.JOB_FAULT, f"chdir {missing}: No such file or directory")


def test_the_fallback_directory_is_used_after_slurms_warning(tmp_path: Path) -> None:
    warn_r, warn_w = os.pipe()
    code, report = _run(
        _spec(tmp_path, cwd=str(tmp_path / "nope"), cwd_fallback=str(tmp_path), warn_fd=warn_w, close_after=(warn_w,))
    )
    os.close(warn_w)
    warning = os.read(warn_r, 4096).decode()
    os.close(warn_r)
    assert (code, report) == (0, b"")
    assert warning.startswith(f"slurmstepd: error: couldn't chdir to `{tmp_path / 'nope'}': No such file")
    assert f"going to {tmp_path} instead" in warning


def test_a_command_not_found_exits_with_the_errno_when_asked(tmp_path: Path) -> None:
    code, report = _run(
        _spec(tmp_path, exe="no-such-command-xyz", argv=["no-such-command-xyz"], search_path=True, failure_exit=None)
    )
    assert code == 2  # ENOENT, as Slurm's tasks exit
    assert spawn.failure(report) == (spawn.JOB_FAULT, "exec no-such-command-xyz: No such file or directory")


def test_a_failing_exec_of_the_agents_own_script_is_the_nodes_fault(tmp_path: Path) -> None:
    code, report = _run(_spec(tmp_path, exe=str(tmp_path / "gone"), exec_own=False))
    assert code == 127
    fault, text = spawn.failure(report) or ("", "")
    assert fault == spawn.NODE_FAULT and text.startswith("exec ")


def test_output_directories_are_made_when_asked(tmp_path: Path) -> None:
    out = str(tmp_path / "logs" / "deep" / "out.txt")
    stream = spawn.Stream(path=out, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC, label="out")
    code, _ = _run(_spec(tmp_path, stdout=stream, make_dirs=(out,)))
    assert code == 0 and os.path.exists(out)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0027", 0o27),
        ("777", 0o777),
        (None, None),
        ("", None),
        ("0999", None),
        ("1000", None),
        (18, None),
        ("abc", None),
    ],
)
def test_parse_umask(text: object, value: int | None) -> None:
    assert spawn.parse_umask(text) == value


def test_failure_reads_the_childs_line() -> None:
    assert spawn.failure(b"") is None
    assert spawn.failure(b"job|chdir /x: No such file") == ("job", "chdir /x: No such file")
    assert spawn.failure(b"weird|text") == (spawn.NODE_FAULT, "text")
