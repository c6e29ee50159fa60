"""Issue 2 end to end: real controller and agents on loopback, the real commands."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from harness import Harness, wait_for

pytestmark = pytest.mark.integration


def test_sbatch_wrap_runs_and_writes_its_output_file(cluster: Harness) -> None:
    out = cluster.run(["sbatch", "--wrap", "echo hi from $SLURM_JOB_ID on $SLURMD_NODENAME"])
    assert out.returncode == 0, out.stderr
    m = re.fullmatch(r"Submitted batch job (\d+)\n", out.stdout)
    assert m, out.stdout
    job_id = int(m.group(1))
    job = cluster.wait_job(job_id)
    assert job["state"] == "COMPLETED" and job["exit_code"] == 0
    text = cluster.read(f"slurm-{job_id}.out")
    assert text.startswith(f"hi from {job_id} on node")


def test_a_gres_script_sees_its_own_gpus(cluster: Harness) -> None:
    script = os.path.join(cluster.workdir, "gpus.sh")
    with open(script, "w") as f:
        f.write(
            "#!/bin/bash\n#SBATCH --gres=gpu:2\n#SBATCH -J gpu-check\n#SBATCH -o gpus-%j.out\n"
            "echo CUDA=$CUDA_VISIBLE_DEVICES\necho NAME=$SLURM_JOB_NAME\n"
        )
    job_id = cluster.sbatch(script)
    job = cluster.wait_job(job_id)
    assert job["state"] == "COMPLETED"
    text = cluster.read(f"gpus-{job_id}.out")
    cuda = re.search(r"CUDA=([\d,]+)", text)
    assert cuda, text
    ids = cuda.group(1).split(",")
    assert len(ids) == 2 and len(set(ids)) == 2
    assert "NAME=gpu-check" in text
    assert job["alloc"][0]["gpu_ids"] == [int(i) for i in ids]


def test_a_failing_script_is_failed_with_its_exit_code(cluster: Harness) -> None:
    job = cluster.wait_job(cluster.sbatch("--wrap", "exit 3"))
    assert job["state"] == "FAILED" and job["exit_code"] == 3


def test_the_time_limit_is_enforced(cluster: Harness) -> None:
    job = cluster.wait_job(cluster.sbatch("-t", "0:02", "--wrap", "sleep 60"), timeout=30)
    assert job["state"] == "TIMEOUT"


def test_scancel_kills_the_whole_process_tree(cluster: Harness) -> None:
    marker = f"muster-tree-{os.getpid()}-{time.monotonic_ns()}"
    job_id = cluster.sbatch("--wrap", f"(sleep 300; echo {marker}) & setsid sleep 301 & sleep 302")
    cluster.wait_state(job_id, "RUNNING")

    def tree() -> list[str]:
        left = os.popen("pgrep -f 'sleep 30[012]' -a").read()
        return [line for line in left.splitlines() if _environ_job(line) == str(job_id)]

    wait_for(lambda: len(tree()) >= 3, 10, what="the job's three sleeps to start")
    out = cluster.run(["scancel", str(job_id)])
    assert out.returncode == 0, out.stderr
    job = cluster.wait_job(job_id)
    assert job["state"] == "CANCELLED"
    try:
        wait_for(lambda: not tree(), 10, what="the job's processes to end")
    except AssertionError:
        pytest.fail(f"processes survived scancel: {tree()}")


def _environ_job(pgrep_line: str) -> str:
    pid = pgrep_line.split()[0]
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        return env.get(b"SLURM_JOB_ID", b"").decode()
    except OSError:
        return ""


def test_a_user_cannot_cancel_another_users_job(cluster: Harness) -> None:
    job_id = cluster.sbatch("--hold", "--wrap", "true")
    out = cluster.run(["scancel", str(job_id)], uid=65534)
    assert out.returncode == 210
    assert out.stderr.strip() == f"scancel: error: Kill job error on job id {job_id}: Access/permission denied"
    assert cluster.job(job_id)["state"] == "PENDING"
    assert cluster.run(["scancel", str(job_id)]).returncode == 0
    assert cluster.wait_job(job_id)["state"] == "CANCELLED"


def test_jobs_of_another_user_run_as_that_user(cluster: Harness) -> None:
    job_id = cluster.sbatch("--wrap", "id -u; echo $SLURM_JOB_USER", uid=65534)
    job = cluster.wait_job(job_id)
    assert job["user"] == "nobody" and job["state"] == "COMPLETED"
    path = os.path.join(cluster.workdir, f"slurm-{job_id}.out")
    assert os.stat(path).st_uid == 65534
    assert cluster.read(path).split() == ["65534", "nobody"]


@pytest.mark.parametrize(
    ("args", "message", "rc"),
    [
        (["--bogus"], "sbatch: unrecognized option '--bogus'", 255),
        (["-t", "abc", "--wrap", "true"], "sbatch: error: Invalid --time specification", 255),
        (["--gres=gpu:9", "--wrap", "true"], "Requested node configuration is not available", 1),
        (["-p", "nosuch", "--wrap", "true"], "invalid partition specified: nosuch", 1),
        (["-N", "abc", "--wrap", "true"], 'sbatch: error: "abc" is not a valid node count', 255),
        (["/nonexistent/script.sh"], "sbatch: error: Unable to open file /nonexistent/script.sh", 1),
    ],
)
def test_bad_input_is_refused_clearly_and_changes_nothing(
    cluster: Harness, args: list[str], message: str, rc: int
) -> None:
    before = cluster.cluster.api("GET", "/v1/jobs")["jobs"]
    out = cluster.run(["sbatch", *args])
    assert out.returncode == rc, (out.returncode, out.stderr)
    assert message in out.stderr
    after = cluster.cluster.api("GET", "/v1/jobs")["jobs"]
    assert len(after) == len(before)


def test_squeue_and_sinfo_speak_slurms_formats(cluster: Harness) -> None:
    job_id = cluster.sbatch("--hold", "-J", "held", "--wrap", "true")
    out = cluster.run(["squeue"])
    lines = out.stdout.splitlines()
    assert lines[0] == "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)"
    row = next(line for line in lines if line.split()[0] == str(job_id))
    assert row.split()[1:] == ["gpu", "held", "root", "PD", "0:00", "1", "(JobHeldUser)"]
    info = cluster.run(["sinfo"]).stdout.splitlines()
    assert info[0] == "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST"
    assert info[1].split()[:3] == ["gpu*", "up", "infinite"]
    show = cluster.run(["scontrol", "show", "job", str(job_id)]).stdout
    assert show.startswith(f"JobId={job_id} JobName=held\n")
    assert "JobState=PENDING Reason=JobHeldUser" in show
    cluster.run(["scancel", str(job_id)])


def test_controller_kill9_loses_no_job(private_cluster: Harness) -> None:
    h = private_cluster
    running = [h.sbatch("--gres=gpu:4", "--wrap", "sleep 4") for _ in range(2)]
    queued = [h.sbatch("--gres=gpu:4", "--wrap", "true") for _ in range(3)]
    for job_id in running:
        h.wait_state(job_id, "RUNNING")
    pid = h.cluster._alive("musterctld")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: h.cluster._alive("musterctld") is None, 10, what="the killed controller to be gone")
    h.cluster.start()
    h.cluster.wait_ready(30)
    for job_id in running + queued:
        job = h.wait_job(job_id, timeout=90)
        assert job["state"] == "COMPLETED", job


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"{not json", "not valid JSON"),
        (b'{"spec": {"cpus_per_task": -1}}', "cpus_per_task"),
        (b'{"spec": {"bogus": 1}}', "bogus"),
        (b'{"spec": {"workdir": "relative"}}', "workdir"),
    ],
)
def test_a_malformed_api_body_gets_a_400_naming_the_problem(cluster: Harness, body: bytes, needle: str) -> None:
    import socket as _socket

    before = len(cluster.cluster.api("GET", "/v1/jobs")["jobs"])
    sock = _socket.socket(_socket.AF_UNIX)
    sock.connect(cluster.cluster.config().ctld_socket)
    sock.sendall(
        b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
    raw = b""
    while chunk := sock.recv(65536):
        raw += chunk
    sock.close()
    assert raw.startswith(b"HTTP/1.1 400"), raw[:100]
    assert needle.encode() in raw
    assert len(cluster.cluster.api("GET", "/v1/jobs")["jobs"]) == before


def test_agent_routes_refuse_unsigned_requests(cluster: Harness) -> None:
    from muster.protocol.client import ApiError, request

    cfg = cluster.cluster.config()
    with pytest.raises(ApiError) as err:
        request("POST", "/v1/agent/job_done", {"node": "node1", "job_id": 1}, address=(cfg.ctld_addr, cfg.ctld_port))
    assert err.value.status == 401
    with pytest.raises(ApiError) as err:  # and users on TCP without a credential
        request("POST", "/v1/jobs", {"spec": {}}, address=(cfg.ctld_addr, cfg.ctld_port))
    assert err.value.status == 401


def test_lowering_a_running_jobs_time_limit_reaches_its_node(cluster: Harness) -> None:
    job_id = cluster.sbatch("-t", "10", "--wrap", "sleep 60")
    cluster.wait_state(job_id, "RUNNING")
    out = cluster.run(["scontrol", "update", f"JobId={job_id}", "TimeLimit=0:02"])
    assert out.returncode == 0, out.stderr
    assert cluster.wait_job(job_id, timeout=30)["state"] == "TIMEOUT"
