"""The failure ledger with real daemons (docs/recovery.md): a node whose Prolog fails for two
different jobs is quarantined, ``scontrol show node`` and ``GET /v1/nodes/{name}/failures``
show its records, which survive a kill -9 of the controller, and only an operator's resume
returns it; a job whose own Prolog fails wherever it runs drains no node (no drain storm).

The Prolog fails where a flag file names the node, or the job; one cluster serves both
tests, each putting its nodes back in service.
"""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Iterator

import pytest

from harness import Harness, wait_for
from muster.cluster.local import ClusterShape

pytestmark = [pytest.mark.integration, pytest.mark.faults]

PROLOG = """#!/bin/sh
if [ -e "{flags}/node-$SLURMD_NODENAME" ] || [ -e "{flags}/job-$SLURM_JOB_ID" ]; then
  echo "prolog refuses job $SLURM_JOB_ID on $SLURMD_NODENAME"
  exit 1
fi
exit 0
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Harness]:
    root = tempfile.mkdtemp(prefix="muster-ledger-")
    flags = os.path.join(root, "flags")
    os.makedirs(flags)
    prolog = os.path.join(root, "prolog.sh")
    with open(prolog, "w") as f:
        f.write(PROLOG.format(flags=flags))
    os.chmod(prolog, 0o755)
    h = Harness(
        ClusterShape(nodes=4, gpus_per_node=1, cpus_per_node=2, mem_per_node=4000),
        root=root,
        settings={"SlurmdTimeout": "10", "KillWait": "2", "Prolog": prolog, "QuarantineFailures": "2"},
    )
    h.flags = flags  # type: ignore[attr-defined]
    try:
        h.up()  # inside: a cluster that fails to start is stopped too
        yield h
    finally:
        h.down()


def node(h: Harness, name: str) -> dict:  # type: ignore[type-arg]
    return h.cluster.api("GET", f"/v1/nodes?name={name}")["nodes"][0]  # type: ignore[no-any-return]


def wait_node(h: Harness, name: str, check, what: str, timeout: float = 60) -> dict:  # type: ignore[no-untyped-def,type-arg]
    def reached() -> dict | None:  # type: ignore[type-arg]
        n = node(h, name)
        return n if check(n) else None

    return wait_for(reached, timeout, interval=0.2, what=what)


def resume(h: Harness, name: str) -> None:
    out = h.run(["scontrol", "update", f"nodename={name}", "state=resume"])
    assert out.returncode == 0, out.stderr
    wait_node(h, name, lambda n: not n["drain"], f"{name} resumed")


def held(h: Harness, job_id: int, attempt: int) -> dict:  # type: ignore[type-arg]
    return h.wait_job(job_id, lambda j: j["restart_count"] == attempt and j["state"] == "PENDING", timeout=60)


def test_a_node_failing_for_two_jobs_is_quarantined_and_its_records_survive_a_restart(cluster: Harness) -> None:
    h = cluster
    flag = os.path.join(h.flags, "node-node1")  # type: ignore[attr-defined]
    open(flag, "w").close()
    jobs = []
    try:
        first = h.sbatch("-w", "node1", "--wrap", "true")
        jobs.append(first)
        held(h, first, 1)
        n = wait_node(h, "node1", lambda n: n["drain"], "node1 drained by its Prolog")
        assert n["reason"].startswith("Prolog error:"), n
        resume(h, "node1")  # an ordinary drain resumed: the ledger still counts the failure
        second = h.sbatch("-w", "node1", "--wrap", "true")
        jobs.append(second)
        held(h, second, 1)
        n = wait_node(h, "node1", lambda n: n["reason"].startswith("quarantined: "), "node1 quarantined")
        assert n["drain"] and n["reason"].startswith("quarantined: 2 failures in 86400 s (prolog job"), n
    finally:
        os.unlink(flag)
        h.run(["scancel", *map(str, jobs)])
    shown = h.run(["scontrol", "show", "node", "node1"]).stdout
    lines = [line.strip() for line in shown.splitlines() if line.strip().startswith("Failure=")]
    assert [line.split(" Kind=")[1].split()[0] for line in lines] == ["prolog", "prolog"], shown
    assert f"JobId={jobs[0]} Attribution=unknown Action=drained Evidence=Prolog error:" in lines[0], lines
    assert f"JobId={jobs[1]} Attribution=node" in lines[1] and "prolog refuses job" in lines[1], lines
    before = h.cluster.api("GET", "/v1/nodes/node1/failures")["failures"]
    assert [f["job_id"] for f in before] == jobs
    # kill -9 of the controller: a new one reads the ledger back from the store
    pid = h.cluster._alive("musterctld")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: h.cluster._alive("musterctld") is None, 10, what="the killed controller to be gone")
    h.cluster.start()
    h.cluster.wait_ready(60)
    assert h.cluster.api("GET", "/v1/nodes/node1/failures")["failures"] == before
    assert node(h, "node1")["reason"].startswith("quarantined: ")
    resume(h, "node1")  # the operator returns it; the ledger counts afresh
    after = h.cluster.api("GET", "/v1/nodes/node1/failures")["failures"]
    assert after[-1]["kind"] == "resume" and after[-1]["evidence"].startswith("resumed by ")
    job = h.sbatch("-w", "node1", "--wrap", "true")
    assert h.wait_job(job, timeout=60)["state"] == "COMPLETED"


def test_a_job_whose_own_prolog_fails_on_three_nodes_drains_none(cluster: Harness) -> None:
    h = cluster
    job = h.sbatch("--hold", "-x", "node1", "--wrap", "true")
    flag = os.path.join(h.flags, f"job-{job}")  # type: ignore[attr-defined]
    open(flag, "w").close()
    tried: list[str] = []
    try:
        for attempt in range(1, 4):  # released by its user three times: it fails on three nodes
            assert h.run(["scontrol", "release", str(job)]).returncode == 0
            held(h, job, attempt)
            failures = [
                f
                for name in ("node2", "node3", "node4")
                for f in h.cluster.api("GET", f"/v1/nodes/{name}/failures")["failures"]
                if f["job_id"] == job
            ]
            tried = sorted({f["node"] for f in failures})
            states = {name: node(h, name) for name in ("node2", "node3", "node4")}
            if attempt > 1:  # the job's own failure from the second node on: nothing stays drained
                drained = {k: v["reason"] for k, v in states.items() if v["drain"]}
                assert not drained, (attempt, drained, failures)
    finally:
        os.unlink(flag)
        h.run(["scancel", str(job)])
    assert len(tried) >= 2, tried  # ran on other nodes, never drained one
    kinds = {f["attribution"] for name in tried for f in h.cluster.api("GET", f"/v1/nodes/{name}/failures")["failures"]}
    assert "job" in kinds
