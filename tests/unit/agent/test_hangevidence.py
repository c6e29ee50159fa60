"""A hang's evidence on a node: read from /proc, SIGUSR1 only to processes that catch it
(real processes: a shell that does not, a Python reporter whose muster.progress does)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from muster.agent import hangevidence
from muster.agent.progress import ProgressWatch, prepare, save_evidence, stacks_path
from waiting import wait_for as _wait_for

REPORTER = """
import sys, time
from muster import progress
progress.step(1)
print("ready", flush=True)
time.sleep(60)
"""


def wait_for(check, what: str, timeout: float = 20.0):  # type: ignore[no-untyped-def]
    return _wait_for(check, timeout, interval=0.02, what=what)


def test_only_processes_that_catch_sigusr1_are_signalled_and_none_dies(tmp_path: pathlib.Path) -> None:
    path = prepare(str(tmp_path), 5, 0, -1, -1)
    env = {**os.environ, "MUSTER_PROGRESS": path}
    shell = subprocess.Popen(["/bin/sh", "-c", "sleep 60"])
    py = subprocess.Popen([sys.executable, "-c", REPORTER], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert py.stdout is not None and py.stdout.readline() == "ready\n"
        wait_for(lambda: (hangevidence.describe(shell.pid) or {}).get("state", "").startswith("S"), "the shell")
        wait_for(lambda: "sleep" in ((hangevidence.describe(py.pid) or {}).get("wchan") or ""), "time.sleep")
        found = {e["pid"]: e for e in hangevidence.collect([shell.pid, py.pid, 999_999_999], stacks_path(path))}
        assert set(found) == {shell.pid, py.pid}  # a pid that is gone is left out
        sh = found[shell.pid]
        assert sh["signalled"] is None and not sh["catches_usr1"] and "python" not in sh
        assert sh["state"] and sh["cmdline"].startswith("/bin/sh")
        p = found[py.pid]
        assert p["signalled"] == "SIGUSR1" and p["catches_usr1"]
        assert '<string>", line 6' in p["python"]  # its stack, in time.sleep(60)
        assert shell.poll() is None and py.poll() is None  # both alive
    finally:
        for proc in (shell, py):
            proc.kill()
            proc.wait()


def test_evidence_left_by_the_route_goes_with_the_next_report(tmp_path: pathlib.Path) -> None:
    root = str(tmp_path)
    prepare(root, 7, 2, -1, -1)
    watch = ProgressWatch(root)
    assert watch.poll(1e10, {(7, 2)}) == []
    save_evidence(root, 7, 2, [{"pid": 1, "state": "S"}])
    (r,) = watch.poll(1e10, {(7, 2)})
    assert (r["job_id"], r["attempt"], r["evidence"]) == (7, 2, [{"pid": 1, "state": "S"}])
    assert watch.poll(1e10, {(7, 2)}) == []  # sent once
    assert sorted(os.listdir(os.path.join(root, "progress"))) == ["7.2", "7.2.stacks"]
    # the attempt ends here: its files go, stacks included
    os.utime(os.path.join(root, "progress", "7.2"), (0, 0))
    assert watch.poll(1e10, set()) == []
    assert os.listdir(os.path.join(root, "progress")) == []


def test_sections_are_reported_while_any_rank_is_in_one(tmp_path: pathlib.Path) -> None:
    root = str(tmp_path)
    path = prepare(root, 3, 0, -1, -1)
    watch = ProgressWatch(root)
    with open(path, "a") as f:
        f.write("step 1 100\nbegin checkpoint 101\nbegin checkpoint 101.5\n")
    (r,) = watch.poll(1e10, {(3, 0)})
    assert (r["section"], r["section_time"]) == ("checkpoint", 101.5)
    with open(path, "a") as f:
        f.write("end checkpoint 150\n")  # one rank is done, the other still saves
    (r,) = watch.poll(1e10, {(3, 0)})
    assert r["section"] == "checkpoint"
    with open(path, "a") as f:
        f.write("end checkpoint 160\n")
    (r,) = watch.poll(1e10, {(3, 0)})
    assert (r["section"], r["section_time"]) == (None, 160.0)


def test_the_module_and_command_write_sections(tmp_path: pathlib.Path) -> None:
    path = prepare(str(tmp_path), 4, 0, -1, -1)
    env = {**os.environ, "MUSTER_PROGRESS": path}
    code = "from muster import progress\nwith progress.section('eval run'):\n    pass\n"
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    cmd = [sys.executable, "-m", "muster.progress"]
    subprocess.run([*cmd, "begin", "checkpoint"], env=env, check=True)
    subprocess.run([*cmd, "end", "checkpoint"], env=env, check=True)
    bad = subprocess.run([*cmd, "begin"], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "begin|end NAME" in bad.stderr
    words = [line.split()[:2] for line in open(path).read().splitlines()]
    assert words == [["begin", "eval_run"], ["end", "eval_run"], ["begin", "checkpoint"], ["end", "checkpoint"]]


def test_launchers_that_forward_signals_are_never_signalled() -> None:
    assert hangevidence.forwards({"name": "python3", "cmdline": "/v/bin/python -SP /v/bin/srun -N2 train.py"})
    assert hangevidence.forwards({"name": "mpirun", "cmdline": "mpirun -np 8 ./a.out"})
    assert not hangevidence.forwards({"name": "bash", "cmdline": "/bin/bash /spool/slurm_script"})
    assert not hangevidence.forwards({"name": "python", "cmdline": "python train.py --srun-like srun"})
