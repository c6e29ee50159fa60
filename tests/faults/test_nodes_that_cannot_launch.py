"""Faults of a node, with real daemons: a spool it cannot write, a Prolog or an Epilog that
fails, a health check that fails; and, apart from those, launches that fail by the job's
own fault (which must not drain anything).

The site programs fail on a node when a flag file names it, so one cluster serves every
test here; each test puts its nodes back in service.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

from harness import Harness, wait_for
from muster.cluster.local import ClusterShape

pytestmark = [pytest.mark.integration, pytest.mark.faults]

HOOK = """#!/bin/sh
# {kind}: fails where a flag file names this node; notes each run otherwise.
if [ -e "{flags}/{kind}-fail-$SLURMD_NODENAME" ]; then
  echo "{kind} refuses $SLURMD_NODENAME"
  exit 1
fi
echo "$SLURM_JOB_ID $SLURM_JOB_USER" >> "{flags}/{kind}-ran-$SLURMD_NODENAME"
exit 0
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Harness]:
    root = tempfile.mkdtemp(prefix="muster-faults-")
    flags = os.path.join(root, "flags")
    os.makedirs(flags)
    programs = {}
    for kind in ("prolog", "epilog", "health"):
        path = programs[kind] = os.path.join(root, f"{kind}.sh")
        with open(path, "w") as f:
            f.write(HOOK.format(kind=kind, flags=flags))
        os.chmod(path, 0o755)
    h = Harness(
        ClusterShape(nodes=4, gpus_per_node=2, cpus_per_node=4, mem_per_node=8000),
        root=root,
        settings={
            "SlurmdTimeout": "10",
            "KillWait": "2",
            "Prolog": programs["prolog"],
            "Epilog": programs["epilog"],
            "HealthCheckProgram": programs["health"],
            "HealthCheckInterval": "1",
        },
    )
    h.up()
    h.flags = flags  # type: ignore[attr-defined]
    try:
        yield h
    finally:
        h.down()


def flag(h: Harness, kind: str, node: str) -> str:
    return os.path.join(h.flags, f"{kind}-fail-{node}")  # type: ignore[attr-defined]


def node(h: Harness, name: str) -> dict:
    return next(n for n in h.cluster.api("GET", "/v1/nodes")["nodes"] if n["name"] == name)


def wait_node(h: Harness, name: str, check, timeout: float = 30) -> dict:  # type: ignore[no-untyped-def]
    seen: list[dict] = []  # type: ignore[type-arg]

    def reached() -> dict | None:  # type: ignore[type-arg]
        seen[:] = [node(h, name)]
        return seen[0] if check(seen[0]) else None

    try:
        return wait_for(reached, timeout, interval=0.1, what=f"node {name}")
    except AssertionError:
        n = seen[0]
        raise AssertionError(f"node {name}: {n['state']} drain={n['drain']} {n['reason']!r}") from None


def resume(h: Harness, name: str) -> None:
    out = h.run(["scontrol", "update", f"nodename={name}", "state=resume"])
    assert out.returncode == 0, out.stderr
    wait_node(h, name, lambda n: not n["drain"])


def spool_of(h: Harness, name: str) -> str:
    return os.path.join(h.cluster.state_dir, "nodes", name, "spool")


@pytest.mark.skipif(os.geteuid() != 0, reason="a read-only mount needs root")
def test_a_node_whose_spool_is_read_only_is_drained_and_every_job_completes_elsewhere(
    cluster: Harness,
) -> None:
    h = cluster
    spool = spool_of(h, "node1")
    subprocess.run(["mount", "--bind", spool, spool], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", spool], check=True)
        jobs = [
            h.sbatch("-c1", "-o", f"ro-{i}.out", "--wrap", f"echo job {i} on $(hostname) $SLURMD_NODENAME")
            for i in range(20)
        ]
        ended = [h.wait_job(j, timeout=90) for j in jobs]
    finally:
        subprocess.run(["umount", spool], check=False)
    assert [j["state"] for j in ended] == ["COMPLETED"] * 20, [(j["job_id"], j["state"]) for j in ended]
    for i, j in enumerate(ended):
        assert j["alloc"][0]["node"] != "node1"
        assert h.read(f"ro-{i}.out").startswith(f"job {i} on ")
    failed_there = [j for j in ended if j["restart_count"]]
    assert 1 <= len(failed_there) <= 4  # only launches sent before the first failure came back
    n = node(h, "node1")
    assert n["drain"] and n["reason"].startswith("launch failed: cannot write the batch script")
    resume(h, "node1")


def test_a_failing_prolog_drains_its_node_and_holds_the_job(cluster: Harness) -> None:
    h = cluster
    open(flag(h, "prolog", "node2"), "w").close()
    try:
        job_id = h.sbatch("-w", "node2", "-o", "prolog-%j.out", "--wrap", "echo ran")
        job = h.wait_job(job_id, lambda j: j["restart_count"] == 1 and j["state"] == "PENDING", timeout=30)
        assert job["reason"] == "launch failed requeued held"
        n = wait_node(h, "node2", lambda n: n["drain"])
        assert n["reason"].startswith("Prolog error:") and "prolog refuses node2" in n["reason"]
        shown = h.run(["scontrol", "show", "job", str(job_id)]).stdout
        assert "Reason=launch_failed_requeued_held" in shown or "launch failed requeued held" in shown
        assert "SystemComment=Launch failed on node2: Prolog error" in shown
    finally:
        os.unlink(flag(h, "prolog", "node2"))
    resume(h, "node2")
    assert h.run(["scontrol", "release", str(job_id)]).returncode == 0
    done = h.wait_job(job_id, timeout=30)
    assert done["state"] == "COMPLETED" and h.read(f"prolog-{job_id}.out") == "ran\n"
    ran = h.read(os.path.join(h.flags, "prolog-ran-node2"))  # type: ignore[attr-defined]
    assert f"{job_id} root" in ran


def test_a_failing_epilog_drains_its_node_after_the_job_completed(cluster: Harness) -> None:
    h = cluster
    open(flag(h, "epilog", "node3"), "w").close()
    try:
        job_id = h.sbatch("-w", "node3", "--wrap", "true")
        assert h.wait_job(job_id, timeout=30)["state"] == "COMPLETED"
        n = wait_node(h, "node3", lambda n: n["drain"])
        assert n["reason"].startswith("Epilog error:") and "epilog refuses node3" in n["reason"]
    finally:
        os.unlink(flag(h, "epilog", "node3"))
    resume(h, "node3")


def test_a_failing_health_check_drains_with_its_reason_and_a_pass_returns_the_node(
    cluster: Harness,
) -> None:
    h = cluster
    open(flag(h, "health", "node4"), "w").close()
    try:
        n = wait_node(h, "node4", lambda n: n["drain"])
        assert n["reason"] == "HealthCheck: health refuses node4"
        reasons = h.run(["sinfo", "-R", "-h", "-o", "%n %E"]).stdout
        assert "node4 HealthCheck: health refuses node4" in reasons
    finally:
        os.unlink(flag(h, "health", "node4"))
    wait_node(h, "node4", lambda n: not n["drain"])


def test_a_job_whose_own_directories_are_unusable_fails_with_a_reason_and_drains_nothing(
    cluster: Harness,
) -> None:
    h = cluster
    missing = h.run(["sbatch", "--parsable", "-D", "/nonexistent/dir", "--wrap", "true"])
    assert missing.returncode == 0, missing.stderr
    job = h.wait_job(int(missing.stdout.strip()), timeout=30)
    assert job["state"] == "FAILED" and job["exit_code"] == 1 and job["restart_count"] == 0
    assert job["reason"] == "JobLaunchFailure"
    assert "changing to the working directory /nonexistent/dir: No such file or directory" in job["system_comment"]
    sacct = h.run(["sacct", "-n", "-X", "-P", "-j", str(job["job_id"]), "-o", "State,SystemComment"]).stdout
    assert sacct.startswith("FAILED|Launch failed on ") and "No such file or directory" in sacct

    with open(os.path.join(h.workdir, "a-file"), "w") as f:
        f.write("not a directory\n")
    bad_out = h.sbatch("-o", "a-file/out.txt", "--wrap", "true")
    job = h.wait_job(bad_out, timeout=30)
    assert job["state"] == "FAILED" and job["reason"] == "JobLaunchFailure"
    assert "a-file/out.txt: File exists" in job["system_comment"]
    assert not any(n["drain"] for n in h.cluster.api("GET", "/v1/nodes")["nodes"])
