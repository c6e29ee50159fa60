"""``muster-adopt`` run as pam_exec runs it in sshd's PAM stack (as root, ``PAM_USER`` and
``PAM_TYPE=open_session`` set, its parent the session's process): a user with a running job
on the node has the session moved into the job's cgroup (the newest job, as
pam_slurm_adopt's default), so that what the session runs is in the job and dies with it;
a user without a job there is refused with exit 1; root is let through; the agent moves
processes only for a root caller. Needs root and a writable cgroup v1 freezer and memory
hierarchy (skipped otherwise)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from cgroupprobe import CGROUP, confined_v1_cluster, v1_unusable
from harness import Harness, ensure_user, process_running
from waiting import wait_for

pytestmark = pytest.mark.integration

HELPER = [sys.executable, "-m", "muster.cli.adopt"]
DENIED = "Access denied by muster-adopt: you have no active jobs on this node\n"


SKIP = v1_unusable()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Harness]:
    if SKIP:
        pytest.skip(SKIP)
    yield from confined_v1_cluster()


def _session(h: Harness, user: str, then: str, uid: int | None = None) -> subprocess.CompletedProcess[str]:
    """A session's process (``sh``) that runs the helper as pam_exec would, then ``then``."""
    helper = " ".join(HELPER)
    return h.run(
        ["sh", "-c", f"{helper}; rc=$?; {then}; exit $rc"],
        env={"PAM_USER": user, "PAM_TYPE": "open_session"},
        uid=uid,
    )


def _job_cgroup(job_id: int) -> str:
    return f"/job_{job_id}/step_extern/task_0"


def _batch_procs(h: Harness, job_id: int) -> str:
    with open(os.path.join(h.cluster.state_dir, "nodes", "node1", "instance")) as f:
        node = f"node1_{f.read().strip()}"
    path = os.path.join(CGROUP, "freezer", "muster", node, f"job_{job_id}", "step_batch", "task_0", "cgroup.procs")
    try:
        with open(path) as f:
            return f.read().strip()
    except FileNotFoundError:
        return ""


def _sleeper(h: Harness, uid: int) -> int:
    """A running job of ``uid``, its script running on the node (RUNNING in the controller
    comes first: the launch reaches the agent after the commit)."""
    job = h.sbatch("-n1", "-c1", "--mem=50M", "--wrap", "sleep 300", uid=uid)
    h.wait_state(job, "RUNNING")
    wait_for(lambda: _batch_procs(h, job), 60, what=f"job {job}'s script on the node")
    return job


def test_a_session_of_the_jobs_user_lands_in_its_newest_job(cluster: Harness) -> None:
    h = cluster
    uid = ensure_user("mustertest")
    older = _sleeper(h, uid)
    newer = _sleeper(h, uid)
    try:
        out = _session(h, "mustertest", "cat /proc/self/cgroup")
        assert out.returncode == 0, out.stdout + out.stderr
        lines = out.stdout.splitlines()
        freezer = next(line for line in lines if ":freezer:" in line)
        memory = next(line for line in lines if ":memory:" in line)
        assert freezer.endswith(_job_cgroup(newer)) and memory.endswith(_job_cgroup(newer)), lines
        assert f"/job_{older}/" not in out.stdout
    finally:
        h.run(["scancel", str(older), str(newer)])
    h.wait_job(older)
    h.wait_job(newer)


def test_the_adopted_session_ends_with_its_job(cluster: Harness) -> None:
    h = cluster
    uid = ensure_user("mustertest")
    job = _sleeper(h, uid)
    session = subprocess.Popen(
        ["sh", "-c", " ".join(HELPER) + " && exec sleep 300"],
        env={**h.env, "PAM_USER": "mustertest", "PAM_TYPE": "open_session"},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:

        def adopted() -> bool:
            with open(f"/proc/{session.pid}/cgroup") as f:
                return _job_cgroup(job) in f.read()

        wait_for(adopted, 30, what="the session in the job's cgroup")
        assert h.run(["scancel", str(job)]).returncode == 0
        assert session.wait(60) != 0  # killed with the job's cgroup
        assert not process_running(session.pid)
    finally:
        if session.poll() is None:
            session.kill()
            session.wait()
    h.wait_job(job)


def test_a_user_without_a_job_here_is_refused_and_root_let_through(cluster: Harness) -> None:
    h = cluster
    ensure_user("mustertest2")
    out = _session(h, "mustertest2", "cat /proc/self/cgroup")
    assert out.returncode == 1 and out.stdout.startswith(DENIED), out.stdout + out.stderr
    assert "/muster/" not in out.stdout  # not moved anywhere
    out = _session(h, "root", "true")
    assert out.returncode == 0 and out.stdout == "", out.stdout
    # pam_exec's other phases do nothing
    closing = h.run(HELPER, env={"PAM_USER": "mustertest2", "PAM_TYPE": "close_session"})
    assert closing.returncode == 0 and closing.stdout == ""


def test_only_root_may_have_a_process_adopted(cluster: Harness) -> None:
    h = cluster
    uid = ensure_user("mustertest")
    job = _sleeper(h, uid)
    try:
        out = h.run(HELPER, env={"PAM_USER": "mustertest", "PAM_TYPE": "open_session"}, uid=uid)
        assert out.returncode == 1, out.stdout
        assert "only root may have a process adopted into a job" in out.stdout, out.stdout
    finally:
        h.run(["scancel", str(job)])
    h.wait_job(job)
