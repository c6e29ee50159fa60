"""Issue 5 with real daemons: a node that dies mid-run, and a controller killed under load."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator

import pytest

from harness import Harness, process_running, wait_for
from muster.cluster.local import ClusterShape

pytestmark = pytest.mark.integration


@pytest.fixture
def fast_failing() -> Iterator[Harness]:
    h = Harness(
        ClusterShape(nodes=4, gpus_per_node=2, cpus_per_node=4, mem_per_node=8000),
        settings={"SlurmdTimeout": "4", "KillWait": "2"},
    )
    h.up()
    try:
        yield h
    finally:
        h.down()


def test_a_dead_node_fails_its_job_which_is_requeued_and_reruns_elsewhere(fast_failing: Harness) -> None:
    h = fast_failing
    job_id = h.sbatch(
        "-N2",
        "--requeue",
        "--open-mode=append",
        "-o",
        "nf-%j.out",
        "--wrap",
        'echo "run ${SLURM_RESTART_COUNT:-0} on $SLURM_JOB_NODELIST"; sleep 8',
    )
    job = h.wait_state(job_id, "RUNNING")
    victim = job["alloc"][1]["node"]
    pid = h.cluster._alive(victim)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    # how soon is benchmarks/bench_failure.py's figure; here only that it happens
    rerun = h.wait_job(job_id, lambda j: j["restart_count"] == 1 and j["state"] == "RUNNING", timeout=60)
    assert victim not in [a["node"] for a in rerun["alloc"]]
    nodes = {n["name"]: n for n in h.cluster.api("GET", "/v1/nodes")["nodes"]}
    assert nodes[victim]["state"] == "DOWN" and nodes[victim]["reason"] == "Not responding"
    done = h.wait_job(job_id, timeout=30)
    assert done["state"] == "COMPLETED" and done["restart_count"] == 1
    lines = h.read(f"nf-{job_id}.out").splitlines()
    assert [x.split()[1] for x in lines if x.startswith("run ")] == ["0", "1"]
    # the agent comes back: ReturnToService=1 puts the node back in service
    h.cluster.start()
    h.cluster.wait_ready(30)


def test_no_requeue_ends_the_job_node_fail(fast_failing: Harness) -> None:
    h = fast_failing
    job_id = h.sbatch("-N2", "--no-requeue", "--wrap", "sleep 30")
    job = h.wait_state(job_id, "RUNNING")
    os.kill(h.cluster._alive(job["alloc"][1]["node"]), signal.SIGKILL)
    assert h.wait_job(job_id, timeout=30)["state"] == "NODE_FAIL"
    h.cluster.start()
    h.cluster.wait_ready(30)


def test_a_restarted_agent_ends_the_step_whose_srun_did_not_come_back(fast_failing: Harness) -> None:
    """The step's supervisor outlives the killed agent and the new agent takes the step
    back; with its srun gone too, nobody comes back for it within SlurmdTimeout (4 s
    here): the step is stopped and its tasks end."""
    h = fast_failing
    pids = os.path.join(h.workdir, "step-pids")
    srun = subprocess.Popen(
        ["srun", "-N1", "-n2", "-w", "node2", "sh", "-c", f"echo $$ >> {pids}; exec sleep 300"],
        cwd=h.workdir,
        env=h.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def started() -> bool:
            assert srun.poll() is None, "srun ended before its tasks started"
            return os.path.exists(pids) and len(h.read(pids).split()) == 2

        wait_for(started, 30, what="the tasks to start")
        tasks = [int(p) for p in h.read(pids).split()]
        os.kill(h.cluster._alive("node2"), signal.SIGKILL)
        srun.kill()
        srun.wait()
        wait_for(lambda: h.cluster._alive("node2") is None, 10, what="the killed agent to be gone")
        assert all(process_running(p) for p in tasks)  # the agent's death alone does not end them
        h.cluster.start()  # a new agent for node2 takes the step back, waits for srun, ends it
        wait_for(lambda: not any(process_running(p) for p in tasks), 30, what="the step's tasks to end")
    finally:
        if srun.poll() is None:
            srun.kill()
            srun.wait()
    h.cluster.wait_ready(30)


def test_controller_kill9_under_load_loses_no_job(fast_failing: Harness) -> None:
    h = fast_failing
    ids = [h.sbatch("--wrap", "sleep 0.2", "-o", "/dev/null") for _ in range(60)]
    os.kill(h.cluster._alive("musterctld"), signal.SIGKILL)
    wait_for(lambda: h.cluster._alive("musterctld") is None, 10, what="the killed controller to be gone")
    h.cluster.start()
    h.cluster.wait_ready(30)
    for job_id in ids:
        assert h.wait_job(job_id, timeout=120)["state"] == "COMPLETED"


def test_a_node_set_down_requeues_its_job_unless_no_kill_keeps_it_running_without_the_node(
    fast_failing: Harness,
) -> None:
    h = fast_failing
    kept = h.sbatch("-N2", "--no-kill", "--wrap", "sleep 60")
    job = h.wait_state(kept, "RUNNING")
    batch_host, other = job["alloc"][0]["node"], job["alloc"][1]["node"]
    down = h.run(["scontrol", "update", f"nodename={other}", "state=down", "reason=test_nokill"])
    assert down.returncode == 0, down.stderr
    job = h.job(kept)
    assert job["state"] == "RUNNING" and job["restart_count"] == 0
    assert [a["node"] for a in job["alloc"]] == [batch_host]
    shown = h.run(["scontrol", "show", "job", str(kept)]).stdout
    assert f"   NodeList={batch_host}\n" in shown, shown
    h.run(["scontrol", "update", f"nodename={other}", "state=resume"])
    assert h.run(["scancel", str(kept)]).returncode == 0

    requeued = h.sbatch("-N2", "--wrap", "sleep 60")
    job = h.wait_state(requeued, "RUNNING")
    other = job["alloc"][1]["node"]
    assert h.run(["scontrol", "update", f"nodename={other}", "state=down", "reason=test_kill"]).returncode == 0
    job = h.job(requeued)
    # As in Slurm: back to PENDING, restart counted, not eligible for a moment (BeginTime)
    assert (job["state"], job["restart_count"], job["reason"]) == ("PENDING", 1, "BeginTime")
    h.run(["scontrol", "update", f"nodename={other}", "state=resume"])
    job = h.wait_state(requeued, "RUNNING", timeout=30)
    assert job["restart_count"] == 1
    assert h.run(["scancel", str(requeued)]).returncode == 0
