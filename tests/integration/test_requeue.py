"""Issue 5 with real daemons: requeue (from inside the job too), node drain/resume."""

from __future__ import annotations

import os

import pytest

from harness import Harness

pytestmark = pytest.mark.integration


def test_scontrol_requeue_from_inside_the_job_reruns_it_under_the_same_id(cluster: Harness) -> None:
    script = os.path.join(cluster.workdir, "requeue_me.sh")
    with open(script, "w") as f:
        f.write(
            "#!/bin/bash\n#SBATCH -o requeue-%j.out\n"
            'echo "attempt ${SLURM_RESTART_COUNT:-0}"\n'
            'if [ -z "$SLURM_RESTART_COUNT" ]; then scontrol requeue $SLURM_JOB_ID; sleep 30; exit 255; fi\n'
            "echo finished\n"
        )
    job_id = cluster.sbatch(script)
    job = cluster.wait_job(job_id, lambda j: j["restart_count"] == 1 and j["state"] == "COMPLETED", timeout=60)
    assert job["exit_code"] == 0
    lines = cluster.read(f"requeue-{job_id}.out").splitlines()
    assert [x for x in lines if not x.startswith("slurmstepd: ")] == ["attempt 0", "attempt 1", "finished"]
    assert any("DUE TO JOB REQUEUE" in x for x in lines)  # appended to, not truncated


def test_requeuehold_leaves_the_job_held(cluster: Harness) -> None:
    job_id = cluster.sbatch("--wrap", "sleep 60")
    cluster.wait_state(job_id, "RUNNING")
    out = cluster.run(["scontrol", "requeuehold", str(job_id)])
    assert out.returncode == 0, out.stderr
    job = cluster.job(job_id)
    assert job["state"] == "PENDING" and job["restart_count"] == 1 and job["reason"] == "JobHeldAdmin"
    cluster.run(["scancel", str(job_id)])


def test_a_drained_node_takes_no_new_jobs_until_resumed(cluster: Harness) -> None:
    out = cluster.run(["scontrol", "update", "NodeName=node[1-3]", "State=DRAIN", "Reason=maintenance"])
    assert out.returncode == 0, out.stderr
    try:
        assert "Reason=maintenance" in cluster.run(["scontrol", "show", "node", "node1"]).stdout
        job = cluster.wait_job(cluster.sbatch("-N1", "--wrap", "hostname"))
        assert job["nodelist"] == "node4"
        denied = cluster.run(["scontrol", "update", "NodeName=node4", "State=DRAIN", "Reason=x"], uid=65534)
        assert denied.returncode == 1 and "Access/permission denied" in denied.stderr
        missing = cluster.run(["scontrol", "update", "NodeName=node4", "State=DRAIN"])
        assert missing.returncode == 1 and "must specify a reason" in missing.stderr
    finally:
        cluster.run(["scontrol", "update", "NodeName=node[1-3]", "State=RESUME"])
    nodes = {n["name"]: n for n in cluster.cluster.api("GET", "/v1/nodes")["nodes"]}
    assert not any(nodes[n]["drain"] for n in ("node1", "node2", "node3"))
