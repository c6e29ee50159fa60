"""Jobs confined by cgroups on their node (ProctrackType=proctrack/cgroup,
TaskPlugin=task/cgroup, cgroup.conf): real memory limits and OOM kills, real device
denials on emulated GPU device nodes, a daemon that escaped its session and cleared its
environment killed at the job's end, and a node that cannot confine jobs drained with
the reason. Needs root and a writable cgroup v1 hierarchy (skipped otherwise)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import tempfile
import time
from collections.abc import Iterator

import pytest

from cgroupprobe import CGROUP, CONFINED, v1_unusable
from harness import Harness, ensure_user, process_running
from muster.cluster.local import ClusterShape
from waiting import wait_for

pytestmark = pytest.mark.integration

# Emulated GPUs: device nodes of drivers every Linux has (/dev/full, /dev/zero), so that an
# allowed open really succeeds and a denied one fails in the device cgroup with EPERM.
GPU_DEVICES = [(1, 7), (1, 5)]


SKIP = v1_unusable(("freezer", "memory", "devices"))


def _wait(cond, what: str, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    wait_for(cond, timeout, what=what)


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Harness, str]]:
    if SKIP:
        pytest.skip(SKIP)
    devdir = tempfile.mkdtemp(prefix="muster-gpudev-")
    os.chmod(devdir, 0o755)
    for i, (major, minor) in enumerate(GPU_DEVICES):
        os.mknod(os.path.join(devdir, f"gpu{i}"), 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(os.path.join(devdir, f"gpu{i}"), 0o666)
    h = Harness(ClusterShape(nodes=1, gpus_per_node=2, cpus_per_node=2, mem_per_node=4000), settings=CONFINED)
    h.cluster.create(h.shape, h.settings)
    with open(os.path.join(os.path.dirname(h.cluster.conf_path), "cgroup.conf"), "w") as f:
        f.write(
            "CgroupPlugin=cgroup/v1\nConstrainRAMSpace=yes\nConstrainDevices=yes\n"
            f"GpuDeviceFiles={devdir}/gpu[0-1]  # muster's own key\n"
        )
    instance = ""
    try:
        h.up()
        with open(os.path.join(h.cluster.state_dir, "nodes", "node1", "instance")) as f:
            instance = f.read().strip()  # the node's cgroup directory is muster/node1_<instance>
        yield h, devdir
    finally:
        h.down()
        shutil.rmtree(devdir, ignore_errors=True)
        mine = f"node1_{instance}" if instance else None
        leftovers = [
            path
            for ctl in ("freezer", "memory", "devices")
            if mine and os.path.isdir(path := os.path.join(CGROUP, ctl, "muster", mine))
        ]
        assert not leftovers, f"cgroups left behind: {leftovers}"


def _job_cgroups(h: Harness, job_id: int) -> list[str]:
    """The job's cgroup directories that still exist (this cluster's node only: other
    clusters on the host have jobs of the same ids)."""
    with open(os.path.join(h.cluster.state_dir, "nodes", "node1", "instance")) as f:
        node = f"node1_{f.read().strip()}"
    paths = [os.path.join(CGROUP, ctl, "muster", node, f"job_{job_id}") for ctl in ("freezer", "memory", "devices")]
    return [p for p in paths if os.path.isdir(p)]


def test_a_job_over_its_mem_ends_out_of_memory_with_slurms_line(cluster: tuple[Harness, str]) -> None:
    h, _ = cluster
    uid = ensure_user("mustertest")
    script = (
        "#!/bin/sh\n"
        "cat /proc/self/cgroup\n"
        "python3 -c \"b = bytearray(400 * 2**20); b[::4096] = b'x' * (len(b) // 4096); print('survived')\"\n"
        "echo after\n"
    )
    job = h.sbatch("--mem=64M", "-o", "oom-%j.out", uid=uid, input=script)
    done = h.wait_job(job)
    assert done["state"] == "OUT_OF_MEMORY", done
    out = h.read(f"oom-{job}.out")
    assert "survived" not in out and "after" in out  # the kernel killed the allocator, not the shell
    assert f"slurmstepd: error: Detected 1 oom_kill event in StepId={job}.batch. " in out, out
    assert "Some of the step tasks have been OOM Killed." in out
    assert re.search(rf"memory:/muster/node1_\w+/job_{job}/step_batch/task_0\n", out), out
    show = h.run(["scontrol", "show", "job", str(job)]).stdout
    assert "JobState=OUT_OF_MEMORY Reason=OutOfMemory" in show and "ExitCode=0:125" in show, show
    acct = h.run(["sacct", "-j", str(job), "-n", "-P", "-o", "JobID,State,ExitCode,MaxRSS"]).stdout
    assert f"{job}|OUT_OF_MEMORY|0:125|" in acct, acct
    _wait(lambda: not _job_cgroups(h, job), "the job's cgroups to be removed")


def test_a_step_over_the_jobs_mem_is_confined_in_the_jobs_cgroup(cluster: tuple[Harness, str]) -> None:
    h, _ = cluster
    uid = ensure_user("mustertest")
    script = (
        "#!/bin/sh\n"
        "srun -n2 -l grep memory: /proc/self/cgroup\n"
        "srun -n1 python3 -c \"b = bytearray(400 * 2**20); b[::4096] = b'x' * (len(b) // 4096); print('survived')\"\n"
        "echo srun said $?\n"
    )
    job = h.sbatch("-n2", "--mem=64M", "-o", "step-%j.out", uid=uid, input=script)
    assert h.wait_job(job)["state"] == "OUT_OF_MEMORY"
    out = h.read(f"step-{job}.out")
    for task in (0, 1):  # each task in its own cgroup, in the step's
        assert re.search(rf"{task}: \d+:memory:/muster/node1_\w+/job_{job}/step_0/task_{task}\n", out), out
    assert "survived" not in out and "srun said 0" not in out, out
    # srun prints slurmstepd's line for its step, once, and Slurm's word for the task
    assert out.count(f"slurmstepd: error: Detected 1 oom_kill event in StepId={job}.1. ") == 1, out
    assert "srun: error: node1: task 0: Out Of Memory" in out, out
    assert f"StepId={job}.batch" not in out
    acct = h.run(["sacct", "-j", str(job), "-n", "-P", "-o", "JobID,State,ExitCode"]).stdout
    # the step's row and the job's (a batch job whose step was OOM killed, as in Slurm)
    assert f"{job}.0|COMPLETED|0:0" in acct and f"{job}.1|OUT_OF_MEMORY|0:125" in acct, acct
    assert f"{job}|OUT_OF_MEMORY|0:125" in acct, acct
    _wait(lambda: not _job_cgroups(h, job), "the job's cgroups to be removed")


# A task that holds 40 MiB while a program it started touches 40 MiB more: getrusage's max
# RSS is one process's (about 50 MiB), the task's cgroup's peak counts both.
HOLD_AND_SPAWN = (
    "python3 -c \"import subprocess, sys; b = bytearray(40 * 2**20); b[::4096] = b'x' * (len(b) // 4096); "
    "subprocess.run([sys.executable, '-c', 'c = bytearray(40 * 2**20); c[::4096] = bytes(len(c) // 4096)']); "
    'print(len(b))"\n'
)


def test_maxrss_of_the_batch_step_and_of_a_step_is_the_cgroups_peak(cluster: tuple[Harness, str]) -> None:
    h, _ = cluster
    script = "#!/bin/sh\n" + HOLD_AND_SPAWN + "srun -n1 " + HOLD_AND_SPAWN
    job = h.sbatch("--mem=300M", "-o", "rss-%j.out", input=script)
    assert h.wait_job(job)["state"] == "COMPLETED"
    assert h.read(f"rss-{job}.out").split() == [str(40 * 2**20)] * 2
    acct = h.run(["sacct", "-j", str(job), "-n", "-P", "--noconvert", "-o", "JobID,MaxRSS,AveRSS"]).stdout
    rows = {line.split("|")[0]: line.split("|")[1:] for line in acct.splitlines() if line}
    for step in (f"{job}.batch", f"{job}.0"):
        max_rss, ave_rss = (int(v.rstrip("K") or 0) for v in rows[step])
        assert max_rss >= 80 * 1024, acct  # both processes' 40 MiB, not the largest one's
        assert max_rss < 300 * 1024 and ave_rss == max_rss, acct  # one task


def test_a_job_within_its_mem_completes_under_its_limit(cluster: tuple[Harness, str]) -> None:
    h, _ = cluster
    script = (
        "#!/bin/sh\n"
        'cg=$(sed -n "s/^[0-9]*:memory://p" /proc/self/cgroup)\n'
        'cat /sys/fs/cgroup/memory$(dirname "$(dirname "$cg")")/memory.limit_in_bytes\n'  # the job's
    )
    job = h.sbatch("--mem=96M", "-o", "fits-%j.out", input=script)
    assert h.wait_job(job)["state"] == "COMPLETED"
    assert h.read(f"fits-{job}.out").split() == [str(96 * 2**20)]
    # a job that asked for no memory gets the node's, as in Slurm (RealMemory=4000)
    job = h.sbatch("-o", "fits-%j.out", input=script)
    assert h.wait_job(job)["state"] == "COMPLETED"
    assert h.read(f"fits-{job}.out").split() == [str(4000 * 2**20)]


HOLD_UNTIL_CANCELLED = (
    "import os, subprocess, sys; b = bytearray(40 * 2**20); b[::4096] = b'x' * (len(b) // 4096); "
    "subprocess.run([sys.executable, '-c', 'import os, time; c = bytearray(40 * 2**20); "
    'c[::4096] = bytes(len(c) // 4096); open("held." + os.environ["SLURM_JOB_ID"], "w").close(); '
    "time.sleep(600)'])"
)


def test_sstat_rss_of_a_confined_task_is_its_cgroups(cluster: tuple[Harness, str]) -> None:
    h, _ = cluster
    with open(os.path.join(h.workdir, "hold.py"), "w") as f:
        f.write(HOLD_UNTIL_CANCELLED + "\n")
    job = h.sbatch("--mem=300M", "-o", "/dev/null", "--wrap", "srun -n1 python3 hold.py")
    try:
        _wait(lambda: os.path.exists(os.path.join(h.workdir, f"held.{job}")), "the task to hold its memory", 120)
        out = h.run(["sstat", "-a", "-j", str(job), "-n", "-P", "-o", "JobID,MaxRSS,AveRSS"])
        assert out.returncode == 0, out.stderr
        rows = {line.split("|")[0]: line.split("|")[1:] for line in out.stdout.splitlines() if line}
        max_rss, ave_rss = (int(v.rstrip("K")) for v in rows[f"{job}.0"])
        assert 80 * 1024 <= max_rss < 300 * 1024 and ave_rss == max_rss, out.stdout  # both processes'
        assert f"{job}.batch" in rows, out.stdout
    finally:
        h.run(["scancel", str(job)])
    h.wait_job(job)
    _wait(lambda: not _job_cgroups(h, job), "the job's cgroups to be removed")


def test_mem_per_cpu_and_mem_per_gpu_are_the_jobs_limit_as_mem_is(cluster: tuple[Harness, str]) -> None:
    h, _ = cluster
    script = (
        "#!/bin/sh\n"
        'cg=$(sed -n "s/^[0-9]*:memory://p" /proc/self/cgroup)\n'
        'cat /sys/fs/cgroup/memory$(dirname "$(dirname "$cg")")/memory.limit_in_bytes\n'  # the job's
    )
    job = h.sbatch("-c2", "--mem-per-cpu=40M", "-o", "per-%j.out", input=script)
    assert h.wait_job(job)["state"] == "COMPLETED"
    assert h.read(f"per-{job}.out").split() == [str(80 * 2**20)]  # 2 CPUs x 40M
    job = h.sbatch("--gres=gpu:2", "--mem-per-gpu=48M", "-o", "per-%j.out", input=script)
    assert h.wait_job(job)["state"] == "COMPLETED"
    assert h.read(f"per-{job}.out").split() == [str(96 * 2**20)]  # 2 GPUs x 48M
    # and a job over it ends OUT_OF_MEMORY, as with --mem
    over = "#!/bin/sh\npython3 -c \"b = bytearray(400 * 2**20); b[::4096] = b'x' * (len(b) // 4096)\"\n"
    job = h.sbatch("--gres=gpu:1", "--mem-per-gpu=64M", "-o", "/dev/null", input=over)
    assert h.wait_job(job)["state"] == "OUT_OF_MEMORY"
    job = h.sbatch("-c1", "--mem-per-cpu=64M", "-o", "/dev/null", input=over)
    assert h.wait_job(job)["state"] == "OUT_OF_MEMORY"


def test_a_job_opens_only_its_own_gpu_device(cluster: tuple[Harness, str]) -> None:
    h, devdir = cluster
    uid = ensure_user("mustertest")
    script = (
        "#!/usr/bin/env python3\n"
        "import os\n"
        "mine = int(os.environ['CUDA_VISIBLE_DEVICES'])\n"
        "for i in (0, 1):\n"
        "    try:\n"
        f"        os.close(os.open('{devdir}/gpu%d' % i, os.O_RDONLY))\n"
        "        print(i, 'mine' if i == mine else 'other', 'opened')\n"
        "    except OSError as e:\n"
        "        print(i, 'mine' if i == mine else 'other', e.strerror)\n"
    )
    job = h.sbatch("--gres=gpu:1", "--mem=64M", "-o", "dev-%j.out", uid=uid, input=script)
    assert h.wait_job(job)["state"] == "COMPLETED"
    lines = sorted(h.read(f"dev-{job}.out").splitlines(), key=lambda s: s.split()[1])
    assert lines[0].split(" ", 1)[1] == "mine opened", lines
    assert lines[1].split(" ", 1)[1] == "other Operation not permitted", lines
    # the host itself (outside the job's cgroup) still opens both
    for i in (0, 1):
        os.close(os.open(os.path.join(devdir, f"gpu{i}"), os.O_RDONLY))


def test_a_daemon_that_cleared_its_environment_and_setsid_is_killed_at_the_end(
    cluster: tuple[Harness, str],
) -> None:
    h, _ = cluster
    uid = ensure_user("mustertest")
    pidfile = os.path.join(h.workdir, f"daemon-{time.monotonic_ns()}.pid")
    script = (
        "#!/usr/bin/env python3\n"
        "import os\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        open('{pidfile}.tmp', 'w').write(str(os.getpid()))\n"
        f"        os.rename('{pidfile}.tmp', '{pidfile}')\n"
        "        os.execve('/bin/sleep', ['sleep', '600'], {})  # no MUSTER_JOB_TAG, no SLURM_*\n"
        "    os._exit(0)\n"
        "os.wait()\n"
        f"while not os.path.exists('{pidfile}'): pass\n"
    )
    job = h.sbatch("--mem=64M", "-o", "/dev/null", uid=uid, input=script)
    _wait(lambda: os.path.exists(pidfile), "the daemon to start")
    with open(pidfile) as f:
        daemon = int(f.read())
    try:
        assert h.wait_job(job)["state"] == "COMPLETED"
        _wait(lambda: not process_running(daemon), "the daemon to be killed")
        _wait(lambda: not _job_cgroups(h, job), "the job's cgroups to be removed")
    finally:
        if process_running(daemon):
            os.kill(daemon, 9)


def test_a_node_that_cannot_confine_jobs_is_drained_with_the_reason() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    missing = tempfile.mkdtemp(prefix="muster-nocgroup-")
    os.rmdir(missing)  # a mount point that does not exist
    h = Harness(ClusterShape(nodes=1, gpus_per_node=0, cpus_per_node=1, mem_per_node=1000), settings=CONFINED)
    try:
        h.cluster.create(h.shape, h.settings)
        with open(os.path.join(os.path.dirname(h.cluster.conf_path), "cgroup.conf"), "w") as f:
            f.write(f"CgroupMountpoint={missing}\nConstrainRAMSpace=yes\n")
        h.up()
        _wait(lambda: "DRAIN" in h.run(["scontrol", "show", "node", "node1"]).stdout, "node1 to drain")
        show = h.run(["scontrol", "show", "node", "node1"]).stdout
        assert f"Reason=cgroup: no cgroup hierarchy under {missing} [" in show, show
        assert "cgroup: no cgroup hierarchy" in h.run(["sinfo", "-R", "-h", "-o", "%n %E"]).stdout
        job = h.sbatch("--wrap", "true")
        assert h.job(job)["state"] == "PENDING"  # never run unconfined
    finally:
        h.down()


def test_a_restarted_agent_still_kills_through_the_cgroup_and_removes_it(cluster: tuple[Harness, str]) -> None:
    h, _ = cluster
    uid = ensure_user("mustertest")
    stamp = time.monotonic_ns()
    pidfile, go = os.path.join(h.workdir, f"adopt-{stamp}.pid"), os.path.join(h.workdir, f"adopt-{stamp}.go")
    script = (
        "#!/usr/bin/env python3\n"
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        open('{pidfile}.tmp', 'w').write(str(os.getpid()))\n"
        f"        os.rename('{pidfile}.tmp', '{pidfile}')\n"
        "        os.execve('/bin/sleep', ['sleep', '600'], {})\n"
        "    os._exit(0)\n"
        "os.wait()\n"
        f"while not os.path.exists('{go}'): time.sleep(0.05)\n"
    )
    job = h.sbatch("--mem=64M", "-o", f"adopt-{stamp}.out", uid=uid, input=script)
    _wait(lambda: os.path.exists(pidfile), "the daemon to start")
    with open(pidfile) as f:
        daemon = int(f.read())
    try:
        agent = h.agent_pid("node1")
        os.kill(agent, signal.SIGTERM)
        _wait(lambda: not process_running(agent), "the agent to stop")
        assert _job_cgroups(h, job) and process_running(daemon)  # the job runs on, confined
        with open(go, "w"):  # the script ends while its agent is down, or once it is back
            pass
        h.cluster.start()
        h.cluster.wait_ready(60)
        assert h.wait_job(job)["state"] == "COMPLETED"
        _wait(lambda: not process_running(daemon), "the daemon to be killed")
        _wait(lambda: not _job_cgroups(h, job), "the job's cgroups to be removed")
    finally:
        if process_running(daemon):
            os.kill(daemon, 9)


def test_on_cgroup_v2_a_job_is_tracked_killed_and_kept_off_other_gpus() -> None:
    unified = next((p for p in (CGROUP, f"{CGROUP}/unified") if os.path.exists(f"{p}/cgroup.controllers")), None)
    if os.geteuid() != 0 or unified is None:
        pytest.skip("needs root and a cgroup v2 mount")
    devdir = tempfile.mkdtemp(prefix="muster-gpudev-")
    os.chmod(devdir, 0o755)
    for i, (major, minor) in enumerate(GPU_DEVICES):
        os.mknod(os.path.join(devdir, f"gpu{i}"), 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(os.path.join(devdir, f"gpu{i}"), 0o666)
    h = Harness(ClusterShape(nodes=1, gpus_per_node=2, cpus_per_node=2, mem_per_node=4000), settings=CONFINED)
    h.cluster.create(h.shape, h.settings)
    with open(os.path.join(os.path.dirname(h.cluster.conf_path), "cgroup.conf"), "w") as f:
        f.write(f"CgroupPlugin=cgroup/v2\nConstrainDevices=yes\nGpuDeviceFiles={devdir}/gpu[0-1]\n")
    pidfile = os.path.join(h.workdir, "v2daemon.pid")
    daemon = 0
    try:
        h.up()
        with open(os.path.join(h.cluster.state_dir, "nodes", "node1", "instance")) as f:
            node_dir = os.path.join(unified, "muster", f"node1_{f.read().strip()}")
        script = (
            "#!/usr/bin/env python3\n"
            "import os\n"
            "print(open('/proc/self/cgroup').read().splitlines()[-1])\n"
            "mine = int(os.environ['CUDA_VISIBLE_DEVICES'])\n"
            "for i in (0, 1):\n"
            "    try:\n"
            f"        os.close(os.open('{devdir}/gpu%d' % i, os.O_RDONLY))\n"
            "        print(i, 'mine' if i == mine else 'other', 'opened')\n"
            "    except OSError as e:\n"
            "        print(i, 'mine' if i == mine else 'other', e.strerror)\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            f"        open('{pidfile}.tmp', 'w').write(str(os.getpid()))\n"
            f"        os.rename('{pidfile}.tmp', '{pidfile}')\n"
            "        os.execve('/bin/sleep', ['sleep', '600'], {})\n"
            "    os._exit(0)\n"
            "os.wait()\n"
            f"while not os.path.exists('{pidfile}'): pass\n"
        )
        job = h.sbatch("--gres=gpu:1", "-o", "v2-%j.out", uid=ensure_user("mustertest"), input=script)
        assert h.wait_job(job)["state"] == "COMPLETED"
        with open(pidfile) as f:
            daemon = int(f.read())
        out = h.read(f"v2-{job}.out").splitlines()
        assert re.fullmatch(rf"0::/muster/node1_\w+/job_{job}/step_batch/task_0", out[0]), out
        mine_other = sorted(out[1:3], key=lambda s: s.split()[1])
        assert [s.split(" ", 1)[1] for s in mine_other] == ["mine opened", "other Operation not permitted"], out
        _wait(lambda: not process_running(daemon), "the daemon to be killed")
        _wait(lambda: not os.path.exists(os.path.join(node_dir, f"job_{job}")), "the job's cgroup to be removed")
    finally:
        h.down()
        shutil.rmtree(devdir, ignore_errors=True)
        if daemon and process_running(daemon):
            os.kill(daemon, 9)
