"""``scontrol suspend`` / ``scontrol resume`` on a node that tracks jobs by cgroup v1: the
job's freezer cgroup really FROZEN and THAWED, its state SUSPENDED in squeue (``S``),
``scontrol show job``/``step`` and sacct, its suspended time not counted against its time
limit, through a restart of its agent and of the controller; refusals worded as Slurm's;
``scancel --signal=STOP``/``CONT`` shown STOPPED; the node's containment shown by
``scontrol show node`` and ``sinfo %K``; and on a node without cgroups, suspend by SIGSTOP
of every process of the job. Needs root and a writable cgroup v1 freezer and memory
hierarchy (skipped otherwise; the node without cgroups needs root only)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from cgroupprobe import CGROUP, CONFINED, confined_v1_cluster, v1_unusable
from harness import Harness, ensure_user, process_running
from muster.cluster.local import ClusterShape
from waiting import wait_for

pytestmark = pytest.mark.integration

# ticks once a quarter second until killed; its srun step does the same into another file
TICKER = "#!/bin/sh\nsrun -n1 sh -c 'while :; do echo t >> step-$SLURM_JOB_ID; sleep 0.25; done' &\nwhile :; do echo t >> tick-$SLURM_JOB_ID; sleep 0.25; done\n"


SKIP = v1_unusable()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Harness]:
    if SKIP:
        pytest.skip(SKIP)
    yield from confined_v1_cluster()


def _freezer(h: Harness, job_id: int) -> str:
    with open(os.path.join(h.cluster.state_dir, "nodes", "node1", "instance")) as f:
        node = f"node1_{f.read().strip()}"
    with open(os.path.join(CGROUP, "freezer", "muster", node, f"job_{job_id}", "freezer.state")) as f:
        return f.read().strip()


def _step_states(h: Harness, job_id: int) -> set[str]:
    """The /proc states of the processes of the job's step 0 (its task and what it runs)."""
    with open(os.path.join(h.cluster.state_dir, "nodes", "node1", "instance")) as f:
        node = f"node1_{f.read().strip()}"
    with open(
        os.path.join(CGROUP, "freezer", "muster", node, f"job_{job_id}", "step_0", "task_0", "cgroup.procs")
    ) as f:
        pids = [int(p) for p in f.read().split()]
    states = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                states.add(f.read().rsplit(")", 1)[1].split()[0])
        except FileNotFoundError:
            continue
    return states


def _wait_freezer(h: Harness, job_id: int, state: str) -> None:
    wait_for(lambda: _freezer(h, job_id) == state, 30, what=f"job {job_id}'s cgroup {state}")


def _ticks(h: Harness, name: str) -> int:
    try:
        return h.read(name).count("t")
    except FileNotFoundError:
        return 0


def _running_with_step(h: Harness, *args: str) -> int:
    uid = ensure_user("mustertest")
    job = h.sbatch("-n1", "-c1", "--mem=100M", *args, uid=uid, input=TICKER)
    h.wait_state(job, "RUNNING")
    wait_for(lambda: _ticks(h, f"tick-{job}") > 0 and _ticks(h, f"step-{job}") > 0, 60, what="both to tick")
    return job


def _scontrol(h: Harness, *words: str, uid: int | None = None):  # type: ignore[no-untyped-def]
    return h.run(["scontrol", *words], uid=uid)


def test_the_nodes_containment_is_shown(cluster: Harness) -> None:
    h = cluster
    show = _scontrol(h, "show", "node", "node1").stdout
    assert "Containment=cgroup/v1:freezer,memory\n" in show, show
    out = h.run(["sinfo", "-N", "-h", "-o", "%N %K"]).stdout.split()
    assert out == ["node1", "cgroup/v1:freezer,memory"], out


def test_suspend_freezes_the_job_and_resume_thaws_it(cluster: Harness) -> None:
    h = cluster
    job = _running_with_step(h)
    try:
        out = _scontrol(h, "suspend", str(job))
        assert out.returncode == 0 and not out.stderr, out.stderr
        _wait_freezer(h, job, "FROZEN")  # the controller committed it, then told the node
        assert h.job(job)["state"] == "SUSPENDED"
        assert h.run(["squeue", "-j", str(job), "-h", "-o", "%t"]).stdout.strip() == "S"
        show = _scontrol(h, "show", "job", str(job)).stdout
        assert "JobState=SUSPENDED " in show and "SuspendTime=None" not in show, show
        steps = h.run(["squeue", "-s", "-j", str(job), "-h", "-o", "%i %T"]).stdout.splitlines()
        assert f"{job}.0 SUSPENDED" in steps and f"{job}.batch SUSPENDED" in steps, steps
        assert "State=SUSPENDED" in _scontrol(h, "show", "step", f"{job}.0").stdout
        acct = h.run(["sacct", "-j", str(job), "-X", "-n", "-P", "-o", "State"]).stdout.strip()
        assert acct == "SUSPENDED", acct
        listed = h.run(["sacct", "-s", "S", "-X", "-n", "-P", "-o", "JobID"]).stdout.split()
        assert str(job) in listed, listed
        # Frozen: neither the script nor its step's task writes anything more.
        ticks, step_ticks = _ticks(h, f"tick-{job}"), _ticks(h, f"step-{job}")
        h.wait_passes(3)
        assert (_ticks(h, f"tick-{job}"), _ticks(h, f"step-{job}")) == (ticks, step_ticks)

        again = _scontrol(h, "suspend", str(job))
        assert again.returncode == 1 and again.stderr == f"Job is not running for job {job}\n", again.stderr

        out = _scontrol(h, "resume", str(job))
        assert out.returncode == 0 and not out.stderr, out.stderr
        _wait_freezer(h, job, "THAWED")
        assert h.job(job)["state"] == "RUNNING"
        wait_for(lambda: _ticks(h, f"tick-{job}") > ticks and _ticks(h, f"step-{job}") > step_ticks, 60, what="ticks")
        again = _scontrol(h, "resume", str(job))
        assert again.returncode == 1 and again.stderr == f"Job is not suspended for job {job}\n", again.stderr
    finally:
        h.run(["scancel", str(job)])
    # a job cancelled while suspended ends: suspend once more, then cancel
    job2 = _running_with_step(h)
    assert _scontrol(h, "suspend", str(job2)).returncode == 0
    assert h.run(["scancel", str(job2)]).returncode == 0
    assert h.wait_job(job2)["state"] == "CANCELLED"


def test_a_salloc_allocation_is_suspended_and_resumed_as_a_batch_job_is(cluster: Harness) -> None:
    h = cluster
    uid = ensure_user("mustertest")
    name = f"alloc-{os.getpid()}"
    loop = f"echo $SLURM_JOB_ID > {name}.id; while :; do echo t >> {name}; sleep 0.25; done"
    srun = subprocess.Popen(
        # salloc's allocation, its srun step with a 15 s limit of its own, which does not run
        # while the job is suspended
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "salloc", "-n1", "--mem=100M"]
        + ["srun", "-t", "0:15", "sh", "-c", loop],
        cwd=h.workdir,
        env=h.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    job = 0
    try:
        wait_for(lambda: _ticks(h, name) > 0, 60, what="the allocation's step to tick")
        ticking = time.monotonic()  # the step started before this
        job = int(h.read(f"{name}.id"))
        assert h.job(job)["spec"]["interactive"] is True
        out = _scontrol(h, "suspend", str(job))
        assert out.returncode == 0 and not out.stderr, out.stderr
        _wait_freezer(h, job, "FROZEN")  # its step's task, frozen in the job's cgroup
        assert h.job(job)["state"] == "SUSPENDED"
        steps = h.run(["squeue", "-s", "-j", str(job), "-h", "-o", "%i %T"]).stdout.splitlines()
        assert f"{job}.0 SUSPENDED" in steps, steps
        ticks = _ticks(h, name)
        h.wait_passes(3)
        assert _ticks(h, name) == ticks
        # kept suspended past the step's 15 s limit in wall time: its node does not time it
        # out meanwhile
        wait_for(lambda: time.monotonic() > ticking + 17, 60, what="the limit's wall time to pass")
        out = _scontrol(h, "resume", str(job))
        assert out.returncode == 0 and not out.stderr, out.stderr
        _wait_freezer(h, job, "THAWED")
        wait_for(lambda: _ticks(h, name) > ticks, 60, what="the resumed allocation to tick")
        assert h.job(job)["state"] == "RUNNING"
    finally:
        if job:
            h.run(["scancel", str(job)])
        else:
            srun.terminate()
        srun.wait(timeout=60)
    if job:
        assert h.wait_job(job)["state"] == "CANCELLED"


def test_a_job_sent_sigstop_shows_stopped_until_sigcont(cluster: Harness) -> None:
    """``scancel --signal=STOP`` stops every task (srun, stopped too, could not forward it)
    and the job shows STOPPED (``ST``), as Slurm shows it, until ``--signal=CONT``."""
    h = cluster
    job = _running_with_step(h)
    try:
        assert h.run(["scancel", "--signal=STOP", str(job)]).returncode == 0
        assert h.run(["squeue", "-j", str(job), "-h", "-o", "%t %T"]).stdout.split() == ["ST", "STOPPED"]
        assert "JobState=STOPPED " in _scontrol(h, "show", "job", str(job)).stdout
        wait_for(lambda: _step_states(h, job) == {"T"}, 30, what="the step's processes stopped")
        assert h.run(["scancel", "--signal=CONT", str(job)]).returncode == 0
        assert h.run(["squeue", "-j", str(job), "-h", "-o", "%t"]).stdout.strip() == "R"
        wait_for(lambda: "T" not in _step_states(h, job), 30, what="the step's processes continued")
    finally:
        h.run(["scancel", str(job)])
    h.wait_job(job)


def test_refusals_leave_the_job_as_it_was(cluster: Harness) -> None:
    h = cluster
    uid = ensure_user("mustertest")
    out = _scontrol(h, "suspend", "999999")
    assert out.returncode == 1 and out.stderr == "Invalid job id specified for job 999999\n", out.stderr
    held = h.sbatch("-H", "--wrap", "true", uid=uid)
    out = _scontrol(h, "suspend", str(held))
    assert out.returncode == 1 and out.stderr == f"Job is pending execution for job {held}\n", out.stderr
    assert h.job(held)["state"] == "PENDING"
    h.run(["scancel", str(held)])
    job = _running_with_step(h)
    try:
        mine = _scontrol(h, "suspend", str(job), uid=uid)  # the job's own user is no operator
        assert mine.returncode == 1 and mine.stderr == f"Access/permission denied for job {job}\n", mine.stderr
        assert h.job(job)["state"] == "RUNNING" and _freezer(h, job) == "THAWED"
    finally:
        h.run(["scancel", str(job)])
    h.wait_job(job)


def test_suspended_time_does_not_count_and_survives_restarts(cluster: Harness) -> None:
    """A job suspended for longer than the time it had left, its agent and the controller
    restarted meanwhile, is resumed (not timed out) and counts only its running time. Its
    limit is set once it is suspended (what it ran, plus 30 s): however slow its start on a
    loaded machine, only the suspension can outlast it."""
    h = cluster
    job = _running_with_step(h, "-t", "10:00")
    try:
        assert _scontrol(h, "suspend", str(job)).returncode == 0
        _wait_freezer(h, job, "FROZEN")
        got = h.job(job)
        since = float(got["suspended_at"])
        limit = int(since - float(got["start_time"])) + 31  # what it ran, rounded up, and 30 s
        out = _scontrol(h, "update", f"jobid={job}", f"TimeLimit={limit // 60}:{limit % 60:02d}")
        assert out.returncode == 0, out.stderr
        pid = h.agent_pid("node1")
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not process_running(pid), 30, what="the agent to stop")
        ctld = h.cluster._alive("musterctld")  # noqa: SLF001 - the harness has no accessor
        assert ctld is not None
        os.kill(ctld, signal.SIGTERM)
        wait_for(lambda: not process_running(ctld), 30, what="the controller to stop")
        h.up()  # both again, on the same state
        assert _freezer(h, job) == "FROZEN"
        wait_for(lambda: h.job(job)["state"] == "SUSPENDED", 30, what="the job still suspended")
        wait_for(lambda: time.time() > since + 35, 90, what="the time limit's wall time to pass")
        assert h.job(job)["state"] == "SUSPENDED"
        out = _scontrol(h, "resume", str(job))
        assert out.returncode == 0, out.stderr
        got = h.job(job)
        assert got["state"] == "RUNNING" and got["suspended_secs"] >= 35, got
        _wait_freezer(h, job, "THAWED")
        ticks = _ticks(h, f"tick-{job}")
        wait_for(lambda: _ticks(h, f"tick-{job}") > ticks, 60, what="the resumed job to tick")
        suspended = h.run(["sacct", "-j", str(job), "-X", "-n", "-P", "-o", "Suspended"]).stdout.strip()
        assert suspended >= "00:00:35", suspended
    finally:
        h.run(["scancel", str(job)])
    assert h.wait_job(job)["state"] == "CANCELLED"  # not TIMEOUT: it was cancelled first


@pytest.fixture(scope="module")
def plain() -> Iterator[Harness]:
    """A node that tracks jobs by their processes alone (no cgroups configured)."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    h = Harness(  # naming ProctrackType opts out of the cgroups muster up turns on
        ClusterShape(nodes=1, gpus_per_node=0, cpus_per_node=4, mem_per_node=4000),
        settings={"ProctrackType": "proctrack/linuxproc"},
    )
    try:
        h.up()
        yield h
    finally:
        h.down()


def _job_states(h: Harness, job_id: int) -> dict[int, str]:
    """The /proc states of the job's processes (found by the environment the agent gave them)."""
    marks = (f"SLURM_JOB_ID={job_id}".encode(), f"SLURM_CONF={h.cluster.conf_path}".encode())
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
            if all(m in env for m in marks):
                with open(f"/proc/{entry}/stat") as f:
                    out[int(entry)] = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
    return out


def test_without_cgroups_suspend_stops_every_process_and_resume_continues_them(plain: Harness) -> None:
    h = plain
    assert "Containment=none\n" in _scontrol(h, "show", "node", "node1").stdout
    assert h.run(["sinfo", "-N", "-h", "-o", "%N %K"]).stdout.split() == ["node1", "none"]
    job = _running_with_step(h)
    try:
        assert _scontrol(h, "suspend", str(job)).returncode == 0
        wait_for(lambda: set(_job_states(h, job).values()) == {"T"}, 30, what="every process of the job stopped")
        assert len(_job_states(h, job)) >= 4  # the script, its srun, the step's task, their sleeps
        assert h.run(["squeue", "-j", str(job), "-h", "-o", "%t"]).stdout.strip() == "S"
        assert _scontrol(h, "resume", str(job)).returncode == 0
        wait_for(lambda: "T" not in _job_states(h, job).values(), 30, what="every process continued")
        ticks = _ticks(h, f"tick-{job}")
        wait_for(lambda: _ticks(h, f"tick-{job}") > ticks, 60, what="the resumed job to tick")
    finally:
        h.run(["scancel", str(job)])
    assert h.wait_job(job)["state"] == "CANCELLED"


UNIFIED = next((p for p in (CGROUP, f"{CGROUP}/unified") if os.path.exists(f"{p}/cgroup.controllers")), None)


@pytest.fixture(scope="module")
def unified() -> Iterator[Harness]:
    """A node that tracks jobs in cgroup v2 (tracking only: no controller need be delegated)."""
    if os.geteuid() != 0 or UNIFIED is None:
        pytest.skip("needs root and a cgroup2 mount")
    h = Harness(ClusterShape(nodes=1, gpus_per_node=0, cpus_per_node=4, mem_per_node=4000), settings=CONFINED)
    h.cluster.create(h.shape, h.settings)
    with open(os.path.join(os.path.dirname(h.cluster.conf_path), "cgroup.conf"), "w") as f:
        f.write("CgroupPlugin=cgroup/v2\n")
    try:
        h.up()
        yield h
    finally:
        h.down()


def _v2_job(h: Harness, job_id: int, name: str) -> str:
    assert UNIFIED is not None
    with open(os.path.join(h.cluster.state_dir, "nodes", "node1", "instance")) as f:
        node = f"node1_{f.read().strip()}"
    with open(os.path.join(UNIFIED, "muster", node, f"job_{job_id}", name)) as f:
        return f.read()


def test_on_cgroup_v2_suspend_sets_cgroup_freeze(unified: Harness) -> None:
    h = unified
    assert h.run(["sinfo", "-N", "-h", "-o", "%N %K"]).stdout.split() == ["node1", "cgroup/v2:freeze"]
    job = _running_with_step(h)
    try:
        assert _scontrol(h, "suspend", str(job)).returncode == 0
        wait_for(lambda: "frozen 1" in _v2_job(h, job, "cgroup.events"), 30, what="the job's cgroup frozen")
        assert _v2_job(h, job, "cgroup.freeze").strip() == "1"
        assert _scontrol(h, "resume", str(job)).returncode == 0
        wait_for(lambda: "frozen 0" in _v2_job(h, job, "cgroup.events"), 30, what="the job's cgroup thawed")
        ticks = _ticks(h, f"tick-{job}")
        wait_for(lambda: _ticks(h, f"tick-{job}") > ticks, 60, what="the resumed job to tick")
    finally:
        h.run(["scancel", str(job)])
    assert h.wait_job(job)["state"] == "CANCELLED"
