"""agent.jobcontainer: job_container.conf read with Slurm's keys, a job's directories made
and removed, and the binds made in a real forked child (as root)."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from muster.agent import jobcontainer
from muster.agent.jobcontainer import JobContainer, JobContainerError, parse_conf


def test_the_conf_is_read_with_slurms_keys_and_node_lines() -> None:
    text = "# the jobs' /tmp\nBasePath=/scratch/%n AutoBasePath=true\nNodeName=gpu[1-2] BasePath=/nvme/jobs\n"
    assert parse_conf(text, "jc.conf", "cpu1") == JobContainer("/scratch/cpu1", True, ("/tmp", "/dev/shm"))
    assert parse_conf(text, "jc.conf", "gpu2") == JobContainer("/nvme/jobs", True, ("/tmp", "/dev/shm"))
    assert parse_conf("BasePath=/b\nDirs=/tmp\n", "jc.conf", "n").dirs == ("/tmp",)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "BasePath (an absolute path) is required"),
        ("BasePath=relative\n", "BasePath (an absolute path) is required"),
        ("BasePath=/b InitScript=/x\n", "jc.conf:1: 'initscript' is not supported"),
        ("BasePath=/b\nAutoBasePath=maybe\n", "AutoBasePath=maybe"),
        ("BasePath=/b\nDirs=/tmp,../x\n", "Dirs: '../x' is not an absolute directory"),
        ("BasePath=/b\nbogus\n", "jc.conf:2: expected Key=Value"),
    ],
)
def test_a_bad_conf_names_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(JobContainerError, match=re.escape(words)):
        parse_conf(text, "jc.conf", "n")


def test_a_jobs_directories_are_made_private_and_removed(tmp_path: Path) -> None:
    jc = JobContainer(str(tmp_path / "base"), auto=True, dirs=("/tmp",))
    binds = jc.prepare(42)
    assert binds == ((str(tmp_path / "base" / "42" / "_tmp"), "/tmp"),)
    assert stat.S_IMODE(os.stat(tmp_path / "base" / "42").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(binds[0][0]).st_mode) == 0o1777
    assert jc.prepare(42) == binds  # the job's other processes share them
    jc.remove(42)
    assert not (tmp_path / "base" / "42").exists()
    with pytest.raises(OSError, match="AutoBasePath=false"):
        JobContainer(str(tmp_path / "missing")).prepare(1)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount namespaces)")
def test_the_child_sees_the_jobs_directories_even_when_they_live_under_one_it_hides(tmp_path: Path) -> None:
    hidden, other = tmp_path / "hidden", tmp_path / "other"
    hidden.mkdir()
    other.mkdir()
    (hidden / "machine-file").write_text("x")
    # BasePath under the first directory bound: its name no longer resolves after that bind
    jc = JobContainer(str(hidden / "base"), auto=True, dirs=(str(hidden), str(other)))
    binds = jc.prepare(7)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            jobcontainer.enter(binds)
            ok = not (hidden / "machine-file").exists()
            (hidden / "a").write_text("in hidden")
            (other / "b").write_text("in other")
            os._exit(0 if ok else 3)
        except BaseException:  # noqa: BLE001
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert (Path(binds[0][0]) / "a").read_text() == "in hidden"
    assert (Path(binds[1][0]) / "b").read_text() == "in other"
    assert not (hidden / "a").exists() and not (other / "b").exists()  # the machine's untouched
    jc.remove(7)
