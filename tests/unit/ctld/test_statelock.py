"""One controller per state directory (``ctld.statelock``): the lock is exclusive across
processes, says who holds it, goes with its holder, and the directory is private."""

from __future__ import annotations

import os
import pathlib
import stat
import subprocess
import sys

import pytest

from muster.ctld.statelock import StateLocked, held, hold, lock_path, private_dir

HOLDER = """
import sys, time
from muster.ctld.statelock import hold
hold(sys.argv[1], 0, "musterctld")
print("held", flush=True)
sys.stdin.read()
"""


def test_a_second_process_is_refused_with_the_holders_pid_until_the_holder_ends(tmp_path: pathlib.Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        with pytest.raises(StateLocked) as refused:
            hold(str(tmp_path))
        assert refused.value.holder == f"musterctld (pid {proc.pid})"
        assert str(refused.value).startswith(f"musterctld (pid {proc.pid}) holds {lock_path(str(tmp_path))}")
        with pytest.raises(StateLocked), held(str(tmp_path), "muster-restore"):
            pass
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # the holder ends: the kernel lets the lock go
        proc.wait()
    fd = hold(str(tmp_path))
    try:
        assert stat.S_IMODE(os.fstat(fd).st_mode) == 0o600
        with open(lock_path(str(tmp_path))) as f:
            assert f.read() == f"{os.getpid()} musterctld\n"
    finally:
        os.close(fd)


def test_each_controller_of_several_has_its_own_lock(tmp_path: pathlib.Path) -> None:
    first, backup = hold(str(tmp_path), 0), hold(str(tmp_path), 1)
    try:
        assert lock_path(str(tmp_path), 1).endswith("musterctld.lock.1")
    finally:
        os.close(first)
        os.close(backup)


def test_the_state_directory_is_0700_or_0711_with_what_users_reach_in_it(tmp_path: pathlib.Path) -> None:
    old = os.umask(0)
    try:
        inner = tmp_path / "a" / "state"
        assert private_dir(str(inner), [str(tmp_path / "elsewhere.sock"), str(tmp_path / "a")]) == 0o700
        assert stat.S_IMODE(inner.stat().st_mode) == 0o700
        assert private_dir(str(inner), [str(inner / "musterctld.sock")]) == 0o711
        assert stat.S_IMODE(inner.stat().st_mode) == 0o711
        # an agent's spool under it (SlurmdSpoolDir=<state>/nodes/%n): its users reach it too
        assert private_dir(str(inner), ["", str(inner / "nodes" / "")]) == 0o711
        assert private_dir(str(inner), []) == 0o700
    finally:
        os.umask(old)
